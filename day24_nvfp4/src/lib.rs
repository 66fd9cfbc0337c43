//! Day 24: NVFP4 (4-bit e2m1 values, an e4m3 scale per 16, an f32 tensor scale) on a GPU
//! without FP4 tensor cores. The launchers for `quantize.cu` (bf16 -> NVFP4 and back),
//! `gemv.cu` (y = W x on packed weights, and the bf16 GEMV it is compared with) and
//! `gemm.cu` (C = A W^T through bf16 tensor cores). The format itself, and its CPU
//! reference, is [`reference`]; [`problem`] makes the day's problems for the shared runner of
//! multi-op days.

pub mod gemm;
pub mod gemv;
pub mod problem;
pub mod quantize;
pub mod reference;

use common::UsageError;
use common::gpu::kernel_build::KernelBuild;
use common::gpu::nvrtc::KernelSource;
use cudarc::driver::CudaSlice;

pub use reference::BLOCK;

/// The GEMV problems `cargo run -p day24` runs: square, a Llama-3-8B MLP projection
/// (14336 x 4096) and a Llama-3-70B MLP gate/up projection (28672 x 8192). The first two are
/// small for a stream (37.7 and 33 MB of NVFP4: ~12 us at the copy rate, so launch and ramp
/// are a large part of their time); the third is 132 MB, past the 50 MB L2, the size at which
/// a decode-time GEMV on a large model actually runs.
pub const DEFAULT_GEMV_SHAPES: [(usize, usize); 3] = [(8192, 8192), (14336, 4096), (28672, 8192)];
/// The quantize/dequantize tensor.
pub const DEFAULT_QUANTIZE_SHAPE: (usize, usize) = (8192, 8192);
/// The GEMMs (m x n x k): square, and a Llama-3-8B MLP projection (14336 x 4096 weights) on a
/// batch of 8192 tokens, the size at which a prefill or a training step runs it.
pub const DEFAULT_GEMM_SHAPES: [(usize, usize, usize); 2] =
    [(4096, 4096, 4096), (8192, 14336, 4096)];

/// Each kernel file is compiled with the format's device code in front of it.
pub const QUANTIZE_SOURCE: KernelSource =
    common::kernel_source!("quantize.cu" = ["nvfp4_format.cuh", "quantize.cu"]);
pub const GEMV_SOURCE: KernelSource =
    common::kernel_source!("gemv.cu" = ["nvfp4_format.cuh", "gemv.cu"]);
pub const GEMM_SOURCE: KernelSource =
    common::kernel_source!("gemm.cu" = ["nvfp4_format.cuh", "gemm_params.cuh", "gemm.cu"]);

/// What the day compiles: its three files, every kernel, for the GPU's own architecture, and
/// `gemm.cu` for Hopper too (its wgmma version). The loaders compile the same, the compile
/// test checks this list, and `cargo xtask bundle` compiles it ahead of time for the GPU
/// host's kernel cache.
pub fn kernel_builds() -> Vec<KernelBuild> {
    vec![
        KernelBuild::device(QUANTIZE_SOURCE, quantize::FUNCTIONS.iter().copied()),
        gemv::build(),
    ]
    .into_iter()
    .chain(gemm::kernel_builds())
    .collect()
}

/// A matrix in NVFP4 on the GPU: `rows x cols` codes packed two per byte (even column in the
/// low nibble), `rows x cols / 16` e4m3 scales, one f32 tensor scale.
pub struct Nvfp4Dev {
    pub rows: usize,
    pub cols: usize,
    pub packed: CudaSlice<u8>,
    pub scales: CudaSlice<u8>,
    pub tensor_scale: CudaSlice<f32>,
}

impl Nvfp4Dev {
    /// Uploads a CPU-side NVFP4 matrix.
    pub fn upload(gpu: &common::Gpu, q: &reference::Nvfp4) -> anyhow::Result<Self> {
        Ok(Self {
            rows: q.rows,
            cols: q.cols,
            packed: gpu.upload(&q.packed)?,
            scales: gpu.upload(&q.scales)?,
            tensor_scale: gpu.upload(&[q.tensor_scale])?,
        })
    }

    /// Bytes of the packed codes and scales (what a GEMV must stream).
    pub fn bytes(&self) -> u64 {
        nvfp4_bytes(self.rows, self.cols)
    }

    pub(crate) fn check(&self) -> anyhow::Result<()> {
        check_shape("the NVFP4 matrix", self.rows, self.cols)?;
        let elements = self.rows * self.cols;
        if self.packed.len() != elements / 2
            || self.scales.len() != elements / BLOCK
            || self.tensor_scale.len() != 1
        {
            anyhow::bail!(
                "an NVFP4 {} x {} matrix needs {} packed bytes, {} scales and 1 tensor scale; \
                 given {}, {} and {}",
                self.rows,
                self.cols,
                elements / 2,
                elements / BLOCK,
                self.packed.len(),
                self.scales.len(),
                self.tensor_scale.len()
            );
        }
        Ok(())
    }
}

/// Packed codes and scales of a `rows x cols` NVFP4 matrix: 9 bytes per 16 values.
pub fn nvfp4_bytes(rows: usize, cols: usize) -> u64 {
    rows as u64 * cols as u64 / 2 + rows as u64 * cols as u64 / BLOCK as u64
}

/// The shapes every kernel of the day takes: at least one row, and a row length that is a
/// positive multiple of 16 (a scale covers 16 consecutive values of one row) and whose
/// product with the rows fits the 64-bit index. Refused as a usage error (exit 2).
pub fn check_shape(what: &str, rows: usize, cols: usize) -> Result<(), UsageError> {
    if rows == 0 || cols == 0 {
        return Err(UsageError::new(format!(
            "{what} is {rows} x {cols}; both must be at least 1"
        )));
    }
    if !cols.is_multiple_of(BLOCK) {
        return Err(UsageError::new(format!(
            "{what}: K = {cols} is not a multiple of 16 (an NVFP4 scale covers 16 consecutive \
             values of a row)"
        )));
    }
    common::sizes::product(what, &[rows, cols])?;
    Ok(())
}

common::test_kernel_builds!();

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_must_be_whole_blocks() {
        assert!(check_shape("w", 1, 16).is_ok());
        assert!(check_shape("w", 7, 4112).is_ok());
        let err = check_shape("w", 3, 40).unwrap_err().to_string();
        assert!(err.contains("not a multiple of 16"), "{err}");
        assert!(check_shape("w", 0, 16).is_err());
        assert_eq!(nvfp4_bytes(2, 32), 32 + 4);
    }
}
