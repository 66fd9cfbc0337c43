//! Day 4: block softmax for long rows, the online softmax, and split rows. The launchers for
//! `softmax_block.cu`, with day 3's warp kernel as the baseline.

use anyhow::Result;
use common::dtype::Dtype;
use common::family::softmax::{
    Plan, Refused, Rows, Shape, SoftmaxDay, plan_block_per_row, plan_split_rows,
};
use common::gpu::kernel::KernelSet;
use common::gpu::kernel_build::KernelBuild;
use common::gpu::nvrtc::KernelSource;
use common::reference::softmax::tolerance_for;
use common::{Element, Gpu, Kernel};
use day03::DtypeSoftmax;

pub const SOURCE: KernelSource = common::kernel_source!("softmax_block.cu");

/// What the day compiles: each kind of kernel in each storage type, for the GPU's architecture.
pub fn kernel_builds() -> Vec<KernelBuild> {
    vec![KernelBuild::device(
        SOURCE,
        KINDS
            .iter()
            .flat_map(|k| DTYPES.iter().map(move |&d| function(k, d))),
    )]
}

common::test_kernel_builds!();

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
    pub fn plan_row<'a, T: Element>(&'a self, online: bool, on: Rows<'a>) -> Result<Plan<'a, T>> {
        let kind = if online {
            "softmax_block_online"
        } else {
            "softmax_block"
        };
        // Each thread adds its share one after another, then 10 tree levels; the online form
        // also rescales its running sum up to once per element.
        let per_thread = on.cols.div_ceil(ROW_THREADS as usize);
        let terms = if online { 2 * per_thread } else { per_thread } + 10;
        let tolerance = tolerance_for::<T>(terms);
        plan_block_per_row(self.kernel::<T>(kind)?, on, ROW_THREADS, tolerance)
    }

    /// `split_row`: chunks of each row on separate blocks (about 4 blocks of 256 threads per
    /// SM), then a merge-and-write kernel.
    pub fn plan_split<'a, T: Element>(&'a self, on: Rows<'a>) -> Result<Plan<'a, T>> {
        let stats = self.kernel::<T>("softmax_split_stats")?;
        let write = self.kernel::<T>("softmax_split_write")?;
        plan_split_rows(stats, write, on, SPLIT_THREADS, 4 * self.sms, 1)
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
        let (day03, block) = (DtypeSoftmax::load(gpu)?, BlockSoftmax::load(gpu)?);
        Ok(Self { day03, block })
    }

    fn plan<'a, T: Element>(&'a self, version: &str, on: Rows<'a>) -> Result<Plan<'a, T>> {
        match version {
            "day03_warp" => self.day03.plan(on),
            "block" => self.block.plan_row(false, on),
            "block_online" => self.block.plan_row(true, on),
            "split_row" => self.block.plan_split(on),
            other => Err(Refused(format!("day04 has no version `{other}`")).into()),
        }
    }
}
