//! Launchers for `gemv.cu`: `y = W x` with W in NVFP4 (two versions) or in bf16 (the
//! baseline the 3x goal is measured against), x bf16, y f32.

use anyhow::{Result, bail};
use common::gpu::kernel::KernelSet;
use common::reference::gemv::tolerance_f32;
use common::{Gpu, Kernel, LaunchShape, Tolerance};
use cudarc::driver::{CudaSlice, PushKernelArg};
use half::bf16;

use crate::{GEMV_SOURCE, Nvfp4Dev, check_shape};

/// Version names, in table order: the bf16 baseline first.
pub const VERSIONS: &[&str] = &["bf16_warp", "nvfp4_warp", "nvfp4_rows2", "nvfp4_rows4"];

const THREADS: u32 = 256;
const WARPS: usize = 8;

/// The CUDA function of `version` for rows of `k` values: 16-byte loads of packed codes when a
/// row's bytes (k / 2) are a multiple of 16, else 8-byte loads.
fn function(version: &str, k: usize) -> Result<String> {
    let width = if k.is_multiple_of(32) { "u4" } else { "u2" };
    Ok(match version {
        "bf16_warp" => "gemv_bf16_warp_x8".to_string(),
        "nvfp4_warp" => format!("gemv_nvfp4_warp_{width}"),
        "nvfp4_rows2" => format!("gemv_nvfp4_rows2_{width}"),
        "nvfp4_rows4" => format!("gemv_nvfp4_rows4_{width}"),
        other => bail!("day24 has no GEMV version `{other}`"),
    })
}

/// Rows one warp computes.
fn rows_per_warp(version: &str) -> usize {
    match version {
        "nvfp4_rows2" => 2,
        "nvfp4_rows4" => 4,
        _ => 1,
    }
}

pub fn all_functions() -> Vec<String> {
    let mut names: Vec<String> = ["u4", "u2"]
        .iter()
        .flat_map(|w| {
            [
                format!("gemv_nvfp4_warp_{w}"),
                format!("gemv_nvfp4_rows2_{w}"),
                format!("gemv_nvfp4_rows4_{w}"),
            ]
        })
        .collect();
    names.push("gemv_bf16_warp_x8".into());
    names
}

/// The tolerance of every version for rows of `k` values whose largest `sum |w x|` is
/// `max_row_magnitude` (see `common::reference::gemv`). Every product is exact in f32 (bf16
/// times bf16, or an e2m1 code times a bf16: at most 16 significant bits), so the error is the
/// summation's, bounded by gamma_c times the sum of magnitudes, c the longest chain of
/// roundings a term passes through. NVFP4: 15 in its block's sum, 1 for the scaled add into
/// the lane's accumulator, then at most one per later block of the lane (2 ceil(k / 1024)
/// blocks per lane), 5 butterfly levels and the tensor scale: at most k / 32 + 22. bf16: a
/// lane's k / 32 terms in at most 4 chains, their sum and the butterfly: under k / 32 + 8.
/// c = k / 32 + 24 covers both. The NVFP4 kernels keep the decode's 2^-14 in every sum and
/// multiply by 2^14 once at the end: a power of two commutes with each rounding (outside f32's
/// subnormal range), so the chain is the same as if each block's scale carried the factor.
pub fn tolerance(k: usize, max_row_magnitude: f64) -> Tolerance {
    tolerance_f32(k.div_ceil(32) + 24, max_row_magnitude)
}

pub struct Gemv {
    kernels: KernelSet,
}

impl Gemv {
    pub fn load(gpu: &Gpu) -> Result<Self> {
        Ok(Self {
            kernels: KernelSet::load(gpu, &GEMV_SOURCE, all_functions())?,
        })
    }

    /// The kernel and launch shape of `version` for an `n x k` W.
    pub fn kernel(&self, version: &str, n: usize, k: usize) -> Result<(&Kernel, LaunchShape)> {
        check_shape("gemv: W", n, k)?;
        let rows_per_block = WARPS * rows_per_warp(version);
        let blocks = n.div_ceil(rows_per_block);
        let grid = u32::try_from(blocks)
            .ok()
            .filter(|&b| b <= i32::MAX as u32)
            .ok_or_else(|| anyhow::anyhow!("gemv: {n} rows need more than 2^31 - 1 blocks"))?;
        Ok((
            self.kernels.get(&function(version, k)?)?,
            LaunchShape::linear(grid, THREADS),
        ))
    }

    /// `y = W x`, W bf16 row-major `n x k` (the baseline).
    pub fn bf16(
        &self,
        gpu: &Gpu,
        w: &CudaSlice<bf16>,
        x: &CudaSlice<bf16>,
        y: &mut CudaSlice<f32>,
        (n, k): (usize, usize),
    ) -> Result<()> {
        let (kernel, shape) = self.kernel("bf16_warp", n, k)?;
        if w.len() != n * k || x.len() != k || y.len() != n {
            bail!(
                "gemv: W of {}, x of {} and y of {} do not make an {n} x {k} product",
                w.len(),
                x.len(),
                y.len()
            );
        }
        let (n, k) = (n as u64, k as u64);
        let mut launch = gpu.stream.launch_builder(&kernel.func);
        launch.arg(w).arg(x).arg(y).arg(&n).arg(&k);
        // SAFETY: matches gemv_bf16_warp_x8(const bf16_t* w, const bf16_t* x, float* y, n, k)
        // with the lengths checked above; k is a multiple of 16, so every row starts on a
        // 16-byte boundary; the grid covers n rows and the kernel guards row >= n.
        unsafe { launch.launch(kernel.config(&shape)?) }?;
        Ok(())
    }

    /// `y = W x` with W in NVFP4, by `version` (`nvfp4_warp` or `nvfp4_rows4`).
    pub fn nvfp4(
        &self,
        gpu: &Gpu,
        version: &str,
        w: &Nvfp4Dev,
        x: &CudaSlice<bf16>,
        y: &mut CudaSlice<f32>,
    ) -> Result<()> {
        if version == "bf16_warp" {
            bail!("gemv: bf16_warp takes bf16 weights, not NVFP4");
        }
        w.check()?;
        let (n, k) = (w.rows, w.cols);
        let (kernel, shape) = self.kernel(version, n, k)?;
        if x.len() != k || y.len() != n {
            bail!(
                "gemv: x of {} and y of {} do not fit an NVFP4 W of {n} x {k}",
                x.len(),
                y.len()
            );
        }
        let (n, k) = (n as u64, k as u64);
        let mut launch = gpu.stream.launch_builder(&kernel.func);
        launch
            .arg(&w.packed)
            .arg(&w.scales)
            .arg(x)
            .arg(&w.tensor_scale)
            .arg(y)
            .arg(&n)
            .arg(&k);
        // SAFETY: matches gemv_nvfp4_*(packed, scales, x, tensor_scale, y, n, k) with the
        // lengths checked above (w.check); the _u4 kernels are chosen only when k is a
        // multiple of 32, so their 16-byte and 2-byte loads are aligned; rows past n are
        // clamped for loads and never stored.
        unsafe { launch.launch(kernel.config(&shape)?) }?;
        Ok(())
    }
}
