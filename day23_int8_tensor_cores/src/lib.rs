//! Day 23: INT8 GEMM on tensor cores. [`Int8Gemm::run`] computes row-major
//! `C = (A - za)(B - zb)^T` exactly in int32 (A `[m, k]`, B `[n, k]` int8, the layout of a
//! linear layer), or `Y = scale_a * scale_b * C` rounded to bf16, with `zb` and `scale_b` per
//! tensor or per output channel. The versions of `int8_gemm.cu`: `mma.sync` m16n8k32 fed by a
//! cp.async ring (any GPU from Ampere on), and the Hopper path (TMA + wgmma m64n256k32, warp
//! specialized, persistent; sm_90a), whose epilogue stores from registers (`wgmma`) or through
//! shared memory and the TMA, overlapped with the next tile (`wgmma_tma_store`). cuBLASLt's
//! INT8 GEMM ([`cublaslt`]) is the ceiling.
//!
//! The modules: [`gemm`] plans and launches `int8_gemm.cu`'s kernels (on day 18's tiles,
//! `day18::tile`, which it also passes to the kernel file as defines), [`problem`] is one
//! problem (sizes, quantization, operands on the GPU, references), [`run`] checks and times
//! every version on it, [`tma`] makes the tensor maps.

pub mod cublaslt;
pub mod gemm;
pub mod problem;
pub mod run;
pub mod tma;

use anyhow::Result;
use common::UsageError;
use common::gpu::kernel_build::KernelBuild;
use common::gpu::nvrtc::KernelSource;
use common::session::Refused;
use cudarc::driver::DeviceRepr;
use day18::tile::{MMA_TILE, WG_TILE};
use half::bf16;

pub use gemm::{Int8Gemm, Prepared};
pub use problem::{DeviceOperands, Quant, Shape};

/// The kernels' parameter structs come first, in `int8_gemm_params.cuh`, which `gemm.rs`'s
/// declarations write.
pub const SOURCE: KernelSource =
    common::kernel_source!("int8_gemm.cu" = ["int8_gemm_params.cuh", "int8_gemm.cu"]);

common::versions! {
    /// The versions, in the order the table shows them (cuBLASLt, the ceiling, comes first).
    pub enum Version {
        MmaSync => "mma_sync",
        Wgmma => "wgmma",
        WgmmaTmaStore => "wgmma_tma_store",
    }
}

impl Version {
    /// Needs `sm_90a` (wgmma, TMA, setmaxnreg).
    pub fn is_hopper_only(self) -> bool {
        matches!(self, Version::Wgmma | Version::WgmmaTmaStore)
    }
}

/// What the epilogue writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Out {
    /// The exact int32 `sum (a - za)(b - zb)`.
    S32,
    /// `scale_a * scale_b[n] * that`, rounded to bf16.
    Bf16,
}

impl Out {
    pub fn name(self) -> &'static str {
        match self {
            Out::S32 => "s32",
            Out::Bf16 => "bf16",
        }
    }

    /// Bytes of one output element.
    pub fn size(self) -> usize {
        match self {
            Out::S32 => 4,
            Out::Bf16 => 2,
        }
    }
}

/// Whether `version` writes C by TMA stores for `out` and `n` columns: only
/// `wgmma_tma_store`, and only where a row of C is a multiple of 16 bytes (the TMA's rule);
/// elsewhere it runs `wgmma`'s kernel, which stores from registers.
fn stores_by_tma(version: Version, out: Out, n: usize) -> bool {
    version == Version::WgmmaTmaStore && (n * out.size()).is_multiple_of(16)
}

/// The output element of an [`Out`]: i32 or bf16.
pub trait OutElement: common::Element + DeviceRepr {
    const OUT: Out;
}
impl OutElement for i32 {
    const OUT: Out = Out::S32;
}
impl OutElement for bf16 {
    const OUT: Out = Out::Bf16;
}

/// The CUDA function of a version and an output: `int8_gemm_wgmma_bf16`. (For
/// `wgmma_tma_store` on rows of C off 16 bytes, [`Int8Gemm::plan`] takes `wgmma`'s instead.)
fn kernel_name(version: Version, out: Out) -> String {
    format!("int8_gemm_{}_{}", version.name(), out.name())
}

/// The row-sum kernel that feeds the zero-point corrections.
pub const ROW_SUMS: &str = "int8_row_sums";

/// What the day compiles: its file for sm_90a with every version, and for the GPU's own
/// architecture without the Hopper ones, both with the tiles' defines ([`int8_defines`]); a GPU
/// loads the first it runs. The compile test checks both, and `cargo xtask bundle` compiles
/// both ahead of time for the GPU host's kernel cache.
pub fn kernel_builds() -> Vec<KernelBuild> {
    KernelBuild::hopper_or_portable(SOURCE, kernel_names)
        .into_iter()
        .map(|build| build.with_options(int8_defines()))
        .collect()
}

/// `int8_gemm.cu`'s defines: day 18's tiles, which run int8 as they run 16-bit types (a k step
/// of 128 bytes), as `INT8_MMA_*` and `INT8_WG_*`.
pub fn int8_defines() -> Vec<String> {
    let mut defines = MMA_TILE.defines("INT8_MMA");
    defines.extend(WG_TILE.defines("INT8_WG"));
    defines
}

/// Every CUDA function of `int8_gemm.cu` that exists when compiled for `hopper` (sm_90a) or not.
pub fn kernel_names(hopper: bool) -> Vec<String> {
    let mut names = vec![ROW_SUMS.to_string()];
    for v in Version::ALL {
        if hopper || !v.is_hopper_only() {
            for out in [Out::S32, Out::Bf16] {
                names.push(kernel_name(v, out));
            }
        }
    }
    names
}

fn refused(version: Version, why: impl std::fmt::Display) -> anyhow::Error {
    Refused(format!("{}: {why}", version.name())).into()
}

/// The largest k whose every output fits in int32, with or without zero points.
///
/// Without zero points `|a b| <= 128 * 128 = 16384`; with them `|(a - za)(b - zb)| <= 255 *
/// 255` (zero points in the int8 range), day 15's bound. The raw sum the tensor cores keep,
/// `sum a b`, stays within 16384 k, below 2^31 for either bound; the corrections are modular.
pub fn max_k(zero_points: bool) -> usize {
    if zero_points {
        common::reference::quantize::INT8_MATMUL_MAX_K
    } else {
        i32::MAX as usize / (128 * 128)
    }
}

/// An error for a k past [`max_k`].
pub fn check_k(k: usize, zero_points: bool) -> Result<(), UsageError> {
    let max = max_k(zero_points);
    if k > max {
        return Err(UsageError::new(format!(
            "int8 gemm: k = {k} can overflow the int32 output ({}); at most {max}",
            if zero_points {
                "(a - za)(b - zb) reaches 255 * 255 with zero points"
            } else {
                "a b reaches 128 * 128"
            }
        )));
    }
    Ok(())
}

// Compiles every kernel for sm_90a and, without wgmma, for sm_90 (as a GPU before Hopper
// compiles it), and checks that none spills.
common::test_kernel_builds!();

#[cfg(test)]
mod tests {
    use super::*;
    use day18::tile::Staging;

    #[test]
    fn names_round_trip_and_name_each_output() {
        assert_eq!(Version::from_name("dp4a"), None);
        let names = kernel_names(true);
        assert!(names.contains(&"int8_gemm_wgmma_bf16".to_string()));
        assert!(names.contains(&"int8_gemm_mma_sync_s32".to_string()));
        assert!(names.contains(&"int8_gemm_wgmma_tma_store_s32".to_string()));
        assert_eq!(names.len(), 7);
        assert_eq!(kernel_names(false).len(), 3);
    }

    /// The kernels run day 18's tiles: the shared memory the launcher gave before they were
    /// shared, and every build carries them.
    #[test]
    fn the_tiles_are_day_18s_in_bytes() {
        assert_eq!(MMA_TILE.shared_bytes(), 4 * 2 * 128 * 128);
        assert_eq!(
            WG_TILE.shared_bytes(Staging::Registers),
            4 * (128 + 256) * 128 + 8 * 8 + 1024
        );
        // 230 464 bytes of the 232 448 an H100 block may have.
        assert_eq!(WG_TILE.shared_bytes(Staging::TmaStore), 230_464);
        for build in kernel_builds() {
            assert_eq!(build.options, int8_defines());
        }
        assert!(int8_defines().contains(&"-DINT8_WG_TMA_STORE_SHARED_BYTES=230464".to_string()));
    }

    #[test]
    fn the_k_bound_is_the_last_k_that_fits() {
        for zp in [false, true] {
            let (k, worst) = (max_k(zp) as i64, if zp { 255 * 255 } else { 128 * 128 });
            assert!(k * worst <= i64::from(i32::MAX));
            assert!((k + 1) * worst > i64::from(i32::MAX));
            assert!(check_k(k as usize, zp).is_ok());
            let err = check_k(k as usize + 1, zp).unwrap_err().to_string();
            assert!(err.contains("can overflow the int32 output"), "{err}");
        }
        assert_eq!(max_k(true), 33025);
        assert_eq!(max_k(false), 131071);
    }

    #[test]
    fn tma_stores_only_where_rows_of_c_are_16_byte_multiples() {
        assert!(stores_by_tma(Version::WgmmaTmaStore, Out::S32, 4096));
        assert!(stores_by_tma(Version::WgmmaTmaStore, Out::S32, 5000));
        assert!(!stores_by_tma(Version::WgmmaTmaStore, Out::S32, 1001));
        assert!(stores_by_tma(Version::WgmmaTmaStore, Out::Bf16, 312));
        assert!(!stores_by_tma(Version::WgmmaTmaStore, Out::Bf16, 1004));
        assert!(!stores_by_tma(Version::Wgmma, Out::S32, 4096));
    }
}
