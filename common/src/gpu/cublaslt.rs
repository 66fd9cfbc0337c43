//! cuBLASLt's 8-bit GEMMs, the ceiling rows of days 18 (FP8) and 23 (INT8). cudarc's safe
//! cuBLASLt wrapper has f32/f16/bf16 only, so this uses its `result` level: one plan per
//! problem (layouts, descriptor, the heuristic's algorithm), made once, then one
//! `cublasLtMatmul` per run.
//!
//! cuBLASLt is column-major. Our row-major `C (m x n) = A (m x k) B^T` with B stored `[n, k]`
//! is, read column-major, `C^T (n x m) = B^T (n x k) A (k x m)` where B's bytes are a
//! column-major `k x n` matrix and A's a column-major `k x m`: so cuBLASLt's "A" is our B,
//! transposed ("T"), and its "B" is our A as is ("N"): the "TN" form, both operands K-major,
//! which is the form its 8-bit kernels require.

use std::ffi::c_void;
use std::mem;

use anyhow::{Context, Result, bail};
use cudarc::cublaslt::{CudaBlasLT, MatmulShared, result, sys};
use cudarc::driver::{CudaSlice, DevicePtr, DevicePtrMut};
use half::bf16;

use crate::Gpu;
use crate::error::Refused;
use crate::error::SetupError;

/// The workspace NVIDIA recommends on Hopper.
const WORKSPACE_BYTES: usize = 32 << 20;

/// Which 8-bit product a plan computes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LtProduct {
    /// int8 x int8 -> int32, exact (`CUBLAS_COMPUTE_32I`): what `torch._int_mm` calls.
    Int8ToInt32,
    /// FP8 e4m3 x e4m3 -> bf16, f32 accumulation, `C = alpha A B^T`, with cuBLASLt's fast
    /// accumulation (the tensor cores' own accumulator, no periodic promotion to full f32:
    /// the arithmetic our wgmma kernels do); the operands travel as their bytes.
    E4m3ToBf16,
}

impl LtProduct {
    fn name(self) -> &'static str {
        match self {
            LtProduct::Int8ToInt32 => "INT8",
            LtProduct::E4m3ToBf16 => "FP8",
        }
    }

    /// Every size must be a multiple of this (cuBLASLt's alignment rule for the type).
    fn size_multiple(self) -> usize {
        match self {
            LtProduct::Int8ToInt32 => 4,
            LtProduct::E4m3ToBf16 => 16,
        }
    }

    /// Operand type, output type, compute type, scale type.
    fn types(
        self,
    ) -> (
        sys::cudaDataType_t,
        sys::cudaDataType_t,
        sys::cublasComputeType_t,
        sys::cudaDataType_t,
    ) {
        use sys::cudaDataType_t::*;
        match self {
            LtProduct::Int8ToInt32 => (
                CUDA_R_8I,
                CUDA_R_32I,
                sys::cublasComputeType_t::CUBLAS_COMPUTE_32I,
                CUDA_R_32I,
            ),
            LtProduct::E4m3ToBf16 => (
                CUDA_R_8F_E4M3,
                CUDA_R_16BF,
                sys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
                CUDA_R_32F,
            ),
        }
    }
}

pub struct CublasLt {
    lt: CudaBlasLT,
    workspace: CudaSlice<u8>,
}

/// The layouts, descriptor and algorithm of one `m x n x k` problem.
pub struct LtPlan {
    product: LtProduct,
    m: usize,
    n: usize,
    k: usize,
    desc: sys::cublasLtMatmulDesc_t,
    a_layout: sys::cublasLtMatrixLayout_t,
    b_layout: sys::cublasLtMatrixLayout_t,
    c_layout: sys::cublasLtMatrixLayout_t,
    algo: sys::cublasLtMatmulAlgo_t,
}

impl Drop for LtPlan {
    fn drop(&mut self) {
        // SAFETY: each handle was created by `CublasLt::plan` and is destroyed once, here.
        // Errors are ignored: nothing can be done about them while dropping.
        unsafe {
            let _ = result::destroy_matrix_layout(self.a_layout);
            let _ = result::destroy_matrix_layout(self.b_layout);
            let _ = result::destroy_matrix_layout(self.c_layout);
            let _ = result::destroy_matmul_desc(self.desc);
        }
    }
}

fn lt_err(what: &'static str) -> impl Fn(result::CublasError) -> anyhow::Error {
    move |e| anyhow::anyhow!("{what}: {e:?}")
}

/// Sets one descriptor attribute of plain type `V`.
///
/// # Safety
/// `desc` is live and `attribute` takes a value of type `V`.
unsafe fn set_desc<V>(
    desc: sys::cublasLtMatmulDesc_t,
    attribute: sys::cublasLtMatmulDescAttributes_t,
    value: V,
    what: &'static str,
) -> Result<()> {
    // SAFETY: the caller's contract; the value outlives the call, which copies it.
    unsafe {
        result::set_matmul_desc_attribute(
            desc,
            attribute,
            (&value as *const V).cast(),
            mem::size_of::<V>(),
        )
    }
    .map_err(lt_err(what))
}

impl CublasLt {
    pub fn open(gpu: &Gpu) -> Result<Self> {
        // SAFETY: only tries to dlopen libcublasLt by its candidate names; without it every
        // call would panic, so this is asked first.
        if !unsafe { sys::is_culib_present() } {
            return Err(SetupError::NoCublas.into());
        }
        let lt = CudaBlasLT::new(gpu.stream.clone()).context("creating a cuBLASLt handle")?;
        let workspace = gpu.stream.alloc_zeros::<u8>(WORKSPACE_BYTES)?;
        Ok(Self { lt, workspace })
    }

    /// The plan of `C (m x n) = A (m x k) B^T` (B stored n x k), all row-major, for
    /// `product`. [`Refused`] when a size breaks cuBLASLt's alignment rule for the type or the
    /// heuristic finds no algorithm.
    pub fn plan(&self, product: LtProduct, m: usize, n: usize, k: usize) -> Result<LtPlan> {
        let multiple = product.size_multiple();
        let name = product.name();
        if !(m.is_multiple_of(multiple) && n.is_multiple_of(multiple) && k.is_multiple_of(multiple))
        {
            return Err(Refused(format!(
                "cuBLASLt's {name} GEMM needs m, n and k multiples of {multiple}; this is {m} x \
                 {n} x {k}"
            ))
            .into());
        }
        let (ab_type, c_type, compute, scale) = product.types();
        // Column-major: "A" = our B as k x n (ld k), transposed; "B" = our A as k x m (ld k);
        // C = n x m (ld n).
        let a_layout = result::create_matrix_layout(ab_type, k as u64, n as u64, k as i64)
            .map_err(lt_err("cuBLASLt layout of B"))?;
        let b_layout = result::create_matrix_layout(ab_type, k as u64, m as u64, k as i64)
            .map_err(lt_err("cuBLASLt layout of A"))?;
        let c_layout = result::create_matrix_layout(c_type, n as u64, m as u64, n as i64)
            .map_err(lt_err("cuBLASLt layout of C"))?;
        let desc = result::create_matmul_desc(compute, scale)
            .map_err(lt_err("cuBLASLt matmul descriptor"))?;
        let mut plan = LtPlan {
            product,
            m,
            n,
            k,
            desc,
            a_layout,
            b_layout,
            c_layout,
            // SAFETY: a plain C struct of integers; overwritten by the heuristic below.
            algo: unsafe { mem::zeroed() },
        };
        let transpose = cudarc::cublas::sys::cublasOperation_t::CUBLAS_OP_T as i32;
        use sys::cublasLtMatmulDescAttributes_t as Attr;
        // SAFETY: the descriptor is live; TRANSA is an int32 cublasOperation_t, FAST_ACCUM an
        // int8 flag.
        unsafe {
            set_desc(
                desc,
                Attr::CUBLASLT_MATMUL_DESC_TRANSA,
                transpose,
                "cuBLASLt TRANSA",
            )?;
            if product == LtProduct::E4m3ToBf16 {
                set_desc(
                    desc,
                    Attr::CUBLASLT_MATMUL_DESC_FAST_ACCUM,
                    1i8,
                    "cuBLASLt FAST_ACCUM",
                )?;
            }
        }
        let pref = result::create_matmul_pref().map_err(lt_err("cuBLASLt preference"))?;
        let size = WORKSPACE_BYTES;
        // SAFETY: live handles; the attribute is a size_t (u64 on the 64-bit hosts we build
        // for); the preference is destroyed right after the query.
        let heuristic = unsafe {
            let set = result::set_matmul_pref_attribute(
                pref,
                sys::cublasLtMatmulPreferenceAttributes_t::CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                (&size as *const usize).cast(),
                mem::size_of::<usize>(),
            );
            let heuristic = set.and_then(|()| {
                result::get_matmul_algo_heuristic(
                    *self.lt.handle(),
                    desc,
                    a_layout,
                    b_layout,
                    c_layout,
                    c_layout,
                    pref,
                )
            });
            let _ = result::destroy_matmul_pref(pref);
            heuristic
        };
        match heuristic {
            Ok(h) => plan.algo = h.algo,
            Err(e) => {
                return Err(Refused(format!(
                    "cuBLASLt has no {name} algorithm for {m} x {n} x {k}: {e:?}"
                ))
                .into());
            }
        }
        Ok(plan)
    }

    /// Enqueues an [`LtProduct::Int8ToInt32`] plan: `c = a b^T`, exact int32.
    pub fn run_int8(
        &self,
        gpu: &Gpu,
        plan: &LtPlan,
        a: &CudaSlice<i8>,
        b: &CudaSlice<i8>,
        c: &mut CudaSlice<i32>,
    ) -> Result<()> {
        if plan.product != LtProduct::Int8ToInt32 {
            bail!("cuBLASLt: an {} plan run as INT8", plan.product.name());
        }
        self.run(gpu, plan, a, b, c, &1i32, &0i32)
    }

    /// Enqueues an [`LtProduct::E4m3ToBf16`] plan: `c = alpha a b^T` in bf16, the operands
    /// FP8 e4m3 given as their bytes.
    pub fn run_fp8(
        &self,
        gpu: &Gpu,
        plan: &LtPlan,
        a: &CudaSlice<u8>,
        b: &CudaSlice<u8>,
        c: &mut CudaSlice<bf16>,
        alpha: f32,
    ) -> Result<()> {
        if plan.product != LtProduct::E4m3ToBf16 {
            bail!("cuBLASLt: an {} plan run as FP8", plan.product.name());
        }
        self.run(gpu, plan, a, b, c, &alpha, &0f32)
    }

    /// `cublasLtMatmul` with `alpha` and `beta` of the plan's scale type.
    #[allow(clippy::too_many_arguments)]
    fn run<In, Out, S>(
        &self,
        gpu: &Gpu,
        plan: &LtPlan,
        a: &CudaSlice<In>,
        b: &CudaSlice<In>,
        c: &mut CudaSlice<Out>,
        alpha: &S,
        beta: &S,
    ) -> Result<()> {
        let LtPlan { m, n, k, .. } = *plan;
        let name = plan.product.name();
        if a.len() < m * k || b.len() < n * k || c.len() < m * n {
            bail!("cuBLASLt {name}: buffers too small for {m} x {n} x {k}");
        }
        let stream = &gpu.stream;
        let (a_ptr, _ra) = a.device_ptr(stream);
        let (b_ptr, _rb) = b.device_ptr(stream);
        let (c_ptr, _rc) = c.device_ptr_mut(stream);
        let (w_ptr, _rw) = self.workspace.device_ptr(stream);
        // SAFETY: the plan's layouts describe exactly these buffers (checked lengths, element
        // types fixed by the public entry points); alpha and beta are of the scale type the
        // plan's descriptor names; the records keep the buffers alive and ordered on the
        // stream for the call.
        unsafe {
            result::matmul(
                *self.lt.handle(),
                plan.desc,
                (alpha as *const S).cast(),
                (beta as *const S).cast(),
                b_ptr as *const c_void,
                plan.a_layout,
                a_ptr as *const c_void,
                plan.b_layout,
                c_ptr as *const c_void,
                plan.c_layout,
                c_ptr as *mut c_void,
                plan.c_layout,
                &plan.algo,
                w_ptr as *mut c_void,
                WORKSPACE_BYTES,
                stream.cu_stream() as *mut _,
            )
        }
        .map_err(|e| anyhow::anyhow!("cublasLtMatmul ({name}): {e:?}"))
    }
}
