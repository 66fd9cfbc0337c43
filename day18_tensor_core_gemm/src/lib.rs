//! Day 18: GEMM on tensor cores. [`TensorCoreGemm::gemm`] computes row-major
//! `C = alpha op(A) op(B) + beta C` ([`GemmEx`], cuBLAS's contract) in bf16 or f16 with f32
//! accumulation, by one of the versions of `gemm.cu`: `mma.sync` from padded shared memory, the
//! same fed by a cp.async pipeline through swizzled shared memory, and the Hopper path (TMA +
//! wgmma, warp specialized, persistent), which takes each operand stored as is or transposed.
//! [`Gemm`] is the library face later days call: the fastest version that takes a problem.
//! cuBLAS (`common::cublas`) is the ceiling and runs the same problems.
//!
//! The modules: [`gemm`] plans and launches `gemm.cu`'s kernels, [`tile`] holds their tiles
//! (which `gemm.cu` gets as defines), [`auto`] is `wgmma_auto`'s choice of tile and CTAs, [`library`] is [`Gemm`], [`shape`] the CLI's problems,
//! [`fp8`] the FP8 problems' inputs and reference, and [`run`] checks and times every version
//! on a problem.

pub mod auto;
pub mod fp8;
pub mod gemm;
pub mod library;
pub mod run;
pub mod shape;
pub mod tile;

use anyhow::{Result, bail};
use common::dtype::Dtype;
use common::element::Element;
pub use common::gpu::cublas::{GemmEx, Stored};
use common::gpu::kernel_build::KernelBuild;
use common::gpu::nvrtc::KernelSource;
use common::session::Refused;

pub use gemm::{Prepared, TensorCoreGemm};
pub use library::Gemm;
pub use shape::GemmShape;

/// The kernels' parameter structs come first, in `gemm_params.cuh`, which `gemm.rs`'s
/// declarations write.
pub const SOURCE: KernelSource = common::kernel_source!("gemm.cu" = ["gemm_params.cuh", "gemm.cu"]);

/// How A and B of a row-major `C = op(A) op(B)` are stored, named as BLAS does by the storage
/// of A then B: `n` as is (A `[m, k]`, B `[k, n]`), `t` transposed (A `[k, m]`, B `[n, k]`).
/// An operand is K-major when k runs along its rows (A as is, B transposed) and MN-major
/// otherwise: `nt` is the linear layer's `x W^T`, both K-major.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    pub a: Stored,
    pub b: Stored,
}

impl Layout {
    /// A `[m, k]`, B `[n, k]`: both K-major, the layout every version takes.
    pub const NT: Layout = Layout {
        a: Stored::AsIs,
        b: Stored::Transposed,
    };
    pub const ALL: [Layout; 4] = [
        Layout::NT,
        Layout {
            a: Stored::AsIs,
            b: Stored::AsIs,
        },
        Layout {
            a: Stored::Transposed,
            b: Stored::AsIs,
        },
        Layout {
            a: Stored::Transposed,
            b: Stored::Transposed,
        },
    ];

    pub fn of(g: &GemmEx) -> Self {
        Self { a: g.a, b: g.b }
    }

    /// `nt`, `nn`, `tn` or `tt`: the kernels' layout suffix.
    pub fn name(self) -> &'static str {
        match (self.a, self.b) {
            (Stored::AsIs, Stored::Transposed) => "nt",
            (Stored::AsIs, Stored::AsIs) => "nn",
            (Stored::Transposed, Stored::AsIs) => "tn",
            (Stored::Transposed, Stored::Transposed) => "tt",
        }
    }

    /// A stored `[k, m]`: m runs along memory.
    pub fn a_mn_major(self) -> bool {
        self.a == Stored::Transposed
    }

    /// B stored `[k, n]`: n runs along memory.
    pub fn b_mn_major(self) -> bool {
        self.b == Stored::AsIs
    }

    /// The formula with the stored shapes: `C = A B^T (A [m, k], B [n, k])`.
    pub fn describe(self) -> String {
        let a = match self.a {
            Stored::AsIs => "A",
            Stored::Transposed => "A^T",
        };
        let b = match self.b {
            Stored::AsIs => "B",
            Stored::Transposed => "B^T",
        };
        let a_shape = if self.a_mn_major() {
            "[k, m]"
        } else {
            "[m, k]"
        };
        let b_shape = if self.b_mn_major() {
            "[k, n]"
        } else {
            "[n, k]"
        };
        format!("C = {a} {b} (A {a_shape}, B {b_shape})")
    }
}

common::versions! {
    /// The versions, in the order the table shows them (cuBLAS, the ceiling, comes first).
    pub enum Version {
        MmaLdmatrix => "mma_ldmatrix",
        MmaPipelined => "mma_pipelined",
        WgmmaTma => "wgmma_tma",
        WgmmaOverlap => "wgmma_overlap",
        WgmmaTmaStore => "wgmma_tma_store",
        WgmmaPrefetchC => "wgmma_prefetch_c",
        WgmmaN192 => "wgmma_n192",
        WgmmaN128 => "wgmma_n128",
        WgmmaN64 => "wgmma_n64",
        WgmmaAuto => "wgmma_auto",
        WgmmaCluster => "wgmma_cluster",
    }
}

impl Version {
    /// The versions that also exist for FP8 (e4m3) operands, layout `nt`, bf16 out.
    pub const FP8: [Version; 4] = [
        Version::WgmmaOverlap,
        Version::WgmmaTmaStore,
        Version::WgmmaCluster,
        Version::WgmmaAuto,
    ];

    /// Needs `sm_90a` (wgmma, TMA, setmaxnreg).
    pub fn is_hopper_only(self) -> bool {
        !matches!(self, Version::MmaLdmatrix | Version::MmaPipelined)
    }

    /// The layouts this version has kernels for: every one for the single-CTA Hopper
    /// versions, the K-major `nt` for the others.
    pub fn layouts(self) -> &'static [Layout] {
        match self {
            Version::MmaLdmatrix | Version::MmaPipelined | Version::WgmmaCluster => {
                &Layout::ALL[..1]
            }
            _ => &Layout::ALL,
        }
    }

    /// `wgmma_auto` has no kernel of its own: it runs one of [`auto::CHOICES`].
    pub fn has_kernels(self) -> bool {
        self != Version::WgmmaAuto
    }

    fn uses_tma(self) -> bool {
        self.is_hopper_only()
    }

    /// Moves C through shared memory and the TMA (stores, and for `wgmma_prefetch_c` loads
    /// too), so C's rows and batch stride must be 16-byte multiples.
    pub fn stores_by_tma(self) -> bool {
        matches!(
            self,
            Version::WgmmaTmaStore
                | Version::WgmmaPrefetchC
                | Version::WgmmaCluster
                | Version::WgmmaN192
                | Version::WgmmaN128
                | Version::WgmmaN64
                | Version::WgmmaAuto
        )
    }

    /// At beta = 1 the TMA adds the rounded product into C in L2 (its reduce-add) instead of
    /// the kernel reading C: `wgmma_tma_store`'s epilogue, which the narrow tiles and
    /// `wgmma_auto` share. C is rounded twice there, as cuBLAS's bf16 kernels do at beta != 0.
    pub fn adds_into_c_in_l2(self) -> bool {
        self.stores_by_tma() && self != Version::WgmmaPrefetchC
    }

    /// CTAs per thread-block cluster (they share B's tile through TMA multicast).
    fn cluster(self) -> usize {
        if self == Version::WgmmaCluster { 2 } else { 1 }
    }
}

/// The CUDA function of a version, layout and dtype: `gemm_wgmma_tma_tn_bf16`.
fn kernel_name(version: Version, layout: Layout, dtype: &str) -> String {
    format!("gemm_{}_{}_{dtype}", version.name(), layout.name())
}

/// What the day compiles: its file for sm_90a with every version, and for the GPU's own
/// architecture without the Hopper ones, both with the tile table's defines
/// ([`tile::gemm_defines`]); a GPU loads the first it runs. The compile test checks both, and
/// `cargo xtask bundle` compiles both ahead of time for the GPU host's kernel cache.
pub fn kernel_builds() -> Vec<KernelBuild> {
    KernelBuild::hopper_or_portable(SOURCE, kernel_names)
        .into_iter()
        .map(|build| build.with_options(tile::gemm_defines()))
        .collect()
}

/// Every CUDA function of `gemm.cu` that exists when compiled for `hopper` (sm_90a) or not.
pub fn kernel_names(hopper: bool) -> Vec<String> {
    let mut names = Vec::new();
    for dtype in ["bf16", "f16"] {
        for v in Version::ALL {
            if v.has_kernels() && (hopper || !v.is_hopper_only()) {
                for &layout in v.layouts() {
                    names.push(kernel_name(v, layout, dtype));
                }
            }
        }
    }
    if hopper {
        names.extend(
            Version::FP8
                .into_iter()
                .filter(|v| v.has_kernels())
                .map(|v| kernel_name(v, Layout::NT, FP8_NAME)),
        );
    }
    names
}

/// The FP8 kernels' dtype in their names (`gemm_wgmma_tma_store_nt_e4m3`).
const FP8_NAME: &str = "e4m3";

fn dtype_name<T: Element>() -> Result<&'static str> {
    match T::DTYPE {
        Dtype::Bf16 => Ok("bf16"),
        Dtype::F16 => Ok("f16"),
        other => bail!(common::UsageError::new(format!(
            "the tensor-core GEMM runs on bf16 or f16, not {other}"
        ))),
    }
}

fn refused(version: Version, why: impl std::fmt::Display) -> anyhow::Error {
    Refused(format!("{}: {why}", version.name())).into()
}

// Compiles every kernel for sm_90a and, without wgmma, for sm_90 (as a GPU before Hopper
// compiles it), and checks that none spills.
common::test_kernel_builds!();

#[cfg(test)]
mod tests {
    use super::*;
    use common::gpu::kernel_build::Target;

    /// ptxas's C7510-C7520 ("wgmma.mma_async instructions are serialized"): each product
    /// would wait for the one before. `wgmma_prefetch_c` branches between a step's commit and
    /// its wait (the leader's loads of C), which must not do that.
    #[test]
    fn the_hopper_kernels_keep_wgmma_asynchronous() {
        let hopper = kernel_builds()
            .into_iter()
            .find(|b| b.target == Target::Hopper)
            .expect("a Hopper build");
        common::testing::compile_keeping_wgmma_asynchronous(&hopper);
    }

    #[test]
    fn layouts_name_their_storage_and_major_ness() {
        let names: Vec<&str> = Layout::ALL.iter().map(|l| l.name()).collect();
        assert_eq!(names, ["nt", "nn", "tn", "tt"]);
        assert!(!Layout::NT.a_mn_major() && !Layout::NT.b_mn_major());
        let tn = Layout::ALL[2];
        assert!(tn.a_mn_major() && tn.b_mn_major());
        assert_eq!(tn.describe(), "C = A^T B (A [k, m], B [k, n])");
        assert_eq!(Layout::NT.describe(), "C = A B^T (A [m, k], B [n, k])");
        // Every version has the linear layer's layout; only the single-CTA Hopper ones all four.
        for v in Version::ALL {
            assert_eq!(v.layouts()[0], Layout::NT);
        }
        assert_eq!(Version::WgmmaOverlap.layouts().len(), 4);
        assert_eq!(Version::WgmmaPrefetchC.layouts().len(), 4);
        assert_eq!(Version::WgmmaCluster.layouts().len(), 1);
        let names = kernel_names(true);
        assert!(names.contains(&"gemm_wgmma_overlap_tn_bf16".to_string()));
        assert!(names.contains(&"gemm_wgmma_prefetch_c_tn_bf16".to_string()));
        assert!(names.contains(&"gemm_wgmma_prefetch_c_tt_f16".to_string()));
        assert!(names.contains(&"gemm_mma_ldmatrix_nt_f16".to_string()));
        assert!(!names.contains(&"gemm_wgmma_cluster_tn_bf16".to_string()));
        assert!(names.contains(&"gemm_wgmma_tma_store_nt_e4m3".to_string()));
        assert!(!names.contains(&"gemm_wgmma_prefetch_c_nt_e4m3".to_string()));
        // Per 16-bit dtype: 2 mma.sync, 7 single-CTA Hopper versions x 4 layouts (wgmma_auto
        // has no kernel of its own), the cluster; then the 3 FP8 kernels.
        assert_eq!(names.len(), 2 * (1 + 1 + 7 * 4 + 1) + 3);
        assert!(!names.iter().any(|n| n.contains("auto")));
        assert!(names.contains(&"gemm_wgmma_n192_tn_bf16".to_string()));
        assert_eq!(kernel_names(false).len(), 2 * 2);
    }

    #[test]
    fn every_build_carries_the_tile_defines() {
        for build in kernel_builds() {
            assert_eq!(build.options, tile::gemm_defines());
        }
        assert_eq!(Version::from_name("wmma"), None);
    }
}
