//! cuBLAS SGEMM through cudarc: the ceiling every matmul day is measured against, and a second
//! opinion on large outputs.
//!
//! cuBLAS is column-major and our matrices are row-major. A row-major `m x n` matrix has the
//! same bytes as a column-major `n x m` one, its transpose. So row-major `C = A B` is asked as
//! column-major `C^T = B^T A^T`: swap the operands, swap m and n, and no transpose flag is
//! needed.

use std::sync::Arc;

use anyhow::{Context, Result, bail};
use cudarc::cublas::{CudaBlas, Gemm, GemmConfig, sys};
use cudarc::driver::{CudaSlice, CudaStream, DevicePtrMut};

use crate::dtype::Dtype;
use crate::element::Element;
use crate::error::SetupError;
use crate::gpu::{DeviceBuffer, Gpu};

pub struct Cublas {
    blas: CudaBlas,
    /// The stream the handle enqueues on (the GPU's), for recording buffer use.
    stream: Arc<CudaStream>,
}

impl Cublas {
    /// Opens cuBLAS on the GPU's stream, in its default math mode with one restriction, said
    /// out loud: FP32 SGEMM without TF32 tensor cores (which would round inputs to 10 mantissa
    /// bits), and half-precision GEMMs without "reduced-precision reductions". cuBLAS's default
    /// lets a split-k bf16 GEMM add its partial sums in bf16; on 1000 x 1001 x 1024 that was
    /// 26% of outputs outside an f32-accumulation tolerance (day 18's test). Every kernel of
    /// ours accumulates in f32, so the ceiling is asked to as well.
    pub fn open(gpu: &Gpu) -> Result<Self> {
        // SAFETY: only tries to dlopen libcublas by its candidate names. Without the library
        // every cuBLAS call would panic, so this is asked first.
        if !unsafe { sys::is_culib_present() } {
            return Err(SetupError::NoCublas.into());
        }
        let blas = CudaBlas::new(gpu.stream.clone()).context("creating a cuBLAS handle")?;
        // SAFETY: the handle is live; the mode is a valid one (the default math, flag 16 set).
        let status = unsafe {
            sys::cublasSetMathMode(
                *blas.handle(),
                sys::cublasMath_t::CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION,
            )
        };
        if status != sys::cublasStatus_t::CUBLAS_STATUS_SUCCESS {
            bail!("cublasSetMathMode failed: {status:?}");
        }
        Ok(Self {
            blas,
            stream: gpu.stream.clone(),
        })
    }

    /// Points the handle at `stream` and at a workspace of `bytes` at `workspace`, for the
    /// calls that follow, instead of the stream it was opened on and the workspace cuBLAS
    /// allocated. One handle can so serve every stream of a device, with each call's workspace
    /// its caller's (the PyTorch layer's, from PyTorch's allocator): nothing is created or
    /// allocated at call time, which a CUDA graph capture forbids.
    ///
    /// # Safety
    /// `stream` must belong to the handle's context. The workspace must be `bytes` of device
    /// memory there, used by nothing else until the work enqueued on the handle after this
    /// has run. The handle keeps the stream and the pointer after that: a handle once bound
    /// must be bound again before each later use.
    pub unsafe fn bind(
        &mut self,
        stream: Arc<CudaStream>,
        workspace: u64,
        bytes: usize,
    ) -> Result<()> {
        // SAFETY: the stream is the context's (the caller's promise); setting it resets the
        // handle's workspace to cuBLAS's own, so the caller's is set after it.
        unsafe { self.blas.set_stream(stream.clone()) }.context("cublasSetStream")?;
        self.stream = stream;
        // SAFETY: the handle is live; the workspace is as the caller promised.
        let status =
            unsafe { sys::cublasSetWorkspace_v2(*self.blas.handle(), workspace as *mut _, bytes) };
        if status != sys::cublasStatus_t::CUBLAS_STATUS_SUCCESS {
            bail!("cublasSetWorkspace failed: {status:?}");
        }
        Ok(())
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
        // Checked: a product that wraps (release builds) could match a small buffer.
        let holds = |len: usize, rows: usize, cols: usize| rows.checked_mul(cols) == Some(len);
        if !(holds(a.len(), m, k) && holds(b.len(), k, n) && holds(c.len(), m, n)) {
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

/// How an operand of a row-major GEMM is stored: as the matrix itself or as its transpose.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stored {
    /// `A` is `m x k` row-major (`B` is `k x n`).
    AsIs,
    /// `A` is stored as its transpose, `k x m` row-major (`B` as `n x k`): a weight kept as
    /// `[out, in]` is the `Transposed` right operand of `x W^T`.
    Transposed,
}

/// One row-major `C (m x n) = alpha * op(A) (m x k) op(B) (k x n) + beta * C`, repeated
/// `batch` times over operands `stride_*` elements apart (0 strides broadcast).
#[derive(Debug, Clone, Copy)]
pub struct GemmEx {
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub a: Stored,
    pub b: Stored,
    pub alpha: f32,
    pub beta: f32,
    pub batch: usize,
    pub stride_a: usize,
    pub stride_b: usize,
    pub stride_c: usize,
}

impl GemmEx {
    /// `C = A B`, both stored as is, one matrix. (Strides that overflow saturate, and
    /// [`GemmEx::needs`] then refuses them.)
    pub fn new(m: usize, n: usize, k: usize) -> Self {
        Self {
            m,
            n,
            k,
            a: Stored::AsIs,
            b: Stored::AsIs,
            alpha: 1.0,
            beta: 0.0,
            batch: 1,
            stride_a: m.saturating_mul(k),
            stride_b: k.saturating_mul(n),
            stride_c: m.saturating_mul(n),
        }
    }

    /// Elements each operand must hold: the last matrix's offset plus one matrix; None when
    /// one of them overflows `usize` (unchecked, a release build would wrap it to a small
    /// length that passes the buffer checks).
    pub fn needs(&self) -> Option<(usize, usize, usize)> {
        let last = self.batch.saturating_sub(1);
        let need = |stride: usize, rows: usize, cols: usize| {
            last.checked_mul(stride)?
                .checked_add(rows.checked_mul(cols)?)
        };
        Some((
            need(self.stride_a, self.m, self.k)?,
            need(self.stride_b, self.k, self.n)?,
            need(self.stride_c, self.m, self.n)?,
        ))
    }
}

fn cuda_type(dtype: Dtype) -> Result<sys::cudaDataType> {
    Ok(match dtype {
        Dtype::F32 => sys::cudaDataType::CUDA_R_32F,
        Dtype::F16 => sys::cudaDataType::CUDA_R_16F,
        Dtype::Bf16 => sys::cudaDataType::CUDA_R_16BF,
        other => bail!("cuBLAS GEMM is not offered for {}", other.name()),
    })
}

impl Cublas {
    /// Enqueues [`GemmEx`] through `cublasGemmStridedBatchedEx` with f32 accumulation: inputs
    /// of type `T` (f16, bf16 or f32), output `C` of type `O` (the same, or f32 to keep the
    /// product unrounded). Views work, so a chunk of a larger buffer can be an operand.
    ///
    /// Row-major to column-major as in [`Cublas::sgemm`]: cuBLAS computes
    /// `C^T (n x m) = op(B)^T op(A)^T`, with B's bytes as its first operand. An operand stored
    /// as is reads, column-major, as its own transpose (`OP_N`); one stored transposed reads
    /// as the matrix itself and needs `OP_T`.
    pub fn gemm_ex<T: Element, O: Element>(
        &self,
        g: &GemmEx,
        a: &impl DeviceBuffer<T>,
        b: &impl DeviceBuffer<T>,
        c: &mut impl DevicePtrMut<O>,
    ) -> Result<()> {
        let Some((need_a, need_b, need_c)) = g.needs() else {
            bail!("gemm_ex: the operands of {g:?} are too large to address");
        };
        if g.batch == 0 || a.len() < need_a || b.len() < need_b || c.len() < need_c {
            bail!(
                "gemm_ex: buffers of {}, {} and {} elements do not hold {} products of {} x {} \
                 x {} (m x n x k)",
                a.len(),
                b.len(),
                c.len(),
                g.batch,
                g.m,
                g.n,
                g.k
            );
        }
        let dim = |v: usize| i32::try_from(v).context("cuBLAS takes dimensions below 2^31");
        let stride = |v: usize| i64::try_from(v).context("stride too large");
        let (m, n, k) = (dim(g.m)?, dim(g.n)?, dim(g.k)?);
        let (op_b, ld_b) = match g.b {
            Stored::AsIs => (sys::cublasOperation_t::CUBLAS_OP_N, n),
            Stored::Transposed => (sys::cublasOperation_t::CUBLAS_OP_T, k),
        };
        let (op_a, ld_a) = match g.a {
            Stored::AsIs => (sys::cublasOperation_t::CUBLAS_OP_N, k),
            Stored::Transposed => (sys::cublasOperation_t::CUBLAS_OP_T, m),
        };
        let (in_type, out_type) = (cuda_type(T::DTYPE)?, cuda_type(O::DTYPE)?);
        let stream = &self.stream;
        let (a_ptr, _a_record) = a.device_ptr(stream);
        let (b_ptr, _b_record) = b.device_ptr(stream);
        let (c_ptr, _c_record) = c.device_ptr_mut(stream);
        // SAFETY: every operand was checked above to hold all `batch` matrices at the strides
        // given, with the leading dimensions derived from the same m, n, k; alpha and beta
        // are f32 as CUBLAS_COMPUTE_32F requires, and outlive the call.
        unsafe {
            cudarc::cublas::result::gemm_strided_batched_ex(
                *self.blas.handle(),
                op_b,
                op_a,
                n,
                m,
                k,
                (&g.alpha) as *const f32 as *const _,
                b_ptr as *const _,
                in_type,
                ld_b,
                stride(g.stride_b)?,
                a_ptr as *const _,
                in_type,
                ld_a,
                stride(g.stride_a)?,
                (&g.beta) as *const f32 as *const _,
                c_ptr as *mut _,
                out_type,
                n,
                stride(g.stride_c)?,
                dim(g.batch)?,
                sys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
                sys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
            )
        }
        .context("cublasGemmStridedBatchedEx")?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operand_lengths_that_overflow_are_refused_not_wrapped() {
        let g = GemmEx::new(2, 3, 4);
        assert_eq!(g.needs(), Some((8, 12, 6)));
        let batched = GemmEx { batch: 3, ..g };
        assert_eq!(batched.needs(), Some((24, 36, 18)));
        // 2^40 matrices of 2^24 elements: 2^64 wraps to 0 unchecked.
        let huge = GemmEx {
            batch: 1 << 40,
            ..GemmEx::new(1 << 12, 1 << 12, 1 << 12)
        };
        assert_eq!(huge.needs(), None);
        // m k itself overflowing saturates the stride instead of wrapping.
        let wide = GemmEx::new(usize::MAX / 2, 1, 3);
        assert_eq!(wide.stride_a, usize::MAX);
        assert_eq!(wide.needs(), None);
    }
}
