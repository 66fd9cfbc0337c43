//! Day 19: fused linear + cross-entropy with its backward, in chunks of tokens (Liger Kernel's
//! FusedLinearCrossEntropy, in our own code). The cross-entropy kernels are in
//! `cross_entropy.cu`, launched by [`CrossEntropy`] with the layout of [`tile::LAYOUT`]; the
//! three GEMMs per chunk go through a [`GemmBackend`]: cuBLAS (`chunked_cublas`) or day 18's
//! own tensor-core GEMM ([`Day18Gemm`], `chunked_day18`); the chunked loop is
//! [`FusedPlan::run`]. [`run`] runs both problems' versions through `Session`, checked by
//! [`fused_check`] against the f64 [`reference`].

use common::gpu::kernel_build::KernelBuild;
use common::gpu::nvrtc::KernelSource;

pub mod cross_entropy;
pub mod fused;
pub mod fused_check;
pub mod gemm;
pub mod problem;
pub mod reference;
pub mod row_kernel;
pub mod run;
pub mod tile;
pub mod tolerance;

pub use cross_entropy::{CePlan, CrossEntropy, LossScratch, RowPlan};
pub use fused::{
    ChunkLaunches, FusedPlan, FusedVersion, Shape, default_chunk, output_bytes,
    planned_scratch_bytes,
};
pub use gemm::{Day18Gemm, GemmBackend, PreparedGemm};
pub use problem::{
    CeProblem, DEFAULT_HIDDEN, DEFAULT_TOKENS, DEFAULT_VOCAB, make_inputs, make_targets,
    validate_options,
};
pub use row_kernel::RowKernel;
pub use tile::CLUSTER_MAX_VOCAB;

/// The row kernels' parameter struct comes first, in `cross_entropy_params.cuh`, which
/// `CeRowParams` (`cross_entropy.rs`) writes.
pub const SOURCE: KernelSource =
    common::kernel_source!("cross_entropy.cu" = ["cross_entropy_params.cuh", "cross_entropy.cu"]);

/// Versions of the fused problem, in table order.
pub const FUSED_VERSIONS: &[&str] = &FusedVersion::NAMES;
/// Versions of cross-entropy alone on given logits.
pub const CE_VERSIONS: &[&str] = &RowKernel::NAMES;

/// `cross_entropy.cu` for the GPU's own architecture, with the layout table's defines.
pub(crate) fn kernel_build() -> KernelBuild {
    KernelBuild::device(SOURCE, cross_entropy::FUNCTIONS.iter().copied())
        .with_options(tile::LAYOUT.defines())
}

/// What the day compiles: every kernel (the GEMMs of `chunked_day18` are day 18's), for the GPU's
/// own architecture. The loader compiles the same, the compile test checks this list, and `cargo
/// xtask bundle` compiles it ahead of time for the GPU host's kernel cache.
pub fn kernel_builds() -> Vec<KernelBuild> {
    vec![kernel_build()]
}

// The kernels compile with the layout's defines (so their static_asserts hold), spilling nothing.
common::test_kernel_builds!();

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_versions_keep_their_names_and_order() {
        assert_eq!(FUSED_VERSIONS, ["naive", "chunked_cublas", "chunked_day18"]);
        assert_eq!(
            CE_VERSIONS,
            ["two_pass", "cluster8", "cluster_stream", "cluster_push"]
        );
    }
}
