//! Day 2: warp softmax. The launcher for `softmax_warp.cu`, and the day's versions for the
//! shared softmax runner: day 1's kernel as the baseline, then one warp per row.

use anyhow::Result;
use common::dtype::Dtype;
use common::family::softmax::{Plan, Refused, Rows, Shape, SoftmaxDay, f32_only, plan_rows};
use common::gpu::kernel_build::KernelBuild;
use common::gpu::nvrtc::KernelSource;
use common::reference::softmax::tolerance_for;
use common::{Element, Gpu, Kernel, LaunchShape};
use day01::NaiveSoftmax;

pub const SOURCE: KernelSource = common::kernel_source!("softmax_warp.cu");

/// What the day compiles: the warp kernel for the GPU's own architecture.
pub fn kernel_builds() -> Vec<KernelBuild> {
    vec![KernelBuild::device(SOURCE, [WARP_FUNCTION])]
}

common::test_kernel_builds!();

pub const WARP_FUNCTION: &str = "softmax_warp_f32";

/// 8 warps per block: one row each.
const ROWS_PER_BLOCK: usize = 8;

/// The launch shape: a warp per row, 8 rows per block.
pub fn shape(rows: usize) -> LaunchShape {
    let blocks = rows.div_ceil(ROWS_PER_BLOCK).min(u32::MAX as usize) as u32;
    LaunchShape::linear(blocks, 32 * ROWS_PER_BLOCK as u32)
}

/// The longest chain of additions in a row's sum: each lane adds cols/32 terms one after
/// another, then 5 shuffle steps.
pub fn sum_terms(cols: usize) -> usize {
    cols.div_ceil(32) + 5
}

/// One warp per row, f32.
pub struct WarpSoftmax {
    kernel: Kernel,
}

impl WarpSoftmax {
    pub fn load(gpu: &Gpu) -> Result<Self> {
        Ok(Self {
            kernel: gpu.load(&SOURCE)?.kernel(gpu, WARP_FUNCTION)?,
        })
    }

    /// The version's plan, f32 only.
    pub fn plan<'a, T: Element>(&'a self, on: Rows<'a>) -> Result<Plan<'a, T>> {
        f32_only::<T>()?;
        let tolerance = tolerance_for::<f32>(sum_terms(on.cols));
        Ok(plan_rows(&self.kernel, shape(on.rows), tolerance, on))
    }
}

/// The day for the shared softmax runner.
pub struct Day02 {
    naive: NaiveSoftmax,
    warp: WarpSoftmax,
}

impl SoftmaxDay for Day02 {
    const DAY: &'static str = "day02";
    const TITLE: &'static str = "warp softmax";
    const VERSIONS: &'static [&'static str] = &["day01_naive", "warp"];
    const DEFAULT_PROBLEMS: &'static [Shape] = &[Shape::new(32768, 4096, Dtype::F32)];
    const DTYPES: &'static [Dtype] = &[Dtype::F32];

    fn load(gpu: &Gpu) -> Result<Self> {
        let (naive, warp) = (NaiveSoftmax::load(gpu)?, WarpSoftmax::load(gpu)?);
        Ok(Self { naive, warp })
    }

    fn plan<'a, T: Element>(&'a self, version: &str, on: Rows<'a>) -> Result<Plan<'a, T>> {
        match version {
            "day01_naive" => self.naive.plan(on),
            "warp" => self.warp.plan(on),
            other => Err(Refused(format!("day02 has no version `{other}`")).into()),
        }
    }
}
