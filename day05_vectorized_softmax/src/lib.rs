//! Day 5: vectorized softmax. The launchers for `softmax_vec.cu`: the row in registers with
//! 16-byte loads (a tier of kernels by row length), the online two-pass and the split-row
//! kernels with 16-byte loads, and day 4's kernels as the baseline.

use anyhow::Result;
use common::dtype::Dtype;
use common::family::softmax::{
    Plan, Refused, Rows, Shape, SoftmaxDay, plan_block_per_row, plan_rows, plan_split_rows,
    split_chunks,
};
use common::gpu::kernel::KernelSet;
use common::gpu::kernel_build::KernelBuild;
use common::gpu::nvrtc::KernelSource;
use common::reference::softmax::tolerance_for;
use common::{Element, Gpu, Kernel, LaunchShape};
use cudarc::driver::PushKernelArg;
use day04::BlockSoftmax;

pub const SOURCE: KernelSource = common::kernel_source!("softmax_vec.cu");

/// What the day compiles: every kernel for the GPU's own architecture.
pub fn kernel_builds() -> Vec<KernelBuild> {
    vec![KernelBuild::device(SOURCE, all_functions())]
}

common::test_kernel_builds!();

const DTYPES: &[Dtype] = &[Dtype::F32, Dtype::F16, Dtype::Bf16];

/// Elements in one 16-byte load.
fn pack(dtype: Dtype) -> usize {
    16 / dtype.size()
}

/// The register tiers of `softmax_vec.cu`, smallest first: (threads per row, elements per
/// thread). A row of `cols` takes the first whose capacity (the product) holds it.
fn tiers(dtype: Dtype) -> [(usize, usize); 6] {
    common::family::tiers::register_tiers(dtype)
}

/// The longest row the register kernels take: 32 elements in each of 1024 threads.
pub const MAX_REGISTER_ROW: usize = 32 * 1024;

/// Threads per block for the online and split kernels.
const STREAM_THREADS: u32 = 1024;
const SPLIT_THREADS: u32 = 256;

/// `vec_split_onchip`'s block, as `softmax_vec.cu` sets it (ONCHIP_*): 1024 threads, each
/// holding 6 packs of 16 bytes in registers and 10 in shared memory.
const ONCHIP_THREADS: u32 = 1024;
const ONCHIP_SMEM_PACKS: usize = 10;
const ONCHIP_PACKS_PER_THREAD: usize = 16;

/// `vec_rows_overlap` (OVERLAP_* in `softmax_vec.cu`): at most 8 rows, 1024 threads a block,
/// each holding 2 packs of every row (one in registers, one in shared memory).
const OVERLAP_ROWS: usize = 8;
const OVERLAP_THREADS: u32 = 1024;

/// `_v` with 16-byte loads when rows start 16-byte aligned (cols a multiple of the pack),
/// `_s` with scalar loads otherwise.
fn load_suffix(dtype: Dtype, cols: usize) -> &'static str {
    if cols.is_multiple_of(pack(dtype)) {
        "v"
    } else {
        "s"
    }
}

fn regs_function(dtype: Dtype, group: usize, ept: usize, suffix: &str) -> String {
    format!("softmax_regs_{dtype}_g{group}_e{ept}_{suffix}")
}

fn all_functions() -> Vec<String> {
    let mut names = Vec::new();
    for &dtype in DTYPES {
        for suffix in ["v", "s"] {
            for (group, ept) in tiers(dtype) {
                names.push(regs_function(dtype, group, ept, suffix));
            }
            for kind in [
                "softmax_online",
                "softmax_split_stats",
                "softmax_split_write",
                "softmax_split_fused",
            ] {
                names.push(format!("{kind}_{dtype}_{suffix}"));
            }
        }
        names.push(format!("softmax_split_onchip_{dtype}_v"));
    }
    names.push("softmax_rows_overlap_f32_v".to_string());
    names
}

pub struct VecSoftmax {
    kernels: KernelSet,
    sms: usize,
}

impl VecSoftmax {
    pub fn load(gpu: &Gpu) -> Result<Self> {
        Ok(Self {
            kernels: KernelSet::load(gpu, &SOURCE, all_functions())?,
            sms: gpu.info.sms as usize,
        })
    }

    fn streaming<T: Element>(&self, kind: &str, cols: usize) -> Result<&Kernel> {
        let suffix = load_suffix(T::DTYPE, cols);
        self.kernels.get(&format!("{kind}_{}_{suffix}", T::DTYPE))
    }

    /// `vec_regs`: the row in registers, read once and written once.
    pub fn plan_regs<'a, T: Element>(&'a self, on: Rows<'a>) -> Result<Plan<'a, T>> {
        let Rows { rows, cols, .. } = on;
        let Some((group, ept)) = tiers(T::DTYPE).into_iter().find(|(g, e)| g * e >= cols) else {
            return Err(Refused(format!(
                "rows of {cols} exceed the {MAX_REGISTER_ROW} elements kept in registers \
                 (vec_online and vec_split take them)"
            ))
            .into());
        };
        let name = regs_function(T::DTYPE, group, ept, load_suffix(T::DTYPE, cols));
        let kernel = self.kernels.get(&name)?;
        let shape = if group == 32 {
            // A warp per row, 8 rows per block.
            LaunchShape::linear(rows.div_ceil(8).min(u32::MAX as usize) as u32, 256)
        } else {
            LaunchShape::linear(rows.min(u32::MAX as usize) as u32, group as u32)
        };
        // Each thread adds its elements one after another, then up to 10 tree levels.
        let tolerance = tolerance_for::<T>(ept + 10);
        // The tier holds the row (G * E >= cols), and `_v` is chosen only when every row
        // starts on a 16-byte boundary.
        Ok(plan_rows(kernel, shape, tolerance, on))
    }

    /// `vec_online`: a block per row, online max+sum then write, 16-byte loads.
    pub fn plan_online<'a, T: Element>(&'a self, on: Rows<'a>) -> Result<Plan<'a, T>> {
        let kernel = self.streaming::<T>("softmax_online", on.cols)?;
        let terms = 2 * on.cols.div_ceil(STREAM_THREADS as usize) + 10;
        plan_block_per_row(kernel, on, STREAM_THREADS, tolerance_for::<T>(terms))
    }

    /// `vec_split`: day 4's split rows (4 blocks of 256 threads per SM) with 16-byte loads;
    /// chunks are whole packs.
    pub fn plan_split<'a, T: Element>(&'a self, on: Rows<'a>) -> Result<Plan<'a, T>> {
        let stats = self.streaming::<T>("softmax_split_stats", on.cols)?;
        let write = self.streaming::<T>("softmax_split_write", on.cols)?;
        plan_split_rows(
            stats,
            write,
            on,
            SPLIT_THREADS,
            4 * self.sms,
            pack(T::DTYPE),
        )
    }
}

impl VecSoftmax {
    /// `vec_split_fused`: `vec_split` in one cooperative launch. Every block must be resident
    /// at once (blocks wait for the other chunks of their row), so the grid is refused where
    /// the GPU cannot hold it, and the driver checks it again at launch.
    pub fn plan_split_fused<'a, T: Element>(&'a self, on: Rows<'a>) -> Result<Plan<'a, T>> {
        let Rows { rows, cols, .. } = on;
        let kernel = self.streaming::<T>("softmax_split_fused", cols)?;
        if rows > 65535 {
            return Err(Refused(format!("{rows} rows exceed the grid's 65535 in y")).into());
        }
        let (chunks, chunk) = split_chunks(rows, cols, 4 * self.sms, pack(T::DTYPE));
        let resident = kernel.blocks_per_sm(SPLIT_THREADS, 0)? as usize * self.sms;
        if rows * chunks > resident {
            return Err(Refused(format!(
                "needs its {} blocks resident at once; this GPU holds {resident}",
                rows * chunks
            ))
            .into());
        }
        let shape = LaunchShape {
            grid: (chunks as u32, rows as u32, 1),
            block: (SPLIT_THREADS, 1, 1),
            dynamic_shared_bytes: 0,
        };
        let terms = 2 * chunk.div_ceil(SPLIT_THREADS as usize) + chunks + 16;
        cooperative_plan(kernel, shape, on, chunk, chunks, None, terms)
    }
}

impl VecSoftmax {
    /// `vec_split_onchip`: `vec_split_fused` with each chunk held on chip (registers and
    /// shared memory) between its summary and its write, so the input is read once. Every
    /// block must be resident at once and hold its chunk: rows x cols must fit in the blocks
    /// the GPU holds (one per SM, 256 KB of input each), and rows must be whole 16-byte packs.
    pub fn plan_split_onchip<'a, T: Element>(&'a self, on: Rows<'a>) -> Result<Plan<'a, T>> {
        let Rows { rows, cols, .. } = on;
        let n = pack(T::DTYPE);
        if !cols.is_multiple_of(n) {
            return Err(Refused(format!(
                "rows of {cols} are not whole 16-byte packs of {n} (vec_split_fused takes them)"
            ))
            .into());
        }
        let name = format!("softmax_split_onchip_{}_v", T::DTYPE);
        let kernel = self.kernels.get(&name)?;
        let capacity = ONCHIP_PACKS_PER_THREAD * ONCHIP_THREADS as usize; // packs a block holds
        let row_packs = cols / n;
        let chunks = row_packs.div_ceil(capacity);
        let chunk = row_packs.div_ceil(chunks) * n;
        let shape = LaunchShape {
            grid: (chunks as u32, rows.min(u32::MAX as usize) as u32, 1),
            block: (ONCHIP_THREADS, 1, 1),
            dynamic_shared_bytes: (ONCHIP_SMEM_PACKS * ONCHIP_THREADS as usize * 16) as u32,
        };
        let per_sm = kernel.blocks_per_sm(ONCHIP_THREADS, shape.dynamic_shared_bytes)? as usize;
        let resident = per_sm * self.sms;
        let blocks = rows.saturating_mul(chunks);
        if rows > 65535 || blocks > resident {
            return Err(Refused(format!(
                "{rows} x {cols} needs {blocks} blocks of {} KB on chip at once; this GPU holds \
                 {resident} (vec_split_fused takes it)",
                capacity * 16 / 1024
            ))
            .into());
        }
        // Per thread: up to 16 x pack exponentials summed in order, then the block's tree and
        // the merge of `chunks` summaries.
        let terms = ONCHIP_PACKS_PER_THREAD * n + 10 + chunks + 10;
        cooperative_plan(kernel, shape, on, chunk, chunks, None, terms)
    }
}

impl VecSoftmax {
    /// `vec_rows_overlap`: every block holds a chunk of every row (at most 8 rows of whole
    /// packs, f32) and writes each row as soon as its summaries are in, while later rows still
    /// arrive. Every block must be resident at once (a cooperative launch).
    pub fn plan_rows_overlap<'a, T: Element>(&'a self, on: Rows<'a>) -> Result<Plan<'a, T>> {
        let Rows { rows, cols, .. } = on;
        let n = pack(T::DTYPE);
        if T::DTYPE != Dtype::F32 {
            return Err(Refused(format!(
                "{} is not f32, the only type it is built for (vec_split_onchip takes it)",
                T::DTYPE
            ))
            .into());
        }
        if rows > OVERLAP_ROWS || !cols.is_multiple_of(n) {
            return Err(Refused(format!(
                "{rows} rows of {cols}: it takes at most {OVERLAP_ROWS} rows of whole 16-byte \
                 packs (vec_split_onchip and vec_split_fused take the others)"
            ))
            .into());
        }
        let kernel = self.kernels.get("softmax_rows_overlap_f32_v")?;
        let capacity = 2 * OVERLAP_THREADS as usize; // packs of a row a block holds
        let row_packs = cols / n;
        let blocks = row_packs.div_ceil(capacity);
        let chunk = row_packs.div_ceil(blocks); // packs
        let shape = LaunchShape {
            grid: (blocks as u32, 1, 1),
            block: (OVERLAP_THREADS, 1, 1),
            dynamic_shared_bytes: (OVERLAP_ROWS * OVERLAP_THREADS as usize * 16) as u32,
        };
        let resident =
            kernel.blocks_per_sm(OVERLAP_THREADS, shape.dynamic_shared_bytes)? as usize * self.sms;
        if blocks > resident {
            return Err(Refused(format!(
                "rows of {cols} need {blocks} blocks at once; this GPU holds {resident} \
                 (vec_split_fused takes them)"
            ))
            .into());
        }
        // Per thread: 2 packs summed online, the block's tree, then `blocks` summaries.
        let terms = 2 * n + 10 + blocks + 10;
        // Its chunk counts packs; every row's `blocks` summaries meet through its own counter.
        cooperative_plan(kernel, shape, on, chunk, blocks, Some(rows), terms)
    }
}

/// The plan of the cooperative versions (`vec_split_fused`, `vec_split_onchip`,
/// `vec_rows_overlap`), whose kernels take `(x, y, MaxSum* partials, unsigned* arrivals,
/// [rows,] cols, chunk, target)`: the row's summaries meet through `partials` (`per_row` a
/// row) and `arrivals[row]`, which counts `per_row` per launch over all launches, so `target`
/// (this launch's number times `per_row`) never needs the counters reset. `with_rows` passes
/// the rows argument the kernels that loop over rows take. A cooperative launch fails rather
/// than run with blocks that are not all resident, which would otherwise wait forever.
fn cooperative_plan<'a, T: Element>(
    kernel: &'a Kernel,
    shape: LaunchShape,
    on: Rows<'a>,
    chunk: usize,
    per_row: usize,
    with_rows: Option<usize>,
    terms: usize,
) -> Result<Plan<'a, T>> {
    let Rows { gpu, rows, cols } = on;
    let mut partials = gpu.stream.alloc_zeros::<f32>(2 * rows * per_row)?;
    let mut arrivals = gpu.stream.alloc_zeros::<u32>(rows)?;
    let mut launches: u32 = 0;
    let tolerance = tolerance_for::<T>(terms);
    Ok(Plan::new(kernel, shape, tolerance, on, move |x, out| {
        launches += 1;
        let target = launches
            .checked_mul(per_row as u32)
            .ok_or_else(|| anyhow::anyhow!("arrival counters would overflow"))?;
        let (cols, chunk) = (cols as u64, chunk as u64);
        let rows_arg = with_rows.map(|r| r as u64);
        // A cooperative launch, which `kernel_args!` does not make: the arguments are pushed
        // here one by one.
        let mut launch = gpu.stream.launch_builder(&kernel.func);
        launch.arg(x).arg(out).arg(&mut partials).arg(&mut arrivals);
        if let Some(rows_arg) = rows_arg.as_ref() {
            launch.arg(rows_arg);
        }
        launch.arg(&cols).arg(&chunk).arg(&target);
        // SAFETY: matches softmax_split_fused_<T>_<v|s>, softmax_split_onchip_<T>_v (const
        // T*, T*, MaxSum*, unsigned* arrivals, cols, chunk, unsigned target) and
        // softmax_rows_overlap_f32_v (the same with rows before cols), as `with_rows` says;
        // x and out hold rows x cols (the plan checks), partials hold `per_row` summaries of
        // every row and arrivals a counter a row; the callers checked that every chunk fits
        // its block and every row start is aligned where the kernel loads 16 bytes.
        unsafe { launch.launch_cooperative(kernel.config(&shape)?) }?;
        Ok(())
    }))
}

pub struct Day05 {
    day04: BlockSoftmax,
    vec: VecSoftmax,
}

impl SoftmaxDay for Day05 {
    const DAY: &'static str = "day05";
    const TITLE: &'static str = "vectorized softmax";
    const VERSIONS: &'static [&'static str] = &[
        "day04_block_online",
        "day04_split_row",
        "vec_regs",
        "vec_online",
        "vec_split",
        "vec_split_fused",
        "vec_split_onchip",
        "vec_rows_overlap",
    ];
    /// The five problems of the workspace's softmax targets.
    const DEFAULT_PROBLEMS: &'static [Shape] = &[
        Shape::new(32768, 4096, Dtype::F32),
        Shape::new(32768, 4096, Dtype::Bf16),
        Shape::new(4096, 32768, Dtype::F32),
        Shape::new(1 << 20, 128, Dtype::F32),
        Shape::new(8, 1 << 20, Dtype::F32),
    ];
    const DTYPES: &'static [Dtype] = DTYPES;
    const F32_ONLY: &'static [&'static str] = &["vec_rows_overlap"];

    fn load(gpu: &Gpu) -> Result<Self> {
        let (day04, vec) = (BlockSoftmax::load(gpu)?, VecSoftmax::load(gpu)?);
        Ok(Self { day04, vec })
    }

    fn plan<'a, T: Element>(&'a self, version: &str, on: Rows<'a>) -> Result<Plan<'a, T>> {
        match version {
            "day04_block_online" => self.day04.plan_row(true, on),
            "day04_split_row" => self.day04.plan_split(on),
            "vec_regs" => self.vec.plan_regs(on),
            "vec_online" => self.vec.plan_online(on),
            "vec_split" => self.vec.plan_split(on),
            "vec_split_fused" => self.vec.plan_split_fused(on),
            "vec_split_onchip" => self.vec.plan_split_onchip(on),
            "vec_rows_overlap" => self.vec.plan_rows_overlap(on),
            other => Err(Refused(format!("day05 has no version `{other}`")).into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tiers_grow_and_end_at_the_register_limit() {
        for dtype in DTYPES {
            let caps: Vec<usize> = tiers(*dtype).iter().map(|(g, e)| g * e).collect();
            assert!(caps.windows(2).all(|w| w[0] < w[1]), "{caps:?}");
            assert_eq!(*caps.last().unwrap(), MAX_REGISTER_ROW);
            assert!(tiers(*dtype).iter().all(|(_, e)| e % pack(*dtype) == 0));
        }
    }
}
