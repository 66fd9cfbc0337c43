//! Day 4: block softmax for long rows, the online softmax, and split rows. The launchers for
//! `softmax_block.cu`, with day 3's warp kernel as the baseline.

use anyhow::Result;
use common::dtype::Dtype;
use common::kernel::KernelSet;
use common::nvrtc::KernelSource;
use common::reference::softmax::tolerance_for;
use common::softmax::{Plan, Refused, Shape, SoftmaxDay, check_sizes, split_chunks};
use common::{Element, Gpu, Kernel, LaunchShape};
use cudarc::driver::PushKernelArg;
use day03::DtypeSoftmax;

pub const SOURCE: KernelSource = KernelSource {
    file_name: "softmax_block.cu",
    code: include_str!("softmax_block.cu"),
};

const DTYPES: &[Dtype] = &[Dtype::F32, Dtype::F16, Dtype::Bf16];

/// Threads per row for `block` and `block_online`: 512 gives each thread 64 elements of a
/// 32768-column row and still lets 4 blocks share an SM.
const ROW_THREADS: u32 = 512;

/// Threads per chunk in the split-row kernels.
const SPLIT_THREADS: u32 = 256;

/// The day's kernels: `<kind>_<dtype>` for each kind below.
const KINDS: &[&str] = &[
    "softmax_block",
    "softmax_block_online",
    "softmax_split_stats",
    "softmax_split_write",
];

fn function(kind: &str, dtype: Dtype) -> String {
    format!("{kind}_{dtype}")
}

/// The day's versions, any storage type.
pub struct BlockSoftmax {
    kernels: KernelSet,
    sms: usize,
}

impl BlockSoftmax {
    pub fn load(gpu: &Gpu) -> Result<Self> {
        let names = KINDS
            .iter()
            .flat_map(|k| DTYPES.iter().map(move |&d| function(k, d)));
        Ok(Self {
            kernels: KernelSet::load(gpu, &SOURCE, names)?,
            sms: gpu.info.sms as usize,
        })
    }

    fn kernel<T: Element>(&self, kind: &str) -> Result<&Kernel> {
        self.kernels.get(&function(kind, T::DTYPE))
    }

    /// `block` (three passes) or `block_online` (two), a block of 512 threads per row.
    pub fn plan_row<'a, T: Element>(
        &'a self,
        gpu: &'a Gpu,
        online: bool,
        rows: usize,
        cols: usize,
    ) -> Result<Plan<'a, T>> {
        let kernel = self.kernel::<T>(if online {
            "softmax_block_online"
        } else {
            "softmax_block"
        })?;
        if rows > i32::MAX as usize {
            return Err(Refused(format!("{rows} rows exceed the grid's 2^31 - 1 blocks")).into());
        }
        let shape = LaunchShape::linear(rows as u32, ROW_THREADS);
        let per_thread = cols.div_ceil(ROW_THREADS as usize);
        // Each thread adds its share one after another, then 10 tree levels; the online form
        // also rescales its running sum up to once per element.
        let terms = if online { 2 * per_thread } else { per_thread } + 10;
        Ok(Plan {
            kernel,
            shape,
            tolerance: tolerance_for::<T>(terms),
            launch: Box::new(move |x, out| {
                check_sizes(x.len(), out.len(), rows, cols)?;
                let config = kernel.config(&shape)?;
                let cols = cols as u64;
                let mut launch = gpu.stream.launch_builder(&kernel.func);
                launch.arg(x).arg(out).arg(&cols);
                // SAFETY: matches softmax_block[_online]_<T>(const T*, T*, index_t cols) with
                // one block per row of a rows x cols buffer.
                unsafe { launch.launch(config) }?;
                Ok(())
            }),
        })
    }

    /// `split_row`: chunks of each row on separate blocks, then a merge-and-write kernel.
    pub fn plan_split<'a, T: Element>(
        &'a self,
        gpu: &'a Gpu,
        rows: usize,
        cols: usize,
    ) -> Result<Plan<'a, T>> {
        let stats = self.kernel::<T>("softmax_split_stats")?;
        let write = self.kernel::<T>("softmax_split_write")?;
        // About 4 blocks of 256 threads per SM.
        let (chunks, chunk) = split_chunks(rows, cols, 4 * self.sms, 1);
        if rows > 65535 {
            return Err(Refused(format!("{rows} rows exceed the grid's 65535 in y")).into());
        }
        let shape = LaunchShape {
            grid: (chunks as u32, rows as u32, 1),
            block: (SPLIT_THREADS, 1, 1),
            dynamic_shared_bytes: 0,
        };
        // One (max, sum) pair of f32 per chunk.
        let mut partials = gpu.stream.alloc_zeros::<f32>(2 * rows * chunks)?;
        let terms = 2 * chunk.div_ceil(SPLIT_THREADS as usize) + chunks + 16;
        Ok(Plan {
            kernel: stats,
            shape,
            tolerance: tolerance_for::<T>(terms),
            launch: Box::new(move |x, out| {
                check_sizes(x.len(), out.len(), rows, cols)?;
                let (cols, chunk) = (cols as u64, chunk as u64);
                let mut first = gpu.stream.launch_builder(&stats.func);
                first.arg(x).arg(&mut partials).arg(&cols).arg(&chunk);
                // SAFETY: matches softmax_split_stats_<T>(const T*, MaxSum*, cols, chunk);
                // `partials` holds rows * chunks (max, sum) pairs, one per block.
                unsafe { first.launch(stats.config(&shape)?) }?;
                let mut second = gpu.stream.launch_builder(&write.func);
                second.arg(x).arg(out).arg(&partials).arg(&cols).arg(&chunk);
                // SAFETY: matches softmax_split_write_<T>(const T*, T*, const MaxSum*, cols,
                // chunk) on the same grid; the stream orders it after the stats kernel.
                unsafe { second.launch(write.config(&shape)?) }?;
                Ok(())
            }),
        })
    }
}

pub struct Day04 {
    day03: DtypeSoftmax,
    block: BlockSoftmax,
}

impl SoftmaxDay for Day04 {
    const DAY: &'static str = "day04";
    const TITLE: &'static str = "block softmax";
    const VERSIONS: &'static [&'static str] = &["day03_warp", "block", "block_online", "split_row"];
    const DEFAULT_PROBLEMS: &'static [Shape] = &[
        Shape::new(4096, 32768, Dtype::F32),
        Shape::new(8, 1 << 20, Dtype::F32),
    ];
    const DTYPES: &'static [Dtype] = DTYPES;

    fn load(gpu: &Gpu) -> Result<Self> {
        Ok(Self {
            day03: DtypeSoftmax::load(gpu)?,
            block: BlockSoftmax::load(gpu)?,
        })
    }

    fn plan<'a, T: Element>(
        &'a self,
        gpu: &'a Gpu,
        version: &str,
        rows: usize,
        cols: usize,
    ) -> Result<Plan<'a, T>> {
        match version {
            "day03_warp" => self.day03.plan(gpu, rows, cols),
            "block" => self.block.plan_row(gpu, false, rows, cols),
            "block_online" => self.block.plan_row(gpu, true, rows, cols),
            "split_row" => self.block.plan_split(gpu, rows, cols),
            other => Err(Refused(format!("day04 has no version `{other}`")).into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kernel_compiles_for_sm90_without_spilling() {
        let names: Vec<String> = KINDS
            .iter()
            .flat_map(|k| DTYPES.iter().map(move |&d| function(k, d)))
            .collect();
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        common::testing::assert_compiles_without_spills(&SOURCE, "sm_90", &names);
    }
}
