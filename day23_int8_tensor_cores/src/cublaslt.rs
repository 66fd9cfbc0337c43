//! The ceiling row: cuBLASLt's INT8 GEMM (int8 x int8 -> int32, `CUBLAS_COMPUTE_32I`), what
//! `torch._int_mm` calls underneath, through `common::gpu::cublaslt` (which day 18's FP8
//! ceiling shares): one plan per problem, made once, then one `cublasLtMatmul` per run. The
//! layouts are cuBLASLt's "TN" form, both operands K-major, with every size a multiple of 4.

use std::ops::Deref;

use anyhow::Result;
use common::Gpu;
pub use common::gpu::cublaslt::LtPlan as Int8Plan;
use common::gpu::cublaslt::{CublasLt, LtProduct};

pub struct CublasLtInt8(CublasLt);

impl CublasLtInt8 {
    pub fn open(gpu: &Gpu) -> Result<Self> {
        Ok(Self(CublasLt::open(gpu)?))
    }

    /// The plan of `C (m x n, int32) = A (m x k) B^T (B stored n x k)`, all int8 row-major.
    /// `Refused` when a size is not a multiple of 4 (cuBLASLt's INT8 rule) or the heuristic
    /// finds no algorithm.
    pub fn plan(&self, m: usize, n: usize, k: usize) -> Result<Int8Plan> {
        self.0.plan(LtProduct::Int8ToInt32, m, n, k)
    }
}

/// The plans run on the handle itself: [`CublasLt::run_int8`] enqueues `c = a b^T`, exact
/// int32.
impl Deref for CublasLtInt8 {
    type Target = CublasLt;

    fn deref(&self) -> &CublasLt {
        &self.0
    }
}
