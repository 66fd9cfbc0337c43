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
use common::gpu::tma::KMajorTiles;
use common::reference::matmul;
use common::session::Refused;
use common::{Gpu, Kernel, LaunchShape, Tolerance, UsageError};
use cudarc::driver::{CudaSlice, PushKernelArg};
use half::bf16;

use crate::{GEMM_SOURCE, Nvfp4Dev, check_shape};

/// The versions in table order, each with its CUDA function.
pub const VERSIONS: &[&str] = &["mma_bf16", "wgmma_rs"];
const MMA_FUNCTION: &str = "gemm_nvfp4_mma_bf16";
const WGMMA_FUNCTION: &str = "gemm_nvfp4_wgmma_rs";

/// `mma_bf16`'s block tile of C (128 x 128).
const MMA_TILE: usize = 128;

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

/// The `-D` options that give `gemm.cu` the tile above.
fn wgmma_defines() -> Vec<String> {
    vec![
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
        .map(|b| b.with_options(wgmma_defines()))
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
        block: (256, 1, 1),
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

    /// The kernel and launch shape of `version` on `m x n x k`; a [`Refused`] when this GPU
    /// or these sizes do not suit it.
    pub fn kernel(
        &self,
        version: &str,
        m: usize,
        n: usize,
        k: usize,
    ) -> Result<(&Kernel, LaunchShape)> {
        match version {
            "mma_bf16" => Ok((self.kernels.get(MMA_FUNCTION)?, launch_shape(m, n)?)),
            "wgmma_rs" => {
                if !self.hopper {
                    return Err(Refused(
                        "wgmma_rs: needs a Hopper GPU (sm_90: wgmma, TMA, setmaxnreg)".into(),
                    )
                    .into());
                }
                Ok((
                    self.kernels.get(WGMMA_FUNCTION)?,
                    wgmma_launch_shape(m, n, k, self.sms)?,
                ))
            }
            other => bail!(UsageError::new(format!(
                "gemm has no version `{other}`; it has: {}",
                VERSIONS.join(", ")
            ))),
        }
    }

    /// `C = A W^T` by `version`.
    pub fn launch(
        &self,
        gpu: &Gpu,
        version: &str,
        a: &CudaSlice<bf16>,
        w: &Nvfp4Dev,
        c: &mut CudaSlice<f32>,
        m: usize,
    ) -> Result<()> {
        w.check()?;
        let (n, k) = (w.rows, w.cols);
        check_shape("gemm: A", m, k)?;
        if a.len() != m * k || c.len() != m * n {
            bail!(
                "gemm: A of {} and C of {} do not fit {m} x {n} x {k}",
                a.len(),
                c.len()
            );
        }
        let (kernel, shape) = self.kernel(version, m, n, k)?;
        let config = kernel.config(&shape)?;
        if version == "mma_bf16" {
            let (m, n, k) = (m as u64, n as u64, k as u64);
            let mut launch = gpu.stream.launch_builder(&kernel.func);
            launch
                .arg(a)
                .arg(&w.packed)
                .arg(&w.scales)
                .arg(&w.tensor_scale)
                .arg(c)
                .arg(&m)
                .arg(&n)
                .arg(&k);
            // SAFETY: matches gemm_nvfp4_mma_bf16(a, packed, scales, tensor_scale, c, m, n, k)
            // with the lengths checked above; k is a multiple of 16 (A rows 32-byte aligned, W
            // rows 8-byte aligned, as its loads need); tiles past m, n, k are zero-filled and
            // stores are guarded.
            unsafe { launch.launch(config) }?;
            return Ok(());
        }
        // A as [1][m][k] in boxes of 64 k x 256 rows: rows of 2k bytes, a multiple of 32
        // since k is of 16, as the TMA needs.
        let map_a = KMajorTiles {
            inner: k,
            rows: m,
            outer: 1,
            outer_stride: m * k,
            box_inner: WG_BOX_K as u32,
            box_rows: WG_TILE_M as u32,
        }
        .encode(gpu, a)?;
        let (m, n, k) = (m as i32, n as i32, k as i32);
        let mut launch = gpu.stream.launch_builder(&kernel.func);
        launch
            .arg(&map_a)
            .arg(&w.packed)
            .arg(&w.scales)
            .arg(&w.tensor_scale)
            .arg(c)
            .arg(&m)
            .arg(&n)
            .arg(&k);
        // SAFETY: matches gemm_nvfp4_wgmma_rs(map_a, packed, scales, tensor_scale, c, m, n, k)
        // with the lengths checked above and m, n, k within i32 (wgmma_launch_shape); the map
        // covers exactly A; W's codes are read in 8-byte blocks (rows of k / 2 bytes, k a
        // multiple of 16) and scales byte by byte unless every row is 4-byte aligned; rows and
        // blocks past n and k are not read and stores are guarded.
        unsafe { launch.launch(config) }?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
