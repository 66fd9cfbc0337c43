//! Day 1: naive softmax. The launcher for `softmax_naive.cu`.

use anyhow::{Result, bail};
use common::nvrtc::KernelSource;
use common::{Gpu, Kernel, LaunchShape, Tolerance};
use cudarc::driver::{CudaSlice, PushKernelArg};

pub const SOURCE: KernelSource = KernelSource {
    file_name: "softmax_naive.cu",
    code: include_str!("softmax_naive.cu"),
};

/// The versions this day has (`--kernel` names), in table order.
pub const VERSIONS: &[&str] = &["naive"];

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
        if rows == 0 || cols == 0 {
            bail!("softmax: {rows} x {cols} is empty; rows and columns must be at least 1");
        }
        if rows.checked_mul(cols) != Some(x.len()) || out.len() != x.len() {
            bail!(
                "softmax: input of {} and output of {} elements do not hold {rows} x {cols}",
                x.len(),
                out.len()
            );
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kernel_compiles_for_sm90_without_spilling() {
        common::testing::assert_compiles_without_spills(&SOURCE, "sm_90", &[NAIVE_FUNCTION]);
    }
}
