//! Day 1: naive softmax. The launcher for `softmax_naive.cu`.

use anyhow::Result;
use common::dtype::Dtype;
use common::family::softmax::{Plan, Refused, Shape, SoftmaxDay, check_sizes};
use common::gpu::kernel_build::KernelBuild;
use common::gpu::nvrtc::KernelSource;
use common::{Element, Gpu, Kernel, LaunchShape, Tolerance};
use cudarc::driver::{CudaSlice, PushKernelArg};

pub const SOURCE: KernelSource = KernelSource {
    file_name: "softmax_naive.cu",
    code: include_str!("softmax_naive.cu"),
};

/// What the day compiles: `softmax_naive.cu`'s one kernel, for the GPU's own architecture.
/// The loader compiles the same, the compile test checks this list, and `cargo xtask bundle`
/// compiles it ahead of time for the GPU host's kernel cache.
pub fn kernel_builds() -> Vec<KernelBuild> {
    vec![KernelBuild::device(SOURCE, [NAIVE_FUNCTION])]
}

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

    pub fn kernel(&self) -> &Kernel {
        &self.kernel
    }

    /// One thread per row.
    pub fn shape(&self, rows: usize) -> LaunchShape {
        let blocks = rows.div_ceil(THREADS as usize).min(u32::MAX as usize) as u32;
        LaunchShape::linear(blocks, THREADS)
    }

    /// Row-wise softmax of the `rows x cols` matrix `x` into `out`, on the GPU's stream.
    pub fn launch(
        &self,
        gpu: &Gpu,
        x: &CudaSlice<f32>,
        out: &mut CudaSlice<f32>,
        rows: usize,
        cols: usize,
    ) -> Result<()> {
        check_sizes(x.len(), out.len(), rows, cols)?;
        let config = self.kernel.config(&self.shape(rows))?;
        let (rows, cols) = (rows as u64, cols as u64);
        let mut launch = gpu.stream.launch_builder(&self.kernel.func);
        launch.arg(x).arg(out).arg(&rows).arg(&cols);
        // SAFETY: the arguments match the kernel's signature (input and output of rows * cols
        // floats, then rows and cols as index_t); threads past the last row return at once.
        unsafe { launch.launch(config) }?;
        Ok(())
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

    fn plan<'a, T: Element>(
        &'a self,
        gpu: &'a Gpu,
        version: &str,
        rows: usize,
        cols: usize,
    ) -> Result<Plan<'a, T>> {
        match version {
            "naive" => Plan::f32_only(
                self.naive.kernel(),
                self.naive.shape(rows),
                tolerance(cols),
                move |x, out| self.naive.launch(gpu, x, out, rows, cols),
            ),
            other => Err(Refused(format!("day01 has no version `{other}`")).into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kernel_compiles_for_sm90_without_spilling() {
        common::testing::assert_builds_compile_without_spills(&kernel_builds());
    }
}
