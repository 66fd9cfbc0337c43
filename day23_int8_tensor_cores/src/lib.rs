//! Day 23: INT8 GEMM on tensor cores. [`Int8Gemm::run`] computes row-major
//! `C = (A - za)(B - zb)^T` exactly in int32 (A `[m, k]`, B `[n, k]` int8, the layout of a
//! linear layer), or `Y = scale_a * scale_b * C` rounded to bf16, with `zb` and `scale_b` per
//! tensor or per output channel. The versions of `int8_gemm.cu`: `mma.sync` m16n8k32 fed by a
//! cp.async ring (any GPU from Ampere on), and the Hopper path (TMA + wgmma m64n256k32, warp
//! specialized, persistent; sm_90a), whose epilogue stores from registers (`wgmma`) or through
//! shared memory and the TMA, overlapped with the next tile (`wgmma_tma_store`). cuBLASLt's
//! INT8 GEMM ([`cublaslt`]) is the ceiling.

pub mod cublaslt;
pub mod problem;
pub mod tma;

use anyhow::{Result, bail};
use common::gpu::kernel::KernelSet;
use common::gpu::kernel_build::{KernelBuild, Target, first_runnable};
use common::gpu::nvrtc::KernelSource;
use common::session::Refused;
use common::{Gpu, Kernel, LaunchShape, UsageError};
use cudarc::driver::{CudaSlice, DevicePtr, DeviceRepr, PushKernelArg};
use half::bf16;

pub use problem::{DeviceOperands, Quant, Shape};

pub const SOURCE: KernelSource = KernelSource {
    file_name: "int8_gemm.cu",
    code: include_str!("int8_gemm.cu"),
};

/// The versions, in the order the table shows them (cuBLASLt, the ceiling, comes first).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    MmaSync,
    Wgmma,
    WgmmaTmaStore,
}

impl Version {
    pub const ALL: [Version; 3] = [Version::MmaSync, Version::Wgmma, Version::WgmmaTmaStore];

    pub fn name(self) -> &'static str {
        match self {
            Version::MmaSync => "mma_sync",
            Version::Wgmma => "wgmma",
            Version::WgmmaTmaStore => "wgmma_tma_store",
        }
    }

    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|v| v.name() == name)
    }

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
/// architecture without the Hopper ones; a GPU loads the first it runs. The compile test
/// checks both, and `cargo xtask bundle` compiles both ahead of time for the GPU host's
/// kernel cache.
pub fn kernel_builds() -> Vec<KernelBuild> {
    KernelBuild::hopper_or_portable(SOURCE, kernel_names)
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

// Tiles and resources of each kernel, as int8_gemm.cu defines them.
const MMA_TILE: usize = 128;
const MMA_THREADS: u32 = 256;
/// 4 stages x (128 + 128) rows x 128 bytes.
const MMA_SHARED: u32 = 4 * 2 * 128 * 128;
const WG_BM: usize = 128;
const WG_BN: usize = 256;
const WG_THREADS: u32 = 384;
/// 4 stages of a 128 x 128-byte and a 256 x 128-byte tile, the 8 barriers, 1 KiB to align.
const WG_SHARED: u32 = 4 * (128 + 256) * 128 + 8 * 8 + 1024;
/// wgmma_tma_store: the same and the staging, 2 consumers x 2 buffers x 64 rows x 128 bytes
/// (230 464 bytes of the 232 448 an H100 block may have).
const WG_TMA_STORE_SHARED: u32 = WG_SHARED + 2 * 2 * 64 * 128;
/// Rows per block of the row-sum kernel (one warp each).
const SUM_ROWS_PER_BLOCK: usize = 8;

/// The day's kernels, compiled for one GPU: for `sm_90a` on Hopper, so the wgmma version
/// exists; for the device's own architecture elsewhere, without it.
pub struct Int8Gemm {
    kernels: KernelSet,
    hopper: bool,
    sms: u32,
}

impl Int8Gemm {
    pub fn load(gpu: &Gpu) -> Result<Self> {
        let build = first_runnable(kernel_builds(), &gpu.info.arch)
            .expect("the portable build runs on every GPU");
        let hopper = build.target == Target::Hopper;
        Ok(Self {
            kernels: KernelSet::load_build(gpu, &build)?,
            hopper,
            sms: gpu.info.sms,
        })
    }

    /// Whether the Hopper version was compiled (the GPU is an sm_90).
    pub fn is_hopper(&self) -> bool {
        self.hopper
    }

    /// The kernel a version runs for `out` and its launch shape, for the table; [`Refused`]
    /// where the version cannot take the problem, a [`UsageError`] for a problem no version
    /// takes (see [`Shape::validate`]).
    pub fn plan(&self, version: Version, out: Out, s: &Shape) -> Result<(&Kernel, LaunchShape)> {
        s.validate()?;
        if version.is_hopper_only() && !self.hopper {
            return Err(refused(version, "needs an sm_90 GPU (Hopper)"));
        }
        // wgmma_tma_store on rows of C the TMA cannot address runs wgmma's kernel.
        let tma_store = stores_by_tma(version, out, s.n);
        let runs = if version == Version::WgmmaTmaStore && !tma_store {
            Version::Wgmma
        } else {
            version
        };
        let kernel = self.kernels.get(&kernel_name(runs, out))?;
        let launch = match runs {
            Version::MmaSync => {
                if s.m.div_ceil(MMA_TILE) > 65535 {
                    return Err(refused(
                        version,
                        "m needs more than 65535 tile rows (the grid's y)",
                    ));
                }
                LaunchShape {
                    grid: (
                        s.n.div_ceil(MMA_TILE) as u32,
                        s.m.div_ceil(MMA_TILE) as u32,
                        1,
                    ),
                    block: (MMA_THREADS, 1, 1),
                    dynamic_shared_bytes: MMA_SHARED,
                }
            }
            Version::Wgmma | Version::WgmmaTmaStore => {
                let tiles = s.m.div_ceil(WG_BM) as u64 * s.n.div_ceil(WG_BN) as u64;
                if tiles > i32::MAX as u64 {
                    return Err(refused(version, "more than 2^31 tiles"));
                }
                // Persistent: one block per SM, never more blocks than tiles.
                LaunchShape {
                    grid: (tiles.min(u64::from(self.sms)) as u32, 1, 1),
                    block: (WG_THREADS, 1, 1),
                    dynamic_shared_bytes: if tma_store {
                        WG_TMA_STORE_SHARED
                    } else {
                        WG_SHARED
                    },
                }
            }
        };
        Ok((kernel, launch))
    }

    /// The row-sum kernel and its launch over `rows` rows, for the table's notes.
    fn row_sums_shape(rows: usize) -> LaunchShape {
        LaunchShape::linear(rows.div_ceil(SUM_ROWS_PER_BLOCK) as u32, 256)
    }

    /// Enqueues the whole operation on `gpu.stream`: the row sums its zero points need (of A
    /// when zb is nonzero somewhere, of B when za is), then the GEMM with its epilogue.
    pub fn run<T: OutElement>(
        &self,
        gpu: &Gpu,
        version: Version,
        ops: &mut DeviceOperands,
        c: &mut CudaSlice<T>,
    ) -> Result<()> {
        let s = ops.shape;
        if c.len() < s.m * s.n {
            bail!(
                "int8 gemm: C holds {} elements, {s:?} needs {}",
                c.len(),
                s.m * s.n
            );
        }
        check_k(s.k, ops.has_zero_points())?;
        let (kernel, launch_shape) = self.plan(version, T::OUT, &s)?;
        // The kernels take (A, B) the same way but as raw pointers (mma_sync) or tensor maps
        // (the wgmma ones): build what the version needs before anything is enqueued, so a
        // refusal (an unaligned operand) leaves the stream untouched.
        let maps = if version.is_hopper_only() {
            let addresses = (
                ops.a.device_ptr(&gpu.stream).0,
                ops.b.device_ptr(&gpu.stream).0,
            );
            match ops.maps {
                Some((at, maps)) if at == addresses => Some(maps),
                _ => {
                    let maps = (
                        tma::k_major_i8(gpu, &ops.a, s.m, s.k, WG_BM as u32)?,
                        tma::k_major_i8(gpu, &ops.b, s.n, s.k, WG_BN as u32)?,
                    );
                    ops.maps = Some((addresses, maps));
                    Some(maps)
                }
            }
        } else {
            None
        };
        // C's map is made on every call (a host call of about a microsecond): C is not kept
        // with the operands.
        let map_c = if stores_by_tma(version, T::OUT, s.n) {
            Some(tma::row_major_out(gpu, c, s.m, s.n, T::OUT)?)
        } else {
            None
        };
        let sums = self.kernels.get(ROW_SUMS)?;
        let k = s.k as i32;
        if let Some(row_sums) = ops.row_sums.as_mut() {
            let rows = s.m as i32;
            let mut l = gpu.stream.launch_builder(&sums.func);
            l.arg(&ops.a).arg(row_sums).arg(&rows).arg(&k);
            // SAFETY: int8_row_sums(const signed char* x, int* sums, int rows, int k): A holds
            // m k bytes (k % 16 == 0, an allocation's aligned start), row_sums m ints.
            unsafe { l.launch(sums.config(&Self::row_sums_shape(s.m))?) }?;
        }
        if let Some(col_sums) = ops.col_sums.as_mut() {
            let rows = s.n as i32;
            let mut l = gpu.stream.launch_builder(&sums.func);
            l.arg(&ops.b).arg(col_sums).arg(&rows).arg(&k);
            // SAFETY: as above, over B's n rows.
            unsafe { l.launch(sums.config(&Self::row_sums_shape(s.n))?) }?;
        }
        let (m, n) = (s.m as i32, s.n as i32);
        // A null pointer tells the kernel that a correction term is 0 everywhere.
        let null = 0u64;
        let mut l = gpu.stream.launch_builder(&kernel.func);
        match &maps {
            Some((map_a, map_b)) => l.arg(map_a).arg(map_b),
            None => l.arg(&ops.a).arg(&ops.b),
        };
        if let Some(map_c) = &map_c {
            l.arg(map_c);
        }
        l.arg(&mut *c).arg(&m).arg(&n).arg(&k);
        match &ops.row_sums {
            Some(r) => l.arg(r),
            None => l.arg(&null),
        };
        match &ops.col_sums {
            Some(cs) => l.arg(cs),
            None => l.arg(&null),
        };
        l.arg(&ops.zb).arg(&ops.zb_step).arg(&ops.za);
        l.arg(&ops.scale_b).arg(&ops.scale_b_step).arg(&ops.scale_a);
        // SAFETY: matches MMA_SYNC_KERNEL / WGMMA_KERNEL / WGMMA_TMA_STORE_KERNEL: (A, B) as
        // int8 pointers or tensor maps of exactly A [m, k] and B [n, k], then C's map of
        // exactly C [m, n] for the TMA-store kernel (which plan chose exactly when map_c is
        // made: both follow stores_by_tma); C holds m n outputs (checked above); the
        // row and column sums hold m and n ints (or are null, and then never read); zb and
        // scale_b hold n values when their step is 1, one when it is 0 (DeviceOperands
        // builds them so). Every load and store is bounded by m, n and k.
        unsafe { l.launch(kernel.config(&launch_shape)?) }?;
        Ok(())
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kernel_compiles_without_spilling() {
        // sm_90a (all of them) and sm_90 (no wgmma, as a GPU before Hopper compiles it).
        common::testing::assert_builds_compile_without_spills(&kernel_builds());
    }

    #[test]
    fn names_round_trip_and_name_each_output() {
        for v in Version::ALL {
            assert_eq!(Version::from_name(v.name()), Some(v));
        }
        assert_eq!(Version::from_name("dp4a"), None);
        let names = kernel_names(true);
        assert!(names.contains(&"int8_gemm_wgmma_bf16".to_string()));
        assert!(names.contains(&"int8_gemm_mma_sync_s32".to_string()));
        assert!(names.contains(&"int8_gemm_wgmma_tma_store_s32".to_string()));
        assert_eq!(names.len(), 7);
        assert_eq!(kernel_names(false).len(), 3);
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
