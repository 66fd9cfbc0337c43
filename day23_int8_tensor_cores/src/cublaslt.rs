//! The ceiling row: cuBLASLt's INT8 GEMM (int8 x int8 -> int32, `CUBLAS_COMPUTE_32I`), what
//! `torch._int_mm` calls underneath. cudarc's safe cuBLASLt wrapper has f32/f16/bf16 only, so
//! this uses its `result` level: one plan per problem (layouts, descriptor, the heuristic's
//! algorithm), made once, then one `cublasLtMatmul` per run.
//!
//! cuBLASLt is column-major. Our row-major `C (m x n) = A (m x k) B^T` with B stored `[n, k]`
//! is, read column-major, `C^T (n x m) = B^T (n x k) A (k x m)` where B's bytes are a
//! column-major `k x n` matrix and A's a column-major `k x m`: so cuBLASLt's "A" is our B,
//! transposed ("T"), and its "B" is our A as is ("N"): the "TN" form, both operands K-major,
//! which is the form its INT8 kernels require (with every leading dimension a multiple of 4).

use std::ffi::c_void;
use std::mem;

use anyhow::{Context, Result, bail};
use common::Gpu;
use common::error::SetupError;
use common::session::Refused;
use cudarc::cublaslt::{CudaBlasLT, MatmulShared, result, sys};
use cudarc::driver::{CudaSlice, DevicePtr, DevicePtrMut};

/// The workspace NVIDIA recommends on Hopper.
const WORKSPACE_BYTES: usize = 32 << 20;

pub struct CublasLtInt8 {
    lt: CudaBlasLT,
    workspace: CudaSlice<u8>,
}

/// The layouts, descriptor and algorithm of one `m x n x k` problem.
pub struct Int8Plan {
    m: usize,
    n: usize,
    k: usize,
    desc: sys::cublasLtMatmulDesc_t,
    a_layout: sys::cublasLtMatrixLayout_t,
    b_layout: sys::cublasLtMatrixLayout_t,
    c_layout: sys::cublasLtMatrixLayout_t,
    algo: sys::cublasLtMatmulAlgo_t,
}

impl Drop for Int8Plan {
    fn drop(&mut self) {
        // SAFETY: each handle was created by `CublasLtInt8::plan` and is destroyed once, here.
        // Errors are ignored: nothing can be done about them while dropping.
        unsafe {
            let _ = result::destroy_matrix_layout(self.a_layout);
            let _ = result::destroy_matrix_layout(self.b_layout);
            let _ = result::destroy_matrix_layout(self.c_layout);
            let _ = result::destroy_matmul_desc(self.desc);
        }
    }
}

impl CublasLtInt8 {
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

    /// The plan of `C (m x n, int32) = A (m x k) B^T (B stored n x k)`, all int8 row-major.
    /// [`Refused`] when a size is not a multiple of 4 (cuBLASLt's INT8 rule) or the heuristic
    /// finds no algorithm.
    pub fn plan(&self, m: usize, n: usize, k: usize) -> Result<Int8Plan> {
        if !(m.is_multiple_of(4) && n.is_multiple_of(4) && k.is_multiple_of(4)) {
            return Err(Refused(format!(
                "cuBLASLt's INT8 GEMM needs m, n and k multiples of 4; this is {m} x {n} x {k}"
            ))
            .into());
        }
        let i8_type = sys::cudaDataType_t::CUDA_R_8I;
        let i32_type = sys::cudaDataType_t::CUDA_R_32I;
        let lt_err =
            |what: &'static str| move |e: result::CublasError| anyhow::anyhow!("{what}: {e:?}");
        // Column-major: "A" = our B as k x n (ld k), transposed; "B" = our A as k x m (ld k);
        // C = n x m (ld n).
        let a_layout = result::create_matrix_layout(i8_type, k as u64, n as u64, k as i64)
            .map_err(lt_err("cuBLASLt layout of B"))?;
        let b_layout = result::create_matrix_layout(i8_type, k as u64, m as u64, k as i64)
            .map_err(lt_err("cuBLASLt layout of A"))?;
        let c_layout = result::create_matrix_layout(i32_type, n as u64, m as u64, n as i64)
            .map_err(lt_err("cuBLASLt layout of C"))?;
        let desc =
            result::create_matmul_desc(sys::cublasComputeType_t::CUBLAS_COMPUTE_32I, i32_type)
                .map_err(lt_err("cuBLASLt matmul descriptor"))?;
        let mut plan = Int8Plan {
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
        let transpose: i32 = cudarc::cublas::sys::cublasOperation_t::CUBLAS_OP_T as i32;
        // SAFETY: the descriptor is live; the attribute is an int32 cublasOperation_t.
        unsafe {
            result::set_matmul_desc_attribute(
                desc,
                sys::cublasLtMatmulDescAttributes_t::CUBLASLT_MATMUL_DESC_TRANSA,
                (&transpose as *const i32).cast(),
                mem::size_of::<i32>(),
            )
        }
        .map_err(lt_err("cuBLASLt TRANSA"))?;
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
                    "cuBLASLt has no INT8 algorithm for {m} x {n} x {k}: {e:?}"
                ))
                .into());
            }
        }
        Ok(plan)
    }

    /// Enqueues the plan's product on the GPU's stream: `c = a b^T`, exact int32.
    pub fn run(
        &self,
        gpu: &Gpu,
        plan: &Int8Plan,
        a: &CudaSlice<i8>,
        b: &CudaSlice<i8>,
        c: &mut CudaSlice<i32>,
    ) -> Result<()> {
        let Int8Plan { m, n, k, .. } = *plan;
        if a.len() < m * k || b.len() < n * k || c.len() < m * n {
            bail!("cuBLASLt int8: buffers too small for {m} x {n} x {k}");
        }
        let stream = &gpu.stream;
        let (alpha, beta) = (1i32, 0i32);
        let (a_ptr, _ra) = a.device_ptr(stream);
        let (b_ptr, _rb) = b.device_ptr(stream);
        let (c_ptr, _rc) = c.device_ptr_mut(stream);
        let (w_ptr, _rw) = self.workspace.device_ptr(stream);
        // SAFETY: the plan's layouts describe exactly these buffers (checked lengths); alpha
        // and beta are int32 as the scale type says; the records keep the buffers alive and
        // ordered on the stream for the call.
        unsafe {
            result::matmul(
                *self.lt.handle(),
                plan.desc,
                (&alpha as *const i32).cast(),
                (&beta as *const i32).cast(),
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
        .map_err(|e| anyhow::anyhow!("cublasLtMatmul (int8): {e:?}"))
    }
}
