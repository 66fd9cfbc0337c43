//! cuBLAS SGEMM through cudarc: the ceiling every matmul day is measured against, and a second
//! opinion on large outputs.
//!
//! cuBLAS is column-major and our matrices are row-major. A row-major `m x n` matrix has the
//! same bytes as a column-major `n x m` one, its transpose. So row-major `C = A B` is asked as
//! column-major `C^T = B^T A^T`: swap the operands, swap m and n, and no transpose flag is
//! needed.

use anyhow::{Context, Result, bail};
use cudarc::cublas::{CudaBlas, Gemm, GemmConfig, sys};
use cudarc::driver::CudaSlice;

use crate::error::SetupError;
use crate::gpu::Gpu;

pub struct Cublas {
    blas: CudaBlas,
}

impl Cublas {
    /// Opens cuBLAS on the GPU's stream. Its default math mode is kept and said out loud: FP32
    /// SGEMM without TF32 tensor cores (which would round inputs to 10 mantissa bits).
    pub fn open(gpu: &Gpu) -> Result<Self> {
        // SAFETY: only tries to dlopen libcublas by its candidate names. Without the library
        // every cuBLAS call would panic, so this is asked first.
        if !unsafe { sys::is_culib_present() } {
            return Err(SetupError::NoCublas.into());
        }
        let blas = CudaBlas::new(gpu.stream.clone()).context("creating a cuBLAS handle")?;
        // SAFETY: the handle is live; CUBLAS_DEFAULT_MATH is a valid mode.
        let status = unsafe {
            sys::cublasSetMathMode(*blas.handle(), sys::cublasMath_t::CUBLAS_DEFAULT_MATH)
        };
        if status != sys::cublasStatus_t::CUBLAS_STATUS_SUCCESS {
            bail!("cublasSetMathMode failed: {status:?}");
        }
        Ok(Self { blas })
    }

    /// Enqueues row-major `c (m x n) = a (m x k) b (k x n)` in f32.
    pub fn sgemm(
        &self,
        m: usize,
        n: usize,
        k: usize,
        a: &CudaSlice<f32>,
        b: &CudaSlice<f32>,
        c: &mut CudaSlice<f32>,
    ) -> Result<()> {
        if a.len() != m * k || b.len() != k * n || c.len() != m * n {
            bail!(
                "sgemm: buffers of {}, {} and {} elements do not hold {m} x {k}, {k} x {n} and \
                 {m} x {n}",
                a.len(),
                b.len(),
                c.len()
            );
        }
        let dim = |v: usize| i32::try_from(v).context("cuBLAS takes dimensions below 2^31");
        let (m, n, k) = (dim(m)?, dim(n)?, dim(k)?);
        // Column-major C^T (n x m) = B^T (n x k) * A^T (k x m); leading dimensions are the
        // row lengths of the row-major arrays.
        let cfg = GemmConfig {
            transa: sys::cublasOperation_t::CUBLAS_OP_N,
            transb: sys::cublasOperation_t::CUBLAS_OP_N,
            m: n,
            n: m,
            k,
            alpha: 1.0f32,
            lda: n,
            ldb: k,
            beta: 0.0f32,
            ldc: n,
        };
        // SAFETY: the lengths were checked above against the dimensions the config gives, so
        // cuBLAS reads and writes inside the three buffers.
        unsafe { self.blas.gemm(cfg, b, a, c) }.context("cublasSgemm")?;
        Ok(())
    }
}
