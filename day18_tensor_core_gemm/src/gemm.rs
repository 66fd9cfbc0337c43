//! `gemm.cu`'s host side: which version takes which problem ([`TensorCoreGemm::check`]), its
//! kernel and launch shape ([`TensorCoreGemm::plan`], from the tile table), its arguments
//! ([`TensorCoreGemm::prepare`]: the tensor maps encoded once) and its launches, for the
//! 16-bit versions and the FP8 ones.

use std::sync::Arc;

use anyhow::{Result, bail};
use common::element::Element;
use common::gpu::cublas::GemmEx;
use common::gpu::kernel::KernelSet;
use common::gpu::params::{DeviceIn, DeviceOut};
use common::gpu::tma::{KMajorTiles, MnMajorTiles, TensorMap, TmaDescriptor};
use common::gpu::{DeviceBuffer, DeviceBufferMut};
use common::{Gpu, Kernel, LaunchShape};
use cudarc::driver::{CudaSlice, CudaStream, DevicePtr, DevicePtrMut};
use half::bf16;

use crate::tile::{
    MMA_TILE, SWIZZLE_ROW_BYTES, Staging, WG_NARROW_TILES, WG_PREFETCH_TILE, WG_TILE, WgTile,
};
use crate::{FP8_NAME, Layout, Version, dtype_name, kernel_builds, kernel_name, refused};

common::kernel_params! {
    /// What one launch of an `mma.sync` version is told: C = alpha A B^T + beta C for one
    /// product, A [m, k], B [n, k] and C [m, n] rows `stride_a`, `stride_b`, `stride_c`
    /// elements apart.
    pub struct MmaParams<T> {
        pub a: DeviceIn<T>,
        pub b: DeviceIn<T>,
        pub c: DeviceOut<T>,
        pub m: i32,
        pub n: i32,
        pub k: i32,
        pub stride_a: u64,
        pub stride_b: u64,
        pub stride_c: u64,
        pub alpha: f32,
        pub beta: f32,
    }
}

common::kernel_params! {
    /// What one launch of a `wgmma` version is told: `batch` products C = alpha op(A) op(B) +
    /// beta C, each m x n x k, the operands' layouts compiled into the kernel.
    pub struct WgmmaParams<T> {
        /// A, B and C as the TMA reads and writes them (the versions that store C from
        /// registers are given A's map here, and leave it unread).
        pub map_a: TmaDescriptor,
        pub map_b: TmaDescriptor,
        pub map_c: TmaDescriptor,
        /// C for the stores from registers: product i at `c + i stride_c`.
        pub c: DeviceOut<T>,
        pub m: i32,
        pub n: i32,
        pub k: i32,
        pub batch: i32,
        pub stride_c: u64,
        pub alpha: f32,
        pub beta: f32,
    }
}

common::kernel_args! {
    /// `MMA_KERNELS`: `gemm_mma_{ldmatrix,pipelined}_nt_{bf16,f16}(MmaParams<T>)`.
    fn mma_kernel<T>(params: MmaParams<T>);
    /// `WGMMA_KERNEL`: `gemm_<version>_<layout>_<type>(WgmmaParams<TOut>)`.
    fn wgmma_kernel<T>(params: WgmmaParams<T>);
}

/// The C twins of [`MmaParams`] and [`WgmmaParams`], as `gemm_params.cuh` holds them.
#[cfg(test)]
pub(crate) fn params_header() -> String {
    use common::gpu::params::{c_checks, c_declaration, c_header, c_size_check};
    use half::f16;
    c_header(
        &["the kernel_params! declarations in day18_tensor_core_gemm/src/gemm.rs"],
        &[
            c_declaration::<MmaParams<bf16>>(),
            c_checks::<MmaParams<bf16>>() + &c_size_check::<MmaParams<f16>>(),
            c_declaration::<WgmmaParams<bf16>>(),
            c_checks::<WgmmaParams<bf16>>() + &c_size_check::<WgmmaParams<f16>>(),
        ],
    )
}

/// The day's kernels, compiled for one GPU: for `sm_90a` on Hopper, so the wgmma version
/// exists; for the device's own architecture elsewhere, without it.
pub struct TensorCoreGemm {
    kernels: KernelSet,
    hopper: bool,
    sms: u32,
    /// For occupancy queries of the cluster kernels.
    stream: Arc<CudaStream>,
}

/// A version planned for one problem and its buffers: the kernel, its launch shape and its
/// arguments (for the Hopper versions the tensor maps, encoded once), launched as often as
/// wanted on the same buffers ([`Prepared::launch`]).
pub struct Prepared<'k> {
    pub kernel: &'k Kernel,
    pub launch: LaunchShape,
    g: GemmEx,
    /// The addresses of A, B and C the arguments were made for.
    at: [u64; 3],
    /// The Hopper versions' maps of A, B and C.
    maps: Option<[TmaDescriptor; 3]>,
}

/// A planned launch: the kernel, its launch shape, and the version whose kernel it is.
struct Plan<'k> {
    kernel: &'k Kernel,
    launch: LaunchShape,
    version: Version,
}

/// Elements each operand must hold ([`GemmEx::needs`]); an error when one of them overflows
/// (release builds would wrap it to a small length that passes the buffer checks).
fn needs(g: &GemmEx) -> Result<(usize, usize, usize)> {
    match g.needs() {
        Some(needs) => Ok(needs),
        None => bail!(common::UsageError::new(format!(
            "gemm: the operands of {g:?} are too large to address"
        ))),
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

impl Version {
    /// The tile of a Hopper version and how its epilogue writes C (`wgmma_auto`'s are those
    /// of the version it runs, [`crate::auto::choose`]).
    fn wg_tile(self) -> (&'static WgTile, Staging) {
        match self {
            Version::WgmmaPrefetchC => (&WG_PREFETCH_TILE, Staging::PrefetchC),
            Version::WgmmaTmaStore | Version::WgmmaCluster | Version::WgmmaAuto => {
                (&WG_TILE, Staging::TmaStore)
            }
            Version::WgmmaN192 => (&WG_NARROW_TILES[0], Staging::TmaStore),
            Version::WgmmaN128 => (&WG_NARROW_TILES[1], Staging::TmaStore),
            Version::WgmmaN64 => (&WG_NARROW_TILES[2], Staging::TmaStore),
            _ => (&WG_TILE, Staging::Registers),
        }
    }
}

impl TensorCoreGemm {
    pub fn load(gpu: &Gpu) -> Result<Self> {
        let (kernels, hopper) = KernelSet::load_first_runnable(gpu, kernel_builds())?;
        Ok(Self {
            kernels,
            hopper,
            sms: gpu.info.sms,
            stream: gpu.stream.clone(),
        })
    }

    /// Whether the Hopper versions were compiled (the GPU is an sm_90).
    pub fn is_hopper(&self) -> bool {
        self.hopper
    }

    /// Why `version` cannot take `g` (a [`Refused`](common::session::Refused)), or a [`common::UsageError`] for a
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
                "has no FP8 kernel (FP8 runs wgmma_overlap, wgmma_tma_store, wgmma_cluster and \
                 wgmma_auto)",
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

    /// The kernel a version runs and its launch shape, for the table; [`Refused`](common::session::Refused) where the
    /// version cannot take the problem.
    pub fn plan<T: Element>(&self, version: Version, g: &GemmEx) -> Result<(&Kernel, LaunchShape)> {
        self.check::<T>(version, g)?;
        let plan = self.plan_for(version, g, dtype_name::<T>()?)?;
        Ok((plan.kernel, plan.launch))
    }

    /// [`TensorCoreGemm::plan`] for FP8 (see [`TensorCoreGemm::check_fp8`]).
    pub fn plan_fp8(&self, version: Version, g: &GemmEx) -> Result<(&Kernel, LaunchShape)> {
        self.check_fp8(version, g)?;
        let plan = self.plan_for(version, g, FP8_NAME)?;
        Ok((plan.kernel, plan.launch))
    }

    /// The kernel of `version` for `g` with operands named `dtype`, its launch shape from the
    /// tile table, and the version whose kernel it is (`wgmma_auto`'s choice; the version
    /// itself otherwise); `g` was checked.
    fn plan_for(&self, version: Version, g: &GemmEx, dtype: &str) -> Result<Plan<'_>> {
        let GemmEx { m, n, batch, .. } = *g;
        // wgmma_auto runs the version it chooses on at most the CTAs it chooses.
        let (version, ctas) = if version == Version::WgmmaAuto {
            let choice = crate::auto::choose(m, n, batch, self.sms, dtype != FP8_NAME);
            (choice.version, choice.ctas)
        } else {
            (version, u64::MAX)
        };
        let kernel = self
            .kernels
            .get(&kernel_name(version, Layout::of(g), dtype))?;
        let launch = match version {
            Version::MmaLdmatrix | Version::MmaPipelined => {
                let tile = &MMA_TILE;
                if batch > 65535 || m.div_ceil(tile.bm) > 65535 {
                    return Err(refused(
                        version,
                        "the grid's y (tile rows) and z (batch) stop at 65535",
                    ));
                }
                LaunchShape {
                    grid: (
                        n.div_ceil(tile.bn) as u32,
                        m.div_ceil(tile.bm) as u32,
                        batch as u32,
                    ),
                    block: (tile.threads as u32, 1, 1),
                    // mma_ldmatrix's shared memory is static.
                    dynamic_shared_bytes: if version == Version::MmaPipelined {
                        tile.shared_bytes() as u32
                    } else {
                        0
                    },
                }
            }
            _ => {
                let (tile, staging) = version.wg_tile();
                // A cluster's CTAs take neighbouring tile rows: tiles are counted per cluster.
                let cluster = version.cluster() as u64;
                let tiles = (batch as u64)
                    .checked_mul((m.div_ceil(tile.bm) as u64).div_ceil(cluster))
                    .and_then(|t| t.checked_mul(n.div_ceil(tile.bn) as u64))
                    .unwrap_or(u64::MAX);
                if tiles.saturating_mul(cluster) > i32::MAX as u64 {
                    return Err(refused(version, "more than 2^31 tiles"));
                }
                let mut launch = LaunchShape {
                    grid: (0, 1, 1),
                    block: (tile.threads() as u32, 1, 1),
                    dynamic_shared_bytes: tile.shared_bytes(staging) as u32,
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
                launch.grid.0 = (tiles * cluster).min(resident).min(ctas) as u32;
                launch
            }
        };
        Ok(Plan {
            kernel,
            launch,
            version,
        })
    }

    /// Plans `version` for `g` on these buffers: the lengths, the plan, and the arguments (the
    /// Hopper versions' tensor maps, whose encoding refuses an operand the TMA cannot take, a
    /// view off a 16-byte boundary; `mma_pipelined` refuses the same for cp.async), all before
    /// anything is enqueued.
    pub fn prepare<T: Element>(
        &self,
        gpu: &Gpu,
        version: Version,
        g: &GemmEx,
        a: &impl DeviceBuffer<T>,
        b: &impl DeviceBuffer<T>,
        c: &impl DeviceBuffer<T>,
    ) -> Result<Prepared<'_>> {
        check_lengths(g, a.len(), b.len(), c.len())?;
        self.check::<T>(version, g)?;
        let plan = self.plan_for(version, g, dtype_name::<T>()?)?;
        self.prepare_for(gpu, g, plan, a, b, c)
    }

    /// [`TensorCoreGemm::prepare`] for FP8: A `[m, k]` and B `[n, k]` e4m3 (their bytes), C
    /// `[m, n]` bf16.
    pub fn prepare_fp8(
        &self,
        gpu: &Gpu,
        version: Version,
        g: &GemmEx,
        a: &CudaSlice<u8>,
        b: &CudaSlice<u8>,
        c: &impl DeviceBuffer<bf16>,
    ) -> Result<Prepared<'_>> {
        check_lengths(g, a.len(), b.len(), c.len())?;
        self.check_fp8(version, g)?;
        let plan = self.plan_for(version, g, FP8_NAME)?;
        self.prepare_for(gpu, g, plan, a, b, c)
    }

    /// The arguments of a planned version: operands of `TIn` (bf16, f16, or FP8 bytes), C of
    /// `TOut`.
    fn prepare_for<'k, TIn: Element, TOut: Element>(
        &'k self,
        gpu: &Gpu,
        g: &GemmEx,
        Plan {
            kernel,
            launch,
            version,
        }: Plan<'k>,
        a: &impl DeviceBuffer<TIn>,
        b: &impl DeviceBuffer<TIn>,
        c: &impl DeviceBuffer<TOut>,
    ) -> Result<Prepared<'k>> {
        let at = addresses(gpu, a, b, c);
        let maps = if version.is_hopper_only() {
            Some(wgmma_maps(gpu, version, g, a, b, c)?)
        } else {
            if version == Version::MmaPipelined
                && !(at[0].is_multiple_of(16) && at[1].is_multiple_of(16))
            {
                return Err(refused(
                    version,
                    "cp.async needs A and B to start on 16-byte boundaries",
                ));
            }
            None
        };
        Ok(Prepared {
            kernel,
            launch,
            g: *g,
            at,
            maps,
        })
    }

    /// Enqueues `g` on `gpu.stream`: `C = alpha op(A) op(B) + beta C` for every product of
    /// the batch, C read only where beta != 0. The operands may be slices or views; a view
    /// that starts off a 16-byte boundary is [`Refused`](common::session::Refused) by the versions that copy 16-byte
    /// pieces (mma_ldmatrix then takes it with element loads).
    pub fn gemm<T: Element>(
        &self,
        gpu: &Gpu,
        version: Version,
        g: &GemmEx,
        a: &impl DeviceBuffer<T>,
        b: &impl DeviceBuffer<T>,
        c: &mut impl DeviceBufferMut<T>,
    ) -> Result<()> {
        self.prepare(gpu, version, g, a, b, c)?.launch(gpu, a, b, c)
    }

    /// Enqueues the FP8 GEMM `C = alpha A B^T + beta C`: A `[m, k]` and B `[n, k]` FP8 e4m3
    /// (their bytes), C `[m, n]` bf16, f32 accumulation, by a version of [`Version::FP8`]
    /// (layout `nt` only; see [`TensorCoreGemm::check_fp8`]).
    pub fn gemm_fp8(
        &self,
        gpu: &Gpu,
        version: Version,
        g: &GemmEx,
        a: &CudaSlice<u8>,
        b: &CudaSlice<u8>,
        c: &mut impl DeviceBufferMut<bf16>,
    ) -> Result<()> {
        self.prepare_fp8(gpu, version, g, a, b, c)?
            .launch(gpu, a, b, c)
    }
}

/// The device addresses of A, B and C.
fn addresses<TIn, TOut>(
    gpu: &Gpu,
    a: &impl DevicePtr<TIn>,
    b: &impl DevicePtr<TIn>,
    c: &impl DevicePtr<TOut>,
) -> [u64; 3] {
    let stream = &gpu.stream;
    [
        a.device_ptr(stream).0,
        b.device_ptr(stream).0,
        c.device_ptr(stream).0,
    ]
}

impl Prepared<'_> {
    /// Enqueues one run on the buffers it was prepared for (another buffer is an error: the
    /// tensor maps hold the addresses).
    pub fn launch<TIn, TOut>(
        &self,
        gpu: &Gpu,
        a: &impl DevicePtr<TIn>,
        b: &impl DevicePtr<TIn>,
        c: &mut impl DevicePtrMut<TOut>,
    ) -> Result<()> {
        let stream = &gpu.stream;
        let (a_ptr, _a_record) = a.device_ptr(stream);
        let (b_ptr, _b_record) = b.device_ptr(stream);
        let (c_ptr, _c_record) = c.device_ptr_mut(stream);
        if [a_ptr, b_ptr, c_ptr] != self.at {
            bail!("gemm: launched on other buffers than it was prepared for");
        }
        let g = &self.g;
        let (m, n, k) = (g.m as i32, g.n as i32, g.k as i32);
        let (alpha, beta) = (g.alpha, g.beta);
        let (kernel, shape) = (self.kernel, &self.launch);
        match self.maps {
            Some([map_a, map_b, map_c]) => {
                let params = WgmmaParams::<TOut> {
                    map_a,
                    map_b,
                    map_c,
                    c: DeviceOut::at(c_ptr),
                    m,
                    n,
                    k,
                    batch: g.batch as i32,
                    stride_c: g.stride_c as u64,
                    alpha,
                    beta,
                };
                // SAFETY: the kernel takes WgmmaParams<TOut> (its header is this declaration's);
                // the maps describe A, B and C exactly (the TMA never reads or writes outside
                // them), and C's direct stores are bounded by m and n within `batch` products
                // `stride_c` apart, whose extent `prepare` checked. The records outlive the
                // launch.
                unsafe { wgmma_kernel(gpu, kernel, shape, params) }
            }
            None => {
                let params = MmaParams::<TOut> {
                    a: DeviceIn::at(a_ptr),
                    b: DeviceIn::at(b_ptr),
                    c: DeviceOut::at(c_ptr),
                    m,
                    n,
                    k,
                    stride_a: g.stride_a as u64,
                    stride_b: g.stride_b as u64,
                    stride_c: g.stride_c as u64,
                    alpha,
                    beta,
                };
                // SAFETY: the kernel takes MmaParams<T> (its header is this declaration's);
                // `prepare` checked the lengths for these sizes and strides, every load and
                // store is bounded by m, n, k, and 16-byte loads happen only from 16-byte
                // aligned starts (checked in `prepare` for mma_pipelined, in the kernel for
                // mma_ldmatrix). The records outlive the launch.
                unsafe { mma_kernel(gpu, kernel, shape, params) }
            }
        }
    }
}

/// The tensor maps of a Hopper version: A's and B's boxes from the tile, and C's for the
/// versions that move C by TMA; the others store from registers and leave the parameter unread
/// (A's map fills it).
fn wgmma_maps<TIn: Element, TOut: Element>(
    gpu: &Gpu,
    version: Version,
    g: &GemmEx,
    a: &impl DeviceBuffer<TIn>,
    b: &impl DeviceBuffer<TIn>,
    c: &impl DeviceBuffer<TOut>,
) -> Result<[TmaDescriptor; 3]> {
    let layout = Layout::of(g);
    let (tile, _) = version.wg_tile();
    let map_a = operand_map(gpu, a, layout.a_mn_major(), g.m, g, g.stride_a, tile.bm)?;
    // With clusters each CTA loads (and multicasts) its share of B's tile rows.
    let box_b = tile.bn / version.cluster();
    let map_b = operand_map(gpu, b, layout.b_mn_major(), g.n, g, g.stride_b, box_b)?;
    // C as [batch][m][n] in boxes of one swizzle row of columns x a consumer's rows, for the
    // TMA stores (and wgmma_prefetch_c's loads).
    let map_c = if version.stores_by_tma() {
        KMajorTiles {
            inner: g.n,
            rows: g.m,
            outer: g.batch,
            outer_stride: g.stride_c,
            box_inner: (SWIZZLE_ROW_BYTES / std::mem::size_of::<TOut>()) as u32,
            box_rows: tile.out_rows as u32,
        }
        .encode(gpu, c)?
    } else {
        map_a
    };
    Ok([map_a, map_b, map_c])
}

/// The tensor map of one operand: K-major `[batch][rows][k]` in boxes of one swizzle row of k
/// x `box_rows`, or MN-major `[batch][k][rows]` in boxes of 64 rows x 64 k (`rows` is m for
/// A, n for B).
fn operand_map<T: Element>(
    gpu: &Gpu,
    buffer: &impl DeviceBuffer<T>,
    mn_major: bool,
    rows: usize,
    g: &GemmEx,
    stride: usize,
    box_rows: usize,
) -> Result<TmaDescriptor> {
    let box_k = (WG_TILE.k_bytes / std::mem::size_of::<T>()) as u32;
    if mn_major {
        MnMajorTiles {
            mn: rows,
            k: g.k,
            outer: g.batch,
            outer_stride: stride,
            box_k,
        }
        .encode(gpu, buffer)
    } else {
        KMajorTiles {
            inner: g.k,
            rows,
            outer: g.batch,
            outer_stride: stride,
            box_inner: box_k,
            box_rows: box_rows as u32,
        }
        .encode(gpu, buffer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The checked-in `gemm_params.cuh` is what [`MmaParams`] and [`WgmmaParams`] write.
    #[test]
    fn the_kernels_parameter_structs_are_the_launchers() {
        common::assert_generated_header!("gemm_params.cuh", &params_header());
    }

    #[test]
    fn overflowing_operands_are_usage_errors_not_wraps() {
        // The launcher's length guard: batch x stride wraps in release builds without checks.
        let g = GemmEx {
            batch: 1 << 40,
            ..GemmEx::new(1 << 12, 1 << 12, 1 << 12)
        };
        let err = needs(&g).unwrap_err();
        assert!(err.is::<common::UsageError>(), "{err:#}");
        assert_eq!(needs(&GemmEx::new(2, 3, 4)).unwrap(), (8, 12, 6));
        assert!(check_lengths(&GemmEx::new(2, 3, 4), 8, 12, 5).is_err());
    }

    #[test]
    fn each_hopper_version_has_its_tile_and_staging() {
        assert_eq!(Version::WgmmaPrefetchC.wg_tile().0.stages, 3);
        assert_eq!(Version::WgmmaTmaStore.wg_tile().1, Staging::TmaStore);
        assert_eq!(Version::WgmmaCluster.wg_tile().1, Staging::TmaStore);
        assert_eq!(Version::WgmmaOverlap.wg_tile().1, Staging::Registers);
        assert_eq!(Version::WgmmaN64.wg_tile().0.bn, 64);
        // The shared memory the launcher gave before the table: 4 stages, + 32 KiB of staging.
        let shared = |v: Version| {
            let (tile, staging) = v.wg_tile();
            tile.shared_bytes(staging)
        };
        assert_eq!(
            shared(Version::WgmmaTma),
            4 * (128 + 256) * 128 + 8 * 8 + 1024
        );
        assert_eq!(
            shared(Version::WgmmaTmaStore),
            shared(Version::WgmmaTma) + 2 * 2 * 64 * 128
        );
        assert_eq!(MMA_TILE.shared_bytes(), 4 * 2 * 128 * 64 * 2);
    }
}
