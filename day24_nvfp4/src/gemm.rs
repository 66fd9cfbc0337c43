//! Launcher for `gemm.cu`: `C = A W^T`, A bf16 `m x k`, W NVFP4 `n x k`, C f32 `m x n`.

use anyhow::{Result, bail};
use common::gpu::kernel::KernelSet;
use common::reference::matmul;
use common::{Gpu, Kernel, LaunchShape, Tolerance, UsageError};
use cudarc::driver::{CudaSlice, PushKernelArg};
use half::bf16;

use crate::{GEMM_SOURCE, Nvfp4Dev, check_shape};

pub const FUNCTIONS: &[&str] = &["gemm_nvfp4_mma_bf16"];
pub const VERSIONS: &[&str] = &["mma_bf16"];

const TILE: usize = 128;

pub struct Gemm {
    kernels: KernelSet,
}

/// The tiles of an `m x n` output: (n / 128, m / 128) blocks; y is at most 65535.
pub fn launch_shape(m: usize, n: usize) -> Result<LaunchShape, UsageError> {
    let (gx, gy) = (n.div_ceil(TILE), m.div_ceil(TILE));
    if gy > 65535 || gx > i32::MAX as usize {
        return Err(UsageError::new(format!(
            "gemm: {m} x {n} needs {gx} x {gy} tiles of 128 x 128; the grid takes at most \
             65535 in y (m <= 8388480)"
        )));
    }
    Ok(LaunchShape {
        grid: (gx as u32, gy as u32, 1),
        block: (256, 1, 1),
        dynamic_shared_bytes: 0,
    })
}

/// The check of an output with inner dimension `k` and inputs of magnitude about 1: the
/// f32 accumulation of `common::reference::matmul::tolerance` (the decoded weights and their
/// products are exact in bf16 and f32; the tensor cores' f32 sums are what rounds), plus one
/// rounding for the tensor scale, relative.
pub fn tolerance(k: usize) -> Tolerance {
    let t = matmul::tolerance(k);
    Tolerance::new(t.atol, f64::from(f32::EPSILON)).with_max_rel_l2(t.max_rel_l2)
}

impl Gemm {
    pub fn load(gpu: &Gpu) -> Result<Self> {
        Ok(Self {
            kernels: KernelSet::load(gpu, &GEMM_SOURCE, FUNCTIONS.iter().map(|s| s.to_string()))?,
        })
    }

    pub fn kernel(&self, m: usize, n: usize) -> Result<(&Kernel, LaunchShape)> {
        Ok((self.kernels.get(FUNCTIONS[0])?, launch_shape(m, n)?))
    }

    /// `C = A W^T`.
    pub fn launch(
        &self,
        gpu: &Gpu,
        a: &CudaSlice<bf16>,
        w: &Nvfp4Dev,
        c: &mut CudaSlice<f32>,
        m: usize,
    ) -> Result<()> {
        w.check()?;
        let (n, k) = (w.rows, w.cols);
        check_shape("gemm: A", m, k)?;
        if a.len() != m * k || c.len() != m * n {
            bail!(
                "gemm: A of {} and C of {} do not fit {m} x {n} x {k}",
                a.len(),
                c.len()
            );
        }
        let (kernel, shape) = self.kernel(m, n)?;
        let (m, n, k) = (m as u64, n as u64, k as u64);
        let mut launch = gpu.stream.launch_builder(&kernel.func);
        launch
            .arg(a)
            .arg(&w.packed)
            .arg(&w.scales)
            .arg(&w.tensor_scale)
            .arg(c)
            .arg(&m)
            .arg(&n)
            .arg(&k);
        // SAFETY: matches gemm_nvfp4_mma_bf16(a, packed, scales, tensor_scale, c, m, n, k)
        // with the lengths checked above; k is a multiple of 16 (A rows 32-byte aligned, W
        // rows 8-byte aligned, as its loads need); tiles past m, n, k are zero-filled and
        // stores are guarded.
        unsafe { launch.launch(kernel.config(&shape)?) }?;
        Ok(())
    }
}
