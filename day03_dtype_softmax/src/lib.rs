//! Day 3: dtype-aware softmax. The launcher for `softmax_dtype.cu` (one template, three
//! storage types), with day 2's f32 kernel as the baseline.

use anyhow::Result;
use common::dtype::Dtype;
use common::family::softmax::{Plan, Refused, Shape, SoftmaxDay, check_sizes};
use common::gpu::kernel::KernelSet;
use common::gpu::kernel_build::KernelBuild;
use common::gpu::nvrtc::KernelSource;
use common::reference::softmax::tolerance_for;
use common::{Element, Gpu, LaunchShape, Tolerance};
use cudarc::driver::{CudaSlice, PushKernelArg};
use day02::WarpSoftmax;

pub const SOURCE: KernelSource = KernelSource {
    file_name: "softmax_dtype.cu",
    code: include_str!("softmax_dtype.cu"),
};

/// What the day compiles: one kernel per storage type, for the GPU's own architecture. The loader
/// compiles the same, the compile test checks this list, and `cargo xtask bundle` compiles it ahead
/// of time for the GPU host's kernel cache.
pub fn kernel_builds() -> Vec<KernelBuild> {
    vec![KernelBuild::device(
        SOURCE,
        DTYPES.iter().map(|&d| function(d)),
    )]
}

pub const DTYPES: &[Dtype] = &[Dtype::F32, Dtype::F16, Dtype::Bf16];

/// `softmax_warp_f32`, `softmax_warp_f16`, `softmax_warp_bf16`.
pub fn function(dtype: Dtype) -> String {
    format!("softmax_warp_{dtype}")
}

const ROWS_PER_BLOCK: usize = 8;

/// One warp per row, any storage type.
pub struct DtypeSoftmax {
    kernels: KernelSet,
}

impl DtypeSoftmax {
    pub fn load(gpu: &Gpu) -> Result<Self> {
        let names = DTYPES.iter().map(|&d| function(d));
        Ok(Self {
            kernels: KernelSet::load(gpu, &SOURCE, names)?,
        })
    }

    pub fn shape(&self, rows: usize) -> LaunchShape {
        let blocks = rows.div_ceil(ROWS_PER_BLOCK).min(u32::MAX as usize) as u32;
        LaunchShape::linear(blocks, 32 * ROWS_PER_BLOCK as u32)
    }

    /// As day 2 (cols/32 sequential terms per lane, 5 shuffles), plus the output rounding.
    pub fn tolerance<T: Element>(cols: usize) -> Tolerance {
        tolerance_for::<T>(cols.div_ceil(32) + 5)
    }

    /// A version plan for the shared runner.
    pub fn plan<'a, T: Element>(
        &'a self,
        gpu: &'a Gpu,
        rows: usize,
        cols: usize,
    ) -> Result<Plan<'a, T>> {
        Ok(Plan {
            kernel: self.kernels.get(&function(T::DTYPE))?,
            shape: self.shape(rows),
            tolerance: Self::tolerance::<T>(cols),
            launch: Box::new(move |x, out| self.launch(gpu, x, out, rows, cols)),
        })
    }

    pub fn launch<T: Element>(
        &self,
        gpu: &Gpu,
        x: &CudaSlice<T>,
        out: &mut CudaSlice<T>,
        rows: usize,
        cols: usize,
    ) -> Result<()> {
        check_sizes(x.len(), out.len(), rows, cols)?;
        let kernel = self.kernels.get(&function(T::DTYPE))?;
        let config = kernel.config(&self.shape(rows))?;
        let (rows, cols) = (rows as u64, cols as u64);
        let mut launch = gpu.stream.launch_builder(&kernel.func);
        launch.arg(x).arg(out).arg(&rows).arg(&cols);
        // SAFETY: matches softmax_warp_<T>(const T*, T*, index_t rows, index_t cols), where the
        // CUDA storage type has T's size and layout (f16_t/bf16_t are 16-bit containers).
        unsafe { launch.launch(config) }?;
        Ok(())
    }
}

pub struct Day03 {
    day02: WarpSoftmax,
    warp: DtypeSoftmax,
}

impl SoftmaxDay for Day03 {
    const DAY: &'static str = "day03";
    const TITLE: &'static str = "dtype-aware softmax";
    const VERSIONS: &'static [&'static str] = &["day02_warp", "warp"];
    const DEFAULT_PROBLEMS: &'static [Shape] = &[
        Shape::new(32768, 4096, Dtype::F32),
        Shape::new(32768, 4096, Dtype::F16),
        Shape::new(32768, 4096, Dtype::Bf16),
    ];
    const DTYPES: &'static [Dtype] = DTYPES;
    const F32_ONLY: &'static [&'static str] = &["day02_warp"];

    fn load(gpu: &Gpu) -> Result<Self> {
        Ok(Self {
            day02: WarpSoftmax::load(gpu)?,
            warp: DtypeSoftmax::load(gpu)?,
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
            "day02_warp" => Plan::f32_only(
                self.day02.kernel(),
                self.day02.shape(rows),
                WarpSoftmax::tolerance(cols),
                move |x, out| self.day02.launch(gpu, x, out, rows, cols),
            ),
            "warp" => self.warp.plan(gpu, rows, cols),
            other => Err(Refused(format!("day03 has no version `{other}`")).into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_dtype_compiles_for_sm90_without_spilling() {
        common::testing::assert_builds_compile_without_spills(&kernel_builds());
    }
}
