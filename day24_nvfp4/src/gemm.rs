//! Launcher for `gemm.cu`: `C = A W^T`, A bf16 `m x k`, W NVFP4 `n x k`, C f32 `m x n`.
//!
//! Two versions: `mma_bf16` (any GPU: W decoded into shared memory, `mma.sync`) and
//! `wgmma_rs` (Hopper: W decoded into wgmma's register operand, A by the TMA). The Hopper
//! version's tile and ring depth are defined here and handed to the kernel file as `-D`
//! options, so the grid, the TMA box and the shared memory the host sizes are the ones the
//! kernel was compiled for.

use anyhow::{Result, bail};
use common::gpu::kernel::KernelSet;
use common::gpu::kernel_build::{KernelBuild, Target, first_runnable};
use common::gpu::params::{DeviceIn, DeviceOut};
use common::gpu::tma::{KMajorTiles, TensorMap, TmaDescriptor};
use common::reference::matmul;
use common::session::Refused;
use common::{Gpu, Kernel, LaunchShape, Tolerance, UsageError};
use cudarc::driver::{CudaSlice, DevicePtr};
use half::bf16;

use crate::{GEMM_SOURCE, Nvfp4Dev, check_shape};

common::versions! {
    /// The GEMM versions, in table order.
    pub enum Version {
        MmaBf16 => "mma_bf16",
        WgmmaRs => "wgmma_rs",
    }
}

const MMA_FUNCTION: &str = "gemm_nvfp4_mma_bf16";
const WGMMA_FUNCTION: &str = "gemm_nvfp4_wgmma_rs";

common::kernel_args! {
    /// `gemm_nvfp4_mma_bf16(const bf16_t* a, const unsigned char* packed, const unsigned char*
    /// scales, const float* tensor_scale, float* c, index_t m, index_t n, index_t k)`
    fn gemm_nvfp4_mma_bf16(
        a: &CudaSlice<bf16>,
        packed: &CudaSlice<u8>,
        scales: &CudaSlice<u8>,
        tensor_scale: &CudaSlice<f32>,
        c: &mut CudaSlice<f32>,
        m: u64,
        n: u64,
        k: u64,
    );
    /// `gemm_nvfp4_wgmma_rs(Nvfp4GemmParams)`.
    fn gemm_nvfp4_wgmma_rs(params: Nvfp4GemmParams);
}

common::kernel_params! {
    /// What one launch of `wgmma_rs` is told: C [m, n] f32 = A [m, k] bf16 times W^T, W [n, k]
    /// in NVFP4 (codes, an e4m3 scale per 16 and one tensor scale).
    pub struct Nvfp4GemmParams {
        /// A as the TMA reads it.
        pub map_a: TmaDescriptor,
        /// W's codes (two a byte, rows of k / 2 bytes), its scales (rows of k / 16) and its
        /// tensor scale (one float).
        pub packed: DeviceIn<u8>,
        pub scales: DeviceIn<u8>,
        pub tensor_scale: DeviceIn<f32>,
        pub c: DeviceOut<f32>,
        pub m: i32,
        pub n: i32,
        pub k: i32,
    }
}

/// The C twin of [`Nvfp4GemmParams`], as `gemm_params.cuh` holds it.
#[cfg(test)]
pub(crate) fn params_header() -> String {
    use common::gpu::params::{c_checks, c_declaration, c_header};
    c_header(
        &["the kernel_params! declarations in day24_nvfp4/src/gemm.rs"],
        &[
            c_declaration::<Nvfp4GemmParams>(),
            c_checks::<Nvfp4GemmParams>(),
        ],
    )
}

/// `mma_bf16`'s block tile of C (128 x 128) and its threads (8 warps of 64 x 32 outputs).
const MMA_TILE: usize = 128;
const MMA_THREADS: u32 = 256;

/// `wgmma_rs`'s CTA tile: 128 rows of W (two warpgroups of wgmma's m = 64) x 256 rows of A
/// (wgmma's n), 128 k per stage in two TMA boxes of 64 k (one 128-byte swizzle row of bf16
/// each), and the stages of its shared-memory ring (3 x 72 KiB).
pub const WG_TILE_N: usize = 128;
pub const WG_TILE_M: usize = 256;
pub const WG_TILE_K: usize = 128;
pub const WG_BOX_K: usize = 64;
pub const WG_STAGES: usize = 3;
/// Two warpgroups, each loading and multiplying its own half (no producer warp: see gemm.cu).
const WG_THREADS: u32 = 256;

/// Bytes of dynamic shared memory `wgmma_rs` takes: per stage A's 256 x 128 bf16 and W's
/// 128 x 64 bytes of codes, the full and empty barriers, 1 KiB to align the swizzled tiles.
pub const fn wgmma_shared_bytes() -> u32 {
    (WG_STAGES * (WG_TILE_M * WG_TILE_K * 2 + WG_TILE_N * WG_TILE_K / 2) + 2 * WG_STAGES * 8 + 1024)
        as u32
}

/// The `-D` options that give `gemm.cu` the tiles above.
fn defines() -> Vec<String> {
    vec![
        format!("-DGEMM_MMA_TILE={MMA_TILE}"),
        format!("-DGEMM_MMA_THREADS={MMA_THREADS}"),
        format!("-DWG_THREADS={WG_THREADS}"),
        format!("-DWG_TILE_N={WG_TILE_N}"),
        format!("-DWG_TILE_M={WG_TILE_M}"),
        format!("-DWG_TILE_K={WG_TILE_K}"),
        format!("-DWG_BOX_K={WG_BOX_K}"),
        format!("-DWG_STAGES={WG_STAGES}"),
    ]
}

/// Every function of `gemm.cu` when compiled for `hopper` (sm_90a) or not.
fn functions(hopper: bool) -> Vec<String> {
    let mut names = vec![MMA_FUNCTION.to_string()];
    if hopper {
        names.push(WGMMA_FUNCTION.to_string());
    }
    names
}

/// What the GEMM compiles: `gemm.cu` for sm_90a with both versions, and for the GPU's own
/// architecture with `mma_bf16` only; a GPU loads the first it runs.
pub fn kernel_builds() -> Vec<KernelBuild> {
    KernelBuild::hopper_or_portable(GEMM_SOURCE, functions)
        .into_iter()
        .map(|b| b.with_options(defines()))
        .collect()
}

pub struct Gemm {
    kernels: KernelSet,
    hopper: bool,
    sms: u32,
}

/// The tiles of an `m x n` output for `mma_bf16`: (n / 128, m / 128) blocks; y is at most
/// 65535.
pub fn launch_shape(m: usize, n: usize) -> Result<LaunchShape, UsageError> {
    let (gx, gy) = (n.div_ceil(MMA_TILE), m.div_ceil(MMA_TILE));
    if gy > 65535 || gx > i32::MAX as usize {
        return Err(UsageError::new(format!(
            "gemm: {m} x {n} needs {gx} x {gy} tiles of 128 x 128; the grid takes at most \
             65535 in y (m <= 8388480)"
        )));
    }
    Ok(LaunchShape {
        grid: (gx as u32, gy as u32, 1),
        block: (MMA_THREADS, 1, 1),
        dynamic_shared_bytes: 0,
    })
}

/// `wgmma_rs`'s persistent grid: one CTA per SM, or one per tile when there are fewer tiles.
/// The kernel indexes with 32-bit ints: m, n and k must each fit one, and so must the tile count.
fn wgmma_launch_shape(m: usize, n: usize, k: usize, sms: u32) -> Result<LaunchShape> {
    let tiles = m.div_ceil(WG_TILE_M) as u64 * n.div_ceil(WG_TILE_N) as u64;
    if [m, n, k].iter().any(|&v| v > i32::MAX as usize) || tiles > i32::MAX as u64 {
        return Err(Refused(format!(
            "wgmma_rs: {m} x {n} x {k} does not fit the kernel's 32-bit indices"
        ))
        .into());
    }
    Ok(LaunchShape {
        grid: (tiles.min(u64::from(sms)) as u32, 1, 1),
        block: (WG_THREADS, 1, 1),
        dynamic_shared_bytes: wgmma_shared_bytes(),
    })
}

/// The check of an output with inner dimension `k` and inputs of magnitude about 1: the
/// f32 accumulation of `common::reference::matmul::tolerance` (the decoded weights and their
/// products are exact in bf16 and f32; the tensor cores' f32 sums are what rounds), plus one
/// rounding for the tensor scale, relative.
pub fn tolerance(k: usize) -> Tolerance {
    let t = matmul::tolerance(k);
    Tolerance::new(t.atol, f64::from(f32::EPSILON)).with_max_rel_l2(t.max_rel_l2)
}

impl Gemm {
    pub fn load(gpu: &Gpu) -> Result<Self> {
        let build = first_runnable(kernel_builds(), &gpu.info.arch)
            .expect("the portable build runs on every GPU");
        Ok(Self {
            hopper: build.target == Target::Hopper,
            kernels: KernelSet::load_build(gpu, &build)?,
            sms: gpu.info.sms,
        })
    }

    /// Plans `version` on `m x n x k` with `a` as A (`wgmma_rs` encodes A's TMA map here, so
    /// its launches take that same A); a [`Refused`] when this GPU, these sizes or A's
    /// layout do not suit it.
    pub fn plan(
        &self,
        gpu: &Gpu,
        version: Version,
        a: &CudaSlice<bf16>,
        m: usize,
        n: usize,
        k: usize,
    ) -> Result<GemmPlan<'_>> {
        check_shape("gemm: W", n, k)?;
        check_shape("gemm: A", m, k)?;
        if a.len() != m * k {
            bail!("gemm: A of {} does not fit {m} x {k}", a.len());
        }
        let (kernel, shape, map_a) = match version {
            Version::MmaBf16 => (self.kernels.get(MMA_FUNCTION)?, launch_shape(m, n)?, None),
            Version::WgmmaRs => {
                if !self.hopper {
                    return Err(Refused(
                        "wgmma_rs: needs a Hopper GPU (sm_90: wgmma, TMA, setmaxnreg)".into(),
                    )
                    .into());
                }
                let shape = wgmma_launch_shape(m, n, k, self.sms)?;
                // A as [1][m][k] in boxes of 64 k x 256 rows: rows of 2k bytes, a multiple of
                // 32 since k is of 16, as the TMA needs.
                let map = KMajorTiles {
                    inner: k,
                    rows: m,
                    outer: 1,
                    outer_stride: m * k,
                    box_inner: WG_BOX_K as u32,
                    box_rows: WG_TILE_M as u32,
                }
                .encode(gpu, a)?;
                let a_at = a.device_ptr(&gpu.stream).0;
                (self.kernels.get(WGMMA_FUNCTION)?, shape, Some((map, a_at)))
            }
        };
        Ok(GemmPlan {
            kernel,
            shape,
            map_a,
            m,
            n,
            k,
        })
    }
}

/// One version planned for `m x n x k`: its kernel and launch shape, and for `wgmma_rs` A's
/// TMA map with the device address of the A it maps.
pub struct GemmPlan<'a> {
    pub kernel: &'a Kernel,
    pub shape: LaunchShape,
    map_a: Option<(TmaDescriptor, u64)>,
    m: usize,
    n: usize,
    k: usize,
}

impl GemmPlan<'_> {
    /// `C = A W^T`, with the A it was planned with for `wgmma_rs` (another A is an error: A's
    /// map holds its address).
    pub fn launch(
        &self,
        gpu: &Gpu,
        a: &CudaSlice<bf16>,
        w: &Nvfp4Dev,
        c: &mut CudaSlice<f32>,
    ) -> Result<()> {
        w.check()?;
        let (m, n, k) = (self.m, self.n, self.k);
        if (w.rows, w.cols) != (n, k) || a.len() != m * k || c.len() != m * n {
            bail!(
                "gemm: A of {}, W of {} x {} and C of {} do not fit {m} x {n} x {k}",
                a.len(),
                w.rows,
                w.cols,
                c.len()
            );
        }
        let (packed, scales, ts) = (&w.packed, &w.scales, &w.tensor_scale);
        let Some((map_a, a_at)) = self.map_a else {
            let (m, n, k) = (m as u64, n as u64, k as u64);
            // SAFETY: the lengths are checked above; k is a multiple of 16 (A rows 32-byte
            // aligned, W rows 8-byte aligned, as its loads need); tiles past m, n, k are
            // zero-filled and stores are guarded.
            return unsafe {
                gemm_nvfp4_mma_bf16(
                    gpu,
                    self.kernel,
                    &self.shape,
                    a,
                    packed,
                    scales,
                    ts,
                    c,
                    m,
                    n,
                    k,
                )
            };
        };
        if a.device_ptr(&gpu.stream).0 != a_at {
            bail!("gemm: wgmma_rs launched on another A than it was planned for");
        }
        let (m, n, k) = (m as i32, n as i32, k as i32);
        // SAFETY: the lengths are checked above and m, n, k are within i32
        // (wgmma_launch_shape); the map covers exactly A, the A given (its address checked
        // above); W's codes are read in 8-byte blocks (rows of k / 2 bytes, k a multiple of
        // 16) and scales byte by byte unless every row is 4-byte aligned; rows and blocks past
        // n and k are not read and stores are guarded.
        let params = Nvfp4GemmParams {
            map_a,
            packed: DeviceIn::of(gpu, packed),
            scales: DeviceIn::of(gpu, scales),
            tensor_scale: DeviceIn::of(gpu, ts),
            c: DeviceOut::of(gpu, c),
            m,
            n,
            k,
        };
        // SAFETY: the kernel takes Nvfp4GemmParams (its header is this declaration's); the
        // lengths are checked above and m, n, k are within i32 (wgmma_launch_shape); the map
        // covers exactly A, the A given (its address checked above); W's codes are read in
        // 8-byte blocks (rows of k / 2 bytes, k a multiple of 16) and scales byte by byte
        // unless every row is 4-byte aligned; rows and blocks past n and k are not read and
        // stores are guarded. The buffers outlive the launch (borrowed here).
        unsafe { gemm_nvfp4_wgmma_rs(gpu, self.kernel, &self.shape, params) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The checked-in `gemm_params.cuh` is what [`Nvfp4GemmParams`] writes.
    #[test]
    fn the_kernels_parameter_struct_is_the_launchers() {
        common::assert_generated_header!("gemm_params.cuh", &params_header());
    }

    #[test]
    fn the_ring_fits_an_h100_block() {
        // 227 KiB is the most dynamic shared memory an H100 block may have.
        assert!(
            wgmma_shared_bytes() <= 227 * 1024,
            "{}",
            wgmma_shared_bytes()
        );
    }
}
