//! Day 18: GEMM on tensor cores. [`TensorCoreGemm::gemm`] computes row-major
//! `C = alpha op(A) op(B) + beta C` ([`GemmEx`], cuBLAS's contract) in bf16 or f16 with f32
//! accumulation, by one of the versions of `gemm.cu`: `mma.sync` from padded shared memory, the
//! same fed by a cp.async pipeline through swizzled shared memory, and the Hopper path (TMA +
//! wgmma, warp specialized, persistent), which takes each operand stored as is or transposed.
//! [`Gemm`] is the library face later days call: the fastest version that takes a problem.
//! cuBLAS (`common::cublas`) is the ceiling and runs the same problems.

pub mod fp8;

use std::sync::Arc;

use anyhow::{Result, bail};
use common::dtype::Dtype;
use common::element::Element;
pub use common::gpu::cublas::{GemmEx, Stored};
use common::gpu::kernel::KernelSet;
use common::gpu::kernel_build::{KernelBuild, Target, first_runnable};
use common::gpu::nvrtc::KernelSource;
use common::gpu::tma::{KMajorTiles, MnMajorTiles, TmaDescriptor};
use common::session::Refused;
use common::{Gpu, Kernel, LaunchShape};
use cudarc::driver::{CudaSlice, CudaStream, DevicePtr, DevicePtrMut, DeviceSlice, PushKernelArg};

pub const SOURCE: KernelSource = KernelSource {
    file_name: "gemm.cu",
    code: include_str!("gemm.cu"),
};

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

/// The versions, in the order the table shows them (cuBLAS, the ceiling, comes first).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    MmaLdmatrix,
    MmaPipelined,
    WgmmaTma,
    WgmmaOverlap,
    WgmmaTmaStore,
    WgmmaPrefetchC,
    WgmmaCluster,
}

impl Version {
    pub const ALL: [Version; 7] = [
        Version::MmaLdmatrix,
        Version::MmaPipelined,
        Version::WgmmaTma,
        Version::WgmmaOverlap,
        Version::WgmmaTmaStore,
        Version::WgmmaPrefetchC,
        Version::WgmmaCluster,
    ];

    /// The versions that also exist for FP8 (e4m3) operands, layout `nt`, bf16 out.
    pub const FP8: [Version; 2] = [Version::WgmmaOverlap, Version::WgmmaTmaStore];

    /// The name `--kernel` takes, and the kernel's name without its layout and dtype.
    pub fn name(self) -> &'static str {
        match self {
            Version::MmaLdmatrix => "mma_ldmatrix",
            Version::MmaPipelined => "mma_pipelined",
            Version::WgmmaTma => "wgmma_tma",
            Version::WgmmaOverlap => "wgmma_overlap",
            Version::WgmmaTmaStore => "wgmma_tma_store",
            Version::WgmmaPrefetchC => "wgmma_prefetch_c",
            Version::WgmmaCluster => "wgmma_cluster",
        }
    }

    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|v| v.name() == name)
    }

    /// Needs `sm_90a` (wgmma, TMA, setmaxnreg).
    pub fn is_hopper_only(self) -> bool {
        matches!(
            self,
            Version::WgmmaTma
                | Version::WgmmaOverlap
                | Version::WgmmaTmaStore
                | Version::WgmmaPrefetchC
                | Version::WgmmaCluster
        )
    }

    /// The layouts this version has kernels for: every one for the single-CTA Hopper
    /// versions, the K-major `nt` for the others.
    pub fn layouts(self) -> &'static [Layout] {
        match self {
            Version::WgmmaTma
            | Version::WgmmaOverlap
            | Version::WgmmaTmaStore
            | Version::WgmmaPrefetchC => &Layout::ALL,
            _ => &Layout::ALL[..1],
        }
    }

    fn uses_tma(self) -> bool {
        self.is_hopper_only()
    }

    /// Moves C through shared memory and the TMA (stores, and for `wgmma_prefetch_c` loads
    /// too), so C's rows and batch stride must be 16-byte multiples.
    pub fn stores_by_tma(self) -> bool {
        matches!(self, Version::WgmmaTmaStore | Version::WgmmaPrefetchC)
    }

    /// CTAs per thread-block cluster (they share B's tile through TMA multicast).
    fn cluster(self) -> usize {
        if self == Version::WgmmaCluster { 2 } else { 1 }
    }
}

/// One problem of the CLI and the tests: `batch` products `C (m x n) = op(A) op(B)`, each
/// operand's matrices back to back, alpha = 1, beta = 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GemmShape {
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub batch: usize,
    pub layout: Layout,
}

impl GemmShape {
    pub const fn square(size: usize) -> Self {
        Self {
            m: size,
            n: size,
            k: size,
            batch: 1,
            layout: Layout::NT,
        }
    }

    pub fn describe(&self, dtype: Dtype) -> String {
        let batch = if self.batch > 1 {
            format!("{} x ", self.batch)
        } else {
            String::new()
        };
        format!(
            "{batch}{} x {} x {} (m x n x k), {}, {}",
            self.m,
            self.n,
            self.k,
            self.layout.describe(),
            dtype.name()
        )
    }

    /// The key peers and reports share: `gemm/bf16/4096x4096x4096` for the linear layer's
    /// layout, `gemm_tn/bf16/...` for another, with a `8x` batch prefix on the sizes when
    /// batched.
    pub fn key(&self, dtype: Dtype) -> String {
        let batch = if self.batch > 1 {
            format!("{}x", self.batch)
        } else {
            String::new()
        };
        let op = if self.layout == Layout::NT {
            "gemm".to_string()
        } else {
            format!("gemm_{}", self.layout.name())
        };
        format!(
            "{op}/{}/{batch}{}x{}x{}",
            dtype.name(),
            self.m,
            self.n,
            self.k
        )
    }

    /// The [`GemmEx`] of this problem: `C = op(A) op(B)`, matrices back to back.
    pub fn gemm_ex(&self) -> GemmEx {
        GemmEx {
            a: self.layout.a,
            b: self.layout.b,
            batch: self.batch,
            ..GemmEx::new(self.m, self.n, self.k)
        }
    }

    /// Every size this shape derives (the operands' lengths, their bytes, the work), each
    /// checked: a product that overflows `usize` is a [`common::UsageError`] here, not a small
    /// number after a wrap in a release build. Call it before using the lengths below.
    pub fn check_sizes(&self, dtype: Dtype) -> Result<(), common::UsageError> {
        use common::sizes::{product, sum};
        let GemmShape { m, n, k, batch, .. } = *self;
        let a = product("A (batch x m x k)", &[batch, m, k])?;
        let b = product("B (batch x k x n)", &[batch, k, n])?;
        let c = product("C (batch x m x n)", &[batch, m, n])?;
        let all = sum("A + B + C", &[a, b, c])?;
        product("the matrices' bytes", &[all, dtype.size()])?;
        product("the work (2 batch m n k)", &[2, batch, m, n, k])?;
        Ok(())
    }

    pub fn a_len(&self) -> usize {
        self.batch * self.m * self.k
    }
    pub fn b_len(&self) -> usize {
        self.batch * self.n * self.k
    }
    pub fn c_len(&self) -> usize {
        self.batch * self.m * self.n
    }

    /// 2 m n k per product.
    pub fn flops(&self) -> u64 {
        2 * (self.batch * self.m * self.n * self.k) as u64
    }

    /// Least traffic: A and B read once, C written once.
    pub fn min_bytes(&self, dtype: Dtype) -> u64 {
        ((self.a_len() + self.b_len() + self.c_len()) * dtype.size()) as u64
    }
}

/// The CUDA function of a version, layout and dtype: `gemm_wgmma_tma_tn_bf16`.
fn kernel_name(version: Version, layout: Layout, dtype: &str) -> String {
    format!("gemm_{}_{}_{dtype}", version.name(), layout.name())
}

/// What the day compiles: its file for sm_90a with every version, and for the GPU's own
/// architecture without the Hopper ones; a GPU loads the first it runs. The compile test
/// checks both, and `cargo xtask bundle` compiles both ahead of time for the GPU host's
/// kernel cache.
pub fn kernel_builds() -> Vec<KernelBuild> {
    KernelBuild::hopper_or_portable(SOURCE, kernel_names)
}

/// Every CUDA function of `gemm.cu` that exists when compiled for `hopper` (sm_90a) or not.
pub fn kernel_names(hopper: bool) -> Vec<String> {
    let mut names = Vec::new();
    for dtype in ["bf16", "f16"] {
        for v in Version::ALL {
            if hopper || !v.is_hopper_only() {
                for &layout in v.layouts() {
                    names.push(kernel_name(v, layout, dtype));
                }
            }
        }
    }
    if hopper {
        names.extend(Version::FP8.map(|v| kernel_name(v, Layout::NT, FP8_NAME)));
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

// Tiles and resources of each kernel, as gemm.cu defines them.
const MMA_TILE: usize = 128;
const MMA_THREADS: u32 = 256;
const PIPELINED_SHARED: u32 = 4 * 2 * 128 * 64 * 2;
const WG_BM: usize = 128;
const WG_BN: usize = 256;
/// k per stage in bytes: one 128-byte swizzle row (64 bf16, 128 FP8).
const WG_BK_BYTES: usize = 128;
const WG_THREADS: u32 = 384;
/// 4 stages of a 128-row and a 256-row tile of 128 bytes, the 8 barriers, 1 KiB to align the
/// tiles.
const WG_SHARED: u32 = 4 * (128 + 256) * WG_BK_BYTES as u32 + 8 * 8 + 1024;
/// `wgmma_tma_store`'s staging: 2 consumers x 2 buffers of 64 rows x 128 bytes.
const WG_STAGING: u32 = 2 * 2 * 64 * 128;
/// `wgmma_prefetch_c`: 3 stages, the 6 barriers of the ring and one per consumer for its slice
/// of C, 1 KiB to align the tiles, and the staging, 2 consumers x a whole 64 x 256 slice of C
/// (4 chunks of 64 rows x 128 bytes), which the TMA fills during the main loop (gemm.cu's
/// `wg_shared_bytes`).
const WG_PREFETCH_SHARED: u32 =
    3 * (128 + 256) * WG_BK_BYTES as u32 + (2 * 3 + 2) * 8 + 1024 + 2 * 4 * 64 * 128;
const _: () = assert!(
    WG_SHARED + WG_STAGING <= 227 * 1024 && WG_PREFETCH_SHARED <= 227 * 1024,
    "an H100 block may have 227 KiB of shared memory"
);
/// C's TMA-store boxes: 64 columns (128 bytes of a 16-bit type) x 64 rows.
const WG_OUT_BOX: u32 = 64;

/// The day's kernels, compiled for one GPU: for `sm_90a` on Hopper, so the wgmma version
/// exists; for the device's own architecture elsewhere, without it.
pub struct TensorCoreGemm {
    kernels: KernelSet,
    hopper: bool,
    sms: u32,
    /// For occupancy queries of the cluster kernels.
    stream: Arc<CudaStream>,
}

/// Elements each operand must hold: the last matrix's offset plus one matrix; an error when
/// one of them overflows (release builds would wrap it to a small length that passes the
/// buffer checks).
fn needs(g: &GemmEx) -> Result<(usize, usize, usize)> {
    let last = g.batch.saturating_sub(1);
    let need = |stride: usize, rows: usize, cols: usize| {
        last.checked_mul(stride)
            .and_then(|offset| offset.checked_add(rows.checked_mul(cols)?))
    };
    match (
        need(g.stride_a, g.m, g.k),
        need(g.stride_b, g.k, g.n),
        need(g.stride_c, g.m, g.n),
    ) {
        (Some(a), Some(b), Some(c)) => Ok((a, b, c)),
        _ => bail!(common::UsageError::new(format!(
            "gemm: the operands of {g:?} are too large to address"
        ))),
    }
}

impl TensorCoreGemm {
    pub fn load(gpu: &Gpu) -> Result<Self> {
        let build = first_runnable(kernel_builds(), &gpu.info.arch)
            .expect("the portable build runs on every GPU");
        let hopper = build.target == Target::Hopper;
        Ok(Self {
            kernels: KernelSet::load_build(gpu, &build)?,
            hopper,
            sms: gpu.info.sms,
            stream: gpu.stream.clone(),
        })
    }

    /// Whether the Hopper versions were compiled (the GPU is an sm_90).
    pub fn is_hopper(&self) -> bool {
        self.hopper
    }

    /// Why `version` cannot take `g` (a [`Refused`]), or a [`common::UsageError`] for a
    /// problem no version takes; `Ok` where it can, as far as the sizes tell (the operands'
    /// addresses are checked at launch).
    pub fn check<T: Element>(&self, version: Version, g: &GemmEx) -> Result<()> {
        dtype_name::<T>()?;
        self.check_for(version, g, T::DTYPE.size())
    }

    /// [`TensorCoreGemm::check`] for FP8: A and B e4m3 (passed as their bytes), C bf16; the
    /// versions of [`Version::FP8`], layout `nt` only (8-bit wgmma reads K-major operands).
    pub fn check_fp8(&self, version: Version, g: &GemmEx) -> Result<()> {
        if !Version::FP8.contains(&version) {
            return Err(refused(
                version,
                "has no FP8 kernel (FP8 runs wgmma_overlap and wgmma_tma_store)",
            ));
        }
        let layout = Layout::of(g);
        if layout != Layout::NT {
            return Err(refused(
                version,
                format!(
                    "FP8 takes K-major operands only (layout nt: A stored [m, k], B stored [n, \
                     k]); this is layout {}",
                    layout.name()
                ),
            ));
        }
        self.check_for(version, g, 1)
    }

    /// The size rules of every version, for operands of `elem` bytes (C is 16-bit).
    fn check_for(&self, version: Version, g: &GemmEx, elem: usize) -> Result<()> {
        let GemmEx { m, n, k, batch, .. } = *g;
        if m == 0 || n == 0 || k == 0 || batch == 0 {
            bail!(common::UsageError::new(
                "m, n, k and the batch must be at least 1"
            ));
        }
        if [m, n, k, batch].iter().any(|&d| d > i32::MAX as usize) {
            bail!(common::UsageError::new("dimensions must be below 2^31"));
        }
        let layout = Layout::of(g);
        if !version.layouts().contains(&layout) {
            return Err(refused(
                version,
                format!(
                    "takes K-major operands only (layout nt: A stored [m, k], B stored [n, k]); \
                     this is layout {}: {}",
                    layout.name(),
                    layout.describe()
                ),
            ));
        }
        // A K-major operand's rows are k long; an MN-major one's m or n. cp.async and the TMA
        // move 16-byte pieces of rows: a row must be a multiple of 8 elements.
        let k_major_operand = !layout.a_mn_major() || !layout.b_mn_major();
        let per_16_bytes = 16 / elem;
        if version != Version::MmaLdmatrix && k_major_operand && !k.is_multiple_of(per_16_bytes) {
            return Err(refused(
                version,
                format!(
                    "k = {k} is not a multiple of {per_16_bytes} (rows must be 16-byte \
                     multiples for cp.async and the TMA)"
                ),
            ));
        }
        if version.stores_by_tma() && !n.is_multiple_of(8) {
            return Err(refused(
                version,
                format!(
                    "n = {n} is not a multiple of 8: the TMA stores C's rows, which must be \
                     16-byte multiples"
                ),
            ));
        }
        for (mn_major, name, extent, stored) in [
            (layout.a_mn_major(), "m", m, "A stored [k, m]"),
            (layout.b_mn_major(), "n", n, "B stored [k, n]"),
        ] {
            if mn_major && !extent.is_multiple_of(8) {
                return Err(refused(
                    version,
                    format!(
                        "{name} = {extent} is not a multiple of 8: {stored} has rows of {name} \
                         elements, and the TMA needs rows of 16-byte multiples"
                    ),
                ));
            }
        }
        if version.is_hopper_only() && !self.hopper {
            return Err(refused(version, "needs an sm_90 GPU (Hopper)"));
        }
        if batch > 1 {
            let aligned =
                |s: usize| s.is_multiple_of(per_16_bytes) && (s > 0 || !version.uses_tma());
            if version != Version::MmaLdmatrix && !(aligned(g.stride_a) && aligned(g.stride_b)) {
                return Err(refused(
                    version,
                    format!(
                        "batch strides of A and B ({} and {}) must be multiples of \
                         {per_16_bytes} elements (16 bytes){}",
                        g.stride_a,
                        g.stride_b,
                        if version.uses_tma() {
                            ", and not 0 (the TMA has no broadcast dimension)"
                        } else {
                            ""
                        }
                    ),
                ));
            }
            if version.stores_by_tma() && !(g.stride_c.is_multiple_of(8) && g.stride_c > 0) {
                return Err(refused(
                    version,
                    format!(
                        "C's batch stride ({}) must be a nonzero multiple of 8 elements (16 \
                         bytes) for the TMA store",
                        g.stride_c
                    ),
                ));
            }
        }
        Ok(())
    }

    /// The kernel a version runs and its launch shape, for the table; [`Refused`] where the
    /// version cannot take the problem.
    pub fn plan<T: Element>(&self, version: Version, g: &GemmEx) -> Result<(&Kernel, LaunchShape)> {
        self.check::<T>(version, g)?;
        self.plan_for(version, g, dtype_name::<T>()?)
    }

    /// [`TensorCoreGemm::plan`] for FP8 (see [`TensorCoreGemm::check_fp8`]).
    pub fn plan_fp8(&self, version: Version, g: &GemmEx) -> Result<(&Kernel, LaunchShape)> {
        self.check_fp8(version, g)?;
        self.plan_for(version, g, FP8_NAME)
    }

    /// The kernel of `version` for `g` with operands named `dtype`, and its launch shape; `g`
    /// was checked.
    fn plan_for(
        &self,
        version: Version,
        g: &GemmEx,
        dtype: &str,
    ) -> Result<(&Kernel, LaunchShape)> {
        let GemmEx { m, n, batch, .. } = *g;
        let kernel = self
            .kernels
            .get(&kernel_name(version, Layout::of(g), dtype))?;
        let launch = match version {
            Version::MmaLdmatrix | Version::MmaPipelined => {
                if batch > 65535 || m.div_ceil(MMA_TILE) > 65535 {
                    return Err(refused(
                        version,
                        "the grid's y (tile rows) and z (batch) stop at 65535",
                    ));
                }
                LaunchShape {
                    grid: (
                        n.div_ceil(MMA_TILE) as u32,
                        m.div_ceil(MMA_TILE) as u32,
                        batch as u32,
                    ),
                    block: (MMA_THREADS, 1, 1),
                    dynamic_shared_bytes: if version == Version::MmaPipelined {
                        PIPELINED_SHARED
                    } else {
                        0
                    },
                }
            }
            Version::WgmmaTma
            | Version::WgmmaOverlap
            | Version::WgmmaTmaStore
            | Version::WgmmaPrefetchC
            | Version::WgmmaCluster => {
                // A cluster's CTAs take neighbouring tile rows: tiles are counted per cluster.
                let cluster = version.cluster() as u64;
                let tiles = (batch as u64)
                    .checked_mul((m.div_ceil(WG_BM) as u64).div_ceil(cluster))
                    .and_then(|t| t.checked_mul(n.div_ceil(WG_BN) as u64))
                    .unwrap_or(u64::MAX);
                if tiles.saturating_mul(cluster) > i32::MAX as u64 {
                    return Err(refused(version, "more than 2^31 tiles"));
                }
                let mut launch = LaunchShape {
                    grid: (0, 1, 1),
                    block: (WG_THREADS, 1, 1),
                    dynamic_shared_bytes: match version {
                        Version::WgmmaPrefetchC => WG_PREFETCH_SHARED,
                        Version::WgmmaTmaStore => WG_SHARED + WG_STAGING,
                        _ => WG_SHARED,
                    },
                };
                // Persistent: as many CTAs as can be resident at once (one per SM; for
                // clusters, as many whole clusters as the GPCs hold), never more than tiles.
                let resident = if cluster > 1 {
                    launch.grid.0 = self.sms;
                    kernel.max_active_clusters(&launch, &self.stream)? as u64 * cluster
                } else {
                    u64::from(self.sms)
                };
                if resident == 0 {
                    bail!("{}: not one cluster can be resident", version.name());
                }
                launch.grid.0 = (tiles * cluster).min(resident) as u32;
                launch
            }
        };
        Ok((kernel, launch))
    }

    /// Enqueues `g` on `gpu.stream`: `C = alpha op(A) op(B) + beta C` for every product of
    /// the batch, C read only where beta != 0. The operands may be slices or views; a view
    /// that starts off a 16-byte boundary is [`Refused`] by the versions that copy 16-byte
    /// pieces (mma_ldmatrix then takes it with element loads).
    pub fn gemm<T, A, B, C>(
        &self,
        gpu: &Gpu,
        version: Version,
        g: &GemmEx,
        a: &A,
        b: &B,
        c: &mut C,
    ) -> Result<()>
    where
        T: Element,
        A: DevicePtr<T> + DeviceSlice<T>,
        B: DevicePtr<T> + DeviceSlice<T>,
        C: DevicePtr<T> + DevicePtrMut<T> + DeviceSlice<T>,
    {
        check_lengths(g, a.len(), b.len(), c.len())?;
        let (kernel, launch_shape) = self.plan::<T>(version, g)?;
        if version.is_hopper_only() {
            return launch_wgmma(gpu, version, kernel, &launch_shape, g, a, b, c);
        }
        let (m, n, k) = (g.m as i32, g.n as i32, g.k as i32);
        let (alpha, beta) = (g.alpha, g.beta);
        let stream = &gpu.stream;
        let mut l = stream.launch_builder(&kernel.func);
        let (a_ptr, _a_record) = a.device_ptr(stream);
        let (b_ptr, _b_record) = b.device_ptr(stream);
        if version == Version::MmaPipelined
            && !(a_ptr.is_multiple_of(16) && b_ptr.is_multiple_of(16))
        {
            return Err(refused(
                version,
                "cp.async needs A and B to start on 16-byte boundaries",
            ));
        }
        let (c_ptr, _c_record) = c.device_ptr_mut(stream);
        let strides = [g.stride_a, g.stride_b, g.stride_c].map(|s| s as u64);
        l.arg(&a_ptr)
            .arg(&b_ptr)
            .arg(&c_ptr)
            .arg(&m)
            .arg(&n)
            .arg(&k);
        l.arg(&strides[0]).arg(&strides[1]).arg(&strides[2]);
        l.arg(&alpha).arg(&beta);
        // SAFETY: matches MMA_KERNELS' signature; the lengths were checked above for these
        // sizes and strides, every load and store is bounded by m, n, k, and 16-byte loads
        // happen only from 16-byte aligned starts (checked above for mma_pipelined, in the
        // kernel for mma_ldmatrix). The records outlive the launch.
        unsafe { l.launch(kernel.config(&launch_shape)?) }?;
        Ok(())
    }

    /// Enqueues the FP8 GEMM `C = alpha A B^T + beta C`: A `[m, k]` and B `[n, k]` FP8 e4m3
    /// (their bytes), C `[m, n]` bf16, f32 accumulation, by a version of [`Version::FP8`]
    /// (layout `nt` only; see [`TensorCoreGemm::check_fp8`]).
    pub fn gemm_fp8<C>(
        &self,
        gpu: &Gpu,
        version: Version,
        g: &GemmEx,
        a: &CudaSlice<u8>,
        b: &CudaSlice<u8>,
        c: &mut C,
    ) -> Result<()>
    where
        C: DevicePtr<half::bf16> + DevicePtrMut<half::bf16> + DeviceSlice<half::bf16>,
    {
        check_lengths(g, a.len(), b.len(), c.len())?;
        let (kernel, launch_shape) = self.plan_fp8(version, g)?;
        launch_wgmma(gpu, version, kernel, &launch_shape, g, a, b, c)
    }
}

/// An error unless A, B and C hold what `g` addresses.
fn check_lengths(g: &GemmEx, a: usize, b: usize, c: usize) -> Result<()> {
    let (need_a, need_b, need_c) = needs(g)?;
    if a < need_a || b < need_b || c < need_c {
        bail!(
            "gemm: A, B and C hold {a}, {b} and {c} elements; {g:?} needs {need_a}, {need_b} and \
             {need_c}"
        );
    }
    Ok(())
}

/// Launches a Hopper version (`WGMMA_KERNEL`): operands of `TIn` (bf16, f16, or FP8 bytes),
/// C of `TOut`. The tensor maps are encoded first, so an operand the TMA cannot take (a view
/// off a 16-byte boundary) is [`Refused`] before anything is enqueued.
#[allow(clippy::too_many_arguments)]
fn launch_wgmma<TIn, TOut, A, B, C>(
    gpu: &Gpu,
    version: Version,
    kernel: &Kernel,
    launch_shape: &LaunchShape,
    g: &GemmEx,
    a: &A,
    b: &B,
    c: &mut C,
) -> Result<()>
where
    TIn: Element,
    TOut: Element,
    A: DevicePtr<TIn> + DeviceSlice<TIn>,
    B: DevicePtr<TIn> + DeviceSlice<TIn>,
    C: DevicePtr<TOut> + DevicePtrMut<TOut> + DeviceSlice<TOut>,
{
    let layout = Layout::of(g);
    let map_a = operand_map(gpu, a, layout.a_mn_major(), g.m, g, g.stride_a, WG_BM)?;
    // With clusters each CTA loads (and multicasts) its share of B's tile rows.
    let box_b = WG_BN / version.cluster();
    let map_b = operand_map(gpu, b, layout.b_mn_major(), g.n, g, g.stride_b, box_b)?;
    // C as [batch][m][n] in boxes of 64 x 64 for the TMA stores (and wgmma_prefetch_c's loads);
    // the other versions store from registers and leave the parameter unread (A's map fills
    // it).
    let map_c = if version.stores_by_tma() {
        KMajorTiles {
            inner: g.n,
            rows: g.m,
            outer: g.batch,
            outer_stride: g.stride_c,
            box_inner: WG_OUT_BOX,
            box_rows: WG_OUT_BOX,
        }
        .encode(gpu, c)?
    } else {
        map_a
    };
    let (m, n, k) = (g.m as i32, g.n as i32, g.k as i32);
    let (alpha, beta) = (g.alpha, g.beta);
    let batch = g.batch as i32;
    let stride_c = g.stride_c as u64;
    let stream = &gpu.stream;
    let mut l = stream.launch_builder(&kernel.func);
    let (c_ptr, _c_record) = c.device_ptr_mut(stream);
    l.arg(&map_a).arg(&map_b).arg(&map_c).arg(&c_ptr);
    l.arg(&m).arg(&n).arg(&k).arg(&batch).arg(&stride_c);
    l.arg(&alpha).arg(&beta);
    // SAFETY: matches WGMMA_KERNEL's signature; the maps describe A, B and C exactly (the TMA
    // never reads or writes outside them), and C's direct stores are bounded by m and n within
    // `batch` products `stride_c` apart, whose extent the caller checked.
    unsafe { l.launch(kernel.config(launch_shape)?) }?;
    Ok(())
}

/// The tensor map of one operand: K-major `[batch][rows][k]` in boxes of 64 k x `box_rows`,
/// or MN-major `[batch][k][rows]` in boxes of 64 rows x 64 k (`rows` is m for A, n for B).
fn operand_map<T, S>(
    gpu: &Gpu,
    buffer: &S,
    mn_major: bool,
    rows: usize,
    g: &GemmEx,
    stride: usize,
    box_rows: usize,
) -> Result<TmaDescriptor>
where
    T: Element,
    S: DevicePtr<T> + DeviceSlice<T>,
{
    if mn_major {
        MnMajorTiles {
            mn: rows,
            k: g.k,
            outer: g.batch,
            outer_stride: stride,
            box_k: (WG_BK_BYTES / std::mem::size_of::<T>()) as u32,
        }
        .encode(gpu, buffer)
    } else {
        KMajorTiles {
            inner: g.k,
            rows,
            outer: g.batch,
            outer_stride: stride,
            box_inner: (WG_BK_BYTES / std::mem::size_of::<T>()) as u32,
            box_rows: box_rows as u32,
        }
        .encode(gpu, buffer)
    }
}

/// Day 18's GEMM as a library: the fastest version that takes each problem. Later days (19's
/// fused cross-entropy) call this instead of cuBLAS.
pub struct Gemm {
    day: TensorCoreGemm,
}

impl Gemm {
    /// Versions in order of preference where C is not read into the SM: beta = 0, and beta =
    /// 1, where `wgmma_tma_store`'s TMA adds the tile into C in L2. `wgmma_tma_store`
    /// first (its epilogue overlaps the next tile's math); `wgmma_overlap` where C's rows or
    /// address do not suit the TMA (`wgmma_tma` measured level with it); `wgmma_cluster` half
    /// as fast, so never chosen. The mma.sync versions take what the Hopper path cannot (k %
    /// 8 != 0, unaligned views in layout nt) or GPUs before Hopper. `wgmma_prefetch_c` is not
    /// here: with beta = 0 it loads nothing and only has a stage fewer.
    pub const PREFERENCE: [Version; 4] = [
        Version::WgmmaTmaStore,
        Version::WgmmaOverlap,
        Version::MmaPipelined,
        Version::MmaLdmatrix,
    ];

    /// Versions in order of preference where C is read (beta other than 0 and 1):
    /// `wgmma_prefetch_c` first (the TMA loads C during the main loop; the others read it in
    /// the epilogue, while that consumer issues no wgmma), then [`Gemm::PREFERENCE`]. It takes
    /// exactly what `wgmma_tma_store` takes (C's rows and batch stride 16-byte multiples,
    /// Hopper).
    pub const PREFERENCE_READING_C: [Version; 5] = [
        Version::WgmmaPrefetchC,
        Version::WgmmaTmaStore,
        Version::WgmmaOverlap,
        Version::MmaPipelined,
        Version::MmaLdmatrix,
    ];

    /// The order [`Gemm::choose`] and [`Gemm::run`] try for `g`: by whether it reads C.
    pub fn preference(g: &GemmEx) -> &'static [Version] {
        if g.beta != 0.0 && g.beta != 1.0 {
            &Self::PREFERENCE_READING_C
        } else {
            &Self::PREFERENCE
        }
    }

    pub fn load(gpu: &Gpu) -> Result<Self> {
        Ok(Self {
            day: TensorCoreGemm::load(gpu)?,
        })
    }

    /// The versions underneath, for a table of each.
    pub fn versions(&self) -> &TensorCoreGemm {
        &self.day
    }

    /// The version [`Gemm::run`] tries first for `g`, or the best version's refusal when none
    /// takes its sizes.
    pub fn choose<T: Element>(&self, g: &GemmEx) -> Result<Version> {
        let mut first_refusal = None;
        for &v in Self::preference(g) {
            match self.day.check::<T>(v, g) {
                Ok(()) => return Ok(v),
                Err(e) if e.is::<Refused>() => {
                    first_refusal.get_or_insert(e);
                }
                Err(e) => return Err(e),
            }
        }
        Err(first_refusal.expect("PREFERENCE is not empty"))
    }

    /// Enqueues `g` with the first version of [`Gemm::preference`] that takes it (sizes, then
    /// the operands' alignment); [`Refused`] with the best version's reason when none does.
    pub fn run<T, A, B, C>(&self, gpu: &Gpu, g: &GemmEx, a: &A, b: &B, c: &mut C) -> Result<()>
    where
        T: Element,
        A: DevicePtr<T> + DeviceSlice<T>,
        B: DevicePtr<T> + DeviceSlice<T>,
        C: DevicePtr<T> + DevicePtrMut<T> + DeviceSlice<T>,
    {
        let mut first_refusal = None;
        for &v in Self::preference(g) {
            if let Err(e) = self.day.check::<T>(v, g) {
                if !e.is::<Refused>() {
                    return Err(e);
                }
                first_refusal.get_or_insert(e);
                continue;
            }
            // A refusal here comes before anything is enqueued (an operand's alignment).
            match self.day.gemm::<T, A, B, C>(gpu, v, g, a, b, c) {
                Err(e) if e.is::<Refused>() => {
                    first_refusal.get_or_insert(e);
                }
                done => return done,
            }
        }
        Err(first_refusal.expect("PREFERENCE is not empty"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kernel_compiles_without_spilling() {
        // sm_90a (all of them) and sm_90 (no wgmma, as a GPU before Hopper compiles it).
        common::testing::assert_builds_compile_without_spills(&kernel_builds());
    }

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
    fn sizes_that_overflow_are_usage_errors_not_wraps() {
        let big = GemmShape {
            m: i32::MAX as usize,
            n: i32::MAX as usize,
            k: i32::MAX as usize,
            batch: i32::MAX as usize,
            layout: Layout::NT,
        };
        let err = big.check_sizes(Dtype::Bf16).unwrap_err();
        assert!(err.to_string().contains("too large to address"), "{err}");
        assert!(GemmShape::square(8192).check_sizes(Dtype::Bf16).is_ok());
        // The launcher's length guard: batch x stride wraps in release builds without checks.
        let g = GemmEx {
            batch: 1 << 40,
            ..GemmEx::new(1 << 12, 1 << 12, 1 << 12)
        };
        let err = needs(&g).unwrap_err();
        assert!(err.is::<common::UsageError>(), "{err:#}");
        assert_eq!(needs(&GemmEx::new(2, 3, 4)).unwrap(), (8, 12, 6));
    }

    #[test]
    fn names_round_trip() {
        for v in Version::ALL {
            assert_eq!(Version::from_name(v.name()), Some(v));
        }
        assert_eq!(Version::from_name("wmma"), None);
    }

    #[test]
    fn keys_name_the_batch_only_when_batched() {
        let s = GemmShape::square(4096);
        assert_eq!(s.key(Dtype::Bf16), "gemm/bf16/4096x4096x4096");
        let b = GemmShape { batch: 8, ..s };
        assert_eq!(b.key(Dtype::F16), "gemm/f16/8x4096x4096x4096");
        assert_eq!(b.flops(), 8 * 2 * 4096u64.pow(3));
        let tn = GemmShape {
            layout: Layout::ALL[2],
            ..s
        };
        assert_eq!(tn.key(Dtype::Bf16), "gemm_tn/bf16/4096x4096x4096");
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
        // Per 16-bit dtype: 2 mma.sync, 4 single-CTA Hopper versions x 4 layouts, the
        // cluster; then the 2 FP8 kernels.
        assert_eq!(names.len(), 2 * (1 + 1 + 4 + 4 + 4 + 4 + 1) + 2);
        assert_eq!(kernel_names(false).len(), 2 * 2);
    }

    #[test]
    fn reading_c_prefers_the_version_that_prefetches_it() {
        let g = GemmEx::new(128, 256, 64);
        assert_eq!(Gemm::preference(&g)[0], Version::WgmmaTmaStore);
        // beta = 1: wgmma_tma_store adds into C in L2; C is not read into the SM.
        let accumulate = GemmEx { beta: 1.0, ..g };
        assert_eq!(Gemm::preference(&accumulate), Gemm::PREFERENCE);
        let scaled = GemmEx { beta: 0.5, ..g };
        assert_eq!(Gemm::preference(&scaled)[0], Version::WgmmaPrefetchC);
        // Past it, the same order as with beta = 0: it refuses only what wgmma_tma_store does.
        assert_eq!(Gemm::preference(&scaled)[1..], Gemm::PREFERENCE);
        assert!(!Gemm::PREFERENCE.contains(&Version::WgmmaPrefetchC));
        assert!(Version::WgmmaPrefetchC.stores_by_tma() && Version::WgmmaTmaStore.stores_by_tma());
        assert!(!Version::FP8.contains(&Version::WgmmaPrefetchC));
    }
}
