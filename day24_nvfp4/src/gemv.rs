//! Launchers for `gemv.cu`: `y = W x` with W in NVFP4 (two versions) or in bf16 (the
//! baseline the 3x goal is measured against), x bf16, y f32.

use anyhow::{Result, bail};
use common::gpu::kernel::KernelSet;
use common::gpu::kernel_build::KernelBuild;
use common::reference::gemv::tolerance_f32;
use common::{Gpu, Kernel, LaunchShape, Tolerance};
use cudarc::driver::CudaSlice;
use half::bf16;

use crate::{GEMV_SOURCE, Nvfp4Dev, check_shape};

common::versions! {
    /// The GEMV versions, in table order: the bf16 baseline first.
    pub enum Version {
        Bf16Warp => "bf16_warp",
        Nvfp4Warp => "nvfp4_warp",
        Nvfp4Rows2 => "nvfp4_rows2",
        Nvfp4Rows4 => "nvfp4_rows4",
    }
}

impl Version {
    /// The CUDA function for rows of `k` values: 16-byte loads of packed codes when a row's
    /// bytes (k / 2) are a multiple of 16, else 8-byte loads.
    fn function(self, k: usize) -> String {
        let width = if k.is_multiple_of(32) { "u4" } else { "u2" };
        match self {
            Version::Bf16Warp => "gemv_bf16_warp_x8".to_string(),
            Version::Nvfp4Warp => format!("gemv_nvfp4_warp_{width}"),
            Version::Nvfp4Rows2 => format!("gemv_nvfp4_rows2_{width}"),
            Version::Nvfp4Rows4 => format!("gemv_nvfp4_rows4_{width}"),
        }
    }

    /// Rows one warp computes.
    fn rows_per_warp(self) -> usize {
        match self {
            Version::Nvfp4Rows2 => 2,
            Version::Nvfp4Rows4 => 4,
            _ => 1,
        }
    }
}

common::kernel_args! {
    /// `gemv_bf16_warp_x8(const bf16_t* w, const bf16_t* x, float* y, index_t n, index_t k)`
    fn gemv_bf16(w: &CudaSlice<bf16>, x: &CudaSlice<bf16>, y: &mut CudaSlice<f32>, n: u64, k: u64);
    /// `gemv_nvfp4_*(const unsigned char* packed, const unsigned char* scales, const bf16_t* x,
    /// const float* tensor_scale, float* y, index_t n, index_t k)`
    fn gemv_nvfp4(
        packed: &CudaSlice<u8>,
        scales: &CudaSlice<u8>,
        x: &CudaSlice<bf16>,
        tensor_scale: &CudaSlice<f32>,
        y: &mut CudaSlice<f32>,
        n: u64,
        k: u64,
    );
}

/// Warps per block, one row (or rows_per_warp rows) each; `gemv.cu` gets it as a define
/// ([`build`]).
const WARPS: usize = 8;
const THREADS: u32 = 32 * WARPS as u32;

/// `gemv.cu`, every kernel, with the block's warps as a define.
pub fn build() -> KernelBuild {
    KernelBuild::device(GEMV_SOURCE, all_functions())
        .with_options(vec![format!("-DGEMV_WARPS={WARPS}")])
}

/// The weights a GEMV reads: bf16 for the baseline, NVFP4 for the others.
#[derive(Clone, Copy)]
pub enum Weights<'a> {
    Bf16(&'a CudaSlice<bf16>),
    Nvfp4(&'a Nvfp4Dev),
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

/// One version planned for an `n x k` W: its kernel and launch shape.
pub struct GemvPlan<'a> {
    pub kernel: &'a Kernel,
    pub shape: LaunchShape,
    version: Version,
    n: usize,
    k: usize,
}

impl Gemv {
    pub fn load(gpu: &Gpu) -> Result<Self> {
        Ok(Self {
            kernels: KernelSet::load_build(gpu, &build())?,
        })
    }

    /// Plans `version` for an `n x k` W.
    pub fn plan(&self, version: Version, n: usize, k: usize) -> Result<GemvPlan<'_>> {
        check_shape("gemv: W", n, k)?;
        let rows_per_block = WARPS * version.rows_per_warp();
        let blocks = n.div_ceil(rows_per_block);
        let grid = u32::try_from(blocks)
            .ok()
            .filter(|&b| b <= i32::MAX as u32)
            .ok_or_else(|| anyhow::anyhow!("gemv: {n} rows need more than 2^31 - 1 blocks"))?;
        Ok(GemvPlan {
            kernel: self.kernels.get(&version.function(k))?,
            shape: LaunchShape::linear(grid, THREADS),
            version,
            n,
            k,
        })
    }
}

impl GemvPlan<'_> {
    /// `y = W x`: W row-major `n x k`, bf16 for `bf16_warp`, NVFP4 for the others.
    pub fn launch(
        &self,
        gpu: &Gpu,
        w: Weights,
        x: &CudaSlice<bf16>,
        y: &mut CudaSlice<f32>,
    ) -> Result<()> {
        let (n, k) = (self.n, self.k);
        if x.len() != k || y.len() != n {
            bail!(
                "gemv: x of {} and y of {} do not fit a W of {n} x {k}",
                x.len(),
                y.len()
            );
        }
        let (n64, k64) = (n as u64, k as u64);
        match (self.version, w) {
            (Version::Bf16Warp, Weights::Bf16(w)) => {
                if w.len() != n * k {
                    bail!("gemv: W of {} does not make an {n} x {k} product", w.len());
                }
                // SAFETY: w, x and y hold n k, k and n values (checked above); k is a multiple
                // of 16, so every row starts on a 16-byte boundary; the grid covers n rows and
                // the kernel guards row >= n.
                unsafe { gemv_bf16(gpu, self.kernel, &self.shape, w, x, y, n64, k64) }
            }
            (Version::Bf16Warp, Weights::Nvfp4(_)) => {
                bail!("gemv: bf16_warp takes bf16 weights, not NVFP4")
            }
            (_, Weights::Nvfp4(w)) => {
                w.check()?;
                if (w.rows, w.cols) != (n, k) {
                    bail!(
                        "gemv: an NVFP4 W of {} x {}, planned for {n} x {k}",
                        w.rows,
                        w.cols
                    );
                }
                // SAFETY: the lengths are checked above (w.check); the _u4 kernels are chosen
                // only when k is a multiple of 32, so their 16-byte and 2-byte loads are
                // aligned; rows past n are clamped for loads and never stored.
                unsafe {
                    gemv_nvfp4(
                        gpu,
                        self.kernel,
                        &self.shape,
                        &w.packed,
                        &w.scales,
                        x,
                        &w.tensor_scale,
                        y,
                        n64,
                        k64,
                    )
                }
            }
            (version, Weights::Bf16(_)) => {
                bail!("gemv: {} takes NVFP4 weights, not bf16", version.name())
            }
        }
    }
}
