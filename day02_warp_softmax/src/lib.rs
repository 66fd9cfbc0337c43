//! Day 2: warp softmax. The launcher for `softmax_warp.cu`, and the day's versions for the
//! shared softmax runner: day 1's kernel as the baseline, then one warp per row.

use anyhow::Result;
use common::dtype::Dtype;
use common::family::softmax::{Plan, Refused, Shape, SoftmaxDay, check_sizes};
use common::gpu::kernel_build::KernelBuild;
use common::gpu::nvrtc::KernelSource;
use common::reference::softmax::tolerance_for;
use common::{Element, Gpu, Kernel, LaunchShape, Tolerance};
use cudarc::driver::CudaSlice;
use day01::NaiveSoftmax;

pub const SOURCE: KernelSource = KernelSource {
    file_name: "softmax_warp.cu",
    code: include_str!("softmax_warp.cu"),
};

/// What the day compiles: the warp kernel, for the GPU's own architecture. The loader compiles the
/// same, the compile test checks this list, and `cargo xtask bundle` compiles it ahead of time for
/// the GPU host's kernel cache.
pub fn kernel_builds() -> Vec<KernelBuild> {
    vec![KernelBuild::device(SOURCE, [WARP_FUNCTION])]
}

pub const WARP_FUNCTION: &str = "softmax_warp_f32";

common::kernel_args! {
    /// `softmax_warp_f32(const float* x, float* out, index_t rows, index_t cols)`
    fn softmax_warp_f32(x: &CudaSlice<f32>, out: &mut CudaSlice<f32>, rows: u64, cols: u64);
}

/// 8 warps per block: one row each.
const ROWS_PER_BLOCK: usize = 8;

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

    pub fn kernel(&self) -> &Kernel {
        &self.kernel
    }

    pub fn shape(&self, rows: usize) -> LaunchShape {
        let blocks = rows.div_ceil(ROWS_PER_BLOCK).min(u32::MAX as usize) as u32;
        LaunchShape::linear(blocks, 32 * ROWS_PER_BLOCK as u32)
    }

    /// Each lane sums cols/32 terms one after another, then 5 shuffle steps.
    pub fn tolerance(cols: usize) -> Tolerance {
        tolerance_for::<f32>(cols.div_ceil(32) + 5)
    }

    pub fn launch(
        &self,
        gpu: &Gpu,
        x: &CudaSlice<f32>,
        out: &mut CudaSlice<f32>,
        rows: usize,
        cols: usize,
    ) -> Result<()> {
        check_sizes(x.len(), out.len(), rows, cols)?;
        let shape = self.shape(rows);
        // SAFETY: x and out hold rows x cols values (checked above); warps past the last row
        // return before touching memory.
        unsafe { softmax_warp_f32(gpu, &self.kernel, &shape, x, out, rows as u64, cols as u64) }?;
        Ok(())
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
        Ok(Self {
            naive: NaiveSoftmax::load(gpu)?,
            warp: WarpSoftmax::load(gpu)?,
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
            "day01_naive" => Plan::f32_only(
                self.naive.kernel(),
                self.naive.shape(rows),
                day01::tolerance(cols),
                move |x, out| self.naive.launch(gpu, x, out, rows, cols),
            ),
            "warp" => Plan::f32_only(
                self.warp.kernel(),
                self.warp.shape(rows),
                WarpSoftmax::tolerance(cols),
                move |x, out| self.warp.launch(gpu, x, out, rows, cols),
            ),
            other => Err(Refused(format!("day02 has no version `{other}`")).into()),
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
