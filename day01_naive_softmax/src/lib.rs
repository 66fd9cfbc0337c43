//! Day 1: naive softmax. The launcher for `softmax_naive.cu`.

use anyhow::Result;
use common::dtype::Dtype;
use common::family::softmax::{Plan, Refused, Rows, Shape, SoftmaxDay, f32_only, plan_rows};
use common::gpu::kernel_build::KernelBuild;
use common::gpu::nvrtc::KernelSource;
use common::{Element, Gpu, Kernel, LaunchShape, Tolerance};

pub const SOURCE: KernelSource = common::kernel_source!("softmax_naive.cu");

/// What the day compiles: `softmax_naive.cu`'s one kernel for the GPU's own architecture.
pub fn kernel_builds() -> Vec<KernelBuild> {
    vec![KernelBuild::device(SOURCE, [NAIVE_FUNCTION])]
}

common::test_kernel_builds!();

/// The check's tolerance for rows of `cols` columns: each thread sums its whole row one term
/// after another, so the error bound grows with `cols` (see
/// [`common::reference::softmax::tolerance_f32`] and the README).
pub fn tolerance(cols: usize) -> Tolerance {
    common::reference::softmax::tolerance_f32(cols)
}

/// The CUDA function of the `naive` version.
pub const NAIVE_FUNCTION: &str = "softmax_row_per_thread_f32";

/// Small blocks spread the few threads (one per row) over every SM: 32768 rows make 512
/// blocks of 64, about 4 per SM on an H100, where blocks of 1024 would leave 100 SMs idle.
const THREADS: u32 = 64;

/// The day's kernel, compiled and loaded for one GPU.
pub struct NaiveSoftmax {
    kernel: Kernel,
}

impl NaiveSoftmax {
    pub fn load(gpu: &Gpu) -> Result<Self> {
        let module = gpu.load(&SOURCE)?;
        Ok(Self {
            kernel: module.kernel(gpu, NAIVE_FUNCTION)?,
        })
    }

    /// The version's plan, f32 only: one thread per row.
    pub fn plan<'a, T: Element>(&'a self, on: Rows<'a>) -> Result<Plan<'a, T>> {
        f32_only::<T>()?;
        let blocks = on.rows.div_ceil(THREADS as usize).min(u32::MAX as usize) as u32;
        let shape = LaunchShape::linear(blocks, THREADS);
        Ok(plan_rows(&self.kernel, shape, tolerance(on.cols), on))
    }
}

/// The day for the shared softmax runner (`common::softmax`), which days 2-5 use too: its
/// `main`, its flags and its GPU test.
pub struct Day01 {
    naive: NaiveSoftmax,
}

impl SoftmaxDay for Day01 {
    const DAY: &'static str = "day01";
    const TITLE: &'static str = "naive softmax";
    const VERSIONS: &'static [&'static str] = &["naive"];
    const DEFAULT_PROBLEMS: &'static [Shape] = &[Shape::new(32768, 4096, Dtype::F32)];
    const DTYPES: &'static [Dtype] = &[Dtype::F32];

    fn load(gpu: &Gpu) -> Result<Self> {
        Ok(Self {
            naive: NaiveSoftmax::load(gpu)?,
        })
    }

    fn plan<'a, T: Element>(&'a self, version: &str, on: Rows<'a>) -> Result<Plan<'a, T>> {
        match version {
            "naive" => self.naive.plan(on),
            other => Err(Refused(format!("day01 has no version `{other}`")).into()),
        }
    }
}
