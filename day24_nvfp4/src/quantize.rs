//! Launchers for `quantize.cu`: bf16 -> NVFP4 (two passes: the tensor's amax, then the
//! blocks) and NVFP4 -> bf16.

use anyhow::{Result, bail};
use common::gpu::kernel::KernelSet;
use common::{Gpu, Kernel, LaunchShape};
use cudarc::driver::CudaSlice;
use half::bf16;

use crate::{BLOCK, Nvfp4Dev, QUANTIZE_SOURCE, check_shape};

pub const FUNCTIONS: &[&str] = &[
    "amax_finite_bf16",
    "quantize_nvfp4_bf16",
    "dequantize_nvfp4_bf16",
];

common::kernel_args! {
    /// `amax_finite_bf16(const bf16_t* x, unsigned* amax_bits, index_t chunks)`
    fn amax_finite_bf16(x: &CudaSlice<bf16>, amax_bits: &mut CudaSlice<u32>, chunks: u64);
    /// `quantize_nvfp4_bf16(const bf16_t* x, const unsigned* amax_bits, unsigned char* packed,
    /// unsigned char* scales, float* tensor_scale, index_t blocks)`
    fn quantize_nvfp4_bf16(
        x: &CudaSlice<bf16>,
        amax_bits: &CudaSlice<u32>,
        packed: &mut CudaSlice<u8>,
        scales: &mut CudaSlice<u8>,
        tensor_scale: &mut CudaSlice<f32>,
        blocks: u64,
    );
    /// `dequantize_nvfp4_bf16(const unsigned char* packed, const unsigned char* scales, const
    /// float* tensor_scale, bf16_t* y, index_t blocks)`
    fn dequantize_nvfp4_bf16(
        packed: &CudaSlice<u8>,
        scales: &CudaSlice<u8>,
        tensor_scale: &CudaSlice<f32>,
        y: &mut CudaSlice<bf16>,
        blocks: u64,
    );
}

const THREADS: u32 = 256;
/// Blocks per SM of the grid-stride amax pass (one full wave).
const AMAX_BLOCKS_PER_SM: u32 = 8;

pub struct Quantize {
    kernels: KernelSet,
    sms: u32,
}

/// Quantization planned for one `rows x cols` tensor: both passes' kernels and launch shapes,
/// the amax scratch, and the outputs beside the packed codes (the e4m3 scales and the tensor
/// scale), which a check reads after a run.
pub struct QuantizePlan<'a> {
    /// The quantize pass, the one the table shows.
    pub kernel: &'a Kernel,
    pub shape: LaunchShape,
    amax_kernel: &'a Kernel,
    amax_shape: LaunchShape,
    rows: usize,
    cols: usize,
    /// `rows x cols / 16` e4m3 scales.
    pub scales: CudaSlice<u8>,
    /// One f32.
    pub tensor_scale: CudaSlice<f32>,
    /// Cleared before each run, then the bits of the largest finite |x|.
    amax: CudaSlice<u32>,
}

/// Dequantization planned for one `rows x cols` tensor.
pub struct DequantizePlan<'a> {
    pub kernel: &'a Kernel,
    pub shape: LaunchShape,
    rows: usize,
    cols: usize,
}

impl Quantize {
    pub fn load(gpu: &Gpu) -> Result<Self> {
        Ok(Self {
            kernels: KernelSet::load(
                gpu,
                &QUANTIZE_SOURCE,
                FUNCTIONS.iter().map(|s| s.to_string()),
            )?,
            sms: gpu.info.sms,
        })
    }

    /// A thread per block of 16 values.
    fn per_block_shape(blocks: usize) -> Result<LaunchShape> {
        let grid = u32::try_from(blocks.div_ceil(THREADS as usize))
            .ok()
            .filter(|&g| g <= i32::MAX as u32)
            .ok_or_else(|| {
                anyhow::anyhow!("{blocks} blocks of 16 need more than 2^31 - 1 grid blocks")
            })?;
        Ok(LaunchShape::linear(grid, THREADS))
    }

    /// Plans the quantization of a row-major `rows x cols` bf16 tensor.
    pub fn plan_quantize(&self, gpu: &Gpu, rows: usize, cols: usize) -> Result<QuantizePlan<'_>> {
        check_shape("quantize: x", rows, cols)?;
        let n = rows * cols;
        let wave = (self.sms * AMAX_BLOCKS_PER_SM).min((n / 8).div_ceil(THREADS as usize) as u32);
        Ok(QuantizePlan {
            kernel: self.kernels.get("quantize_nvfp4_bf16")?,
            shape: Self::per_block_shape(n / BLOCK)?,
            amax_kernel: self.kernels.get("amax_finite_bf16")?,
            amax_shape: LaunchShape::linear(wave.max(1), THREADS),
            rows,
            cols,
            scales: gpu.alloc_poisoned(n / BLOCK)?,
            tensor_scale: gpu.alloc_poisoned(1)?,
            amax: gpu.alloc_poisoned(1)?,
        })
    }

    /// Plans the dequantization of a `rows x cols` NVFP4 tensor.
    pub fn plan_dequantize(&self, rows: usize, cols: usize) -> Result<DequantizePlan<'_>> {
        check_shape("dequantize: y", rows, cols)?;
        Ok(DequantizePlan {
            kernel: self.kernels.get("dequantize_nvfp4_bf16")?,
            shape: Self::per_block_shape(rows * cols / BLOCK)?,
            rows,
            cols,
        })
    }
}

impl QuantizePlan<'_> {
    /// Quantizes the row-major bf16 `x` into `packed` (rows * cols / 2 bytes), this plan's
    /// `scales` and `tensor_scale`.
    pub fn launch(
        &mut self,
        gpu: &Gpu,
        x: &CudaSlice<bf16>,
        packed: &mut CudaSlice<u8>,
    ) -> Result<()> {
        let (rows, cols) = (self.rows, self.cols);
        let n = rows * cols;
        if x.len() != n || packed.len() != n / 2 {
            bail!(
                "quantize: {rows} x {cols} needs x of {n} and packed of {}; given {} and {}",
                n / 2,
                x.len(),
                packed.len()
            );
        }
        gpu.stream.memset_zeros(&mut self.amax)?;
        let chunks = (n / 8) as u64;
        // SAFETY: x holds 8 * chunks bf16 (n is a multiple of 16, checked by the plan), amax
        // one cleared u32.
        unsafe {
            amax_finite_bf16(
                gpu,
                self.amax_kernel,
                &self.amax_shape,
                x,
                &mut self.amax,
                chunks,
            )
        }?;
        let blocks = (n / BLOCK) as u64;
        // SAFETY: x holds 16 * blocks bf16, packed 8 * blocks bytes (checked above), scales
        // `blocks` and tensor_scale one float (made by the plan); the grid covers every block.
        unsafe {
            quantize_nvfp4_bf16(
                gpu,
                self.kernel,
                &self.shape,
                x,
                &self.amax,
                packed,
                &mut self.scales,
                &mut self.tensor_scale,
                blocks,
            )
        }
    }
}

impl DequantizePlan<'_> {
    /// `y = (code * scale) * tensor_scale` as bf16, row-major `rows x cols`.
    pub fn launch(&self, gpu: &Gpu, q: &Nvfp4Dev, y: &mut CudaSlice<bf16>) -> Result<()> {
        q.check()?;
        let n = self.rows * self.cols;
        if (q.rows, q.cols) != (self.rows, self.cols) || y.len() != n {
            bail!(
                "dequantize: planned for {} x {}, given a matrix of {} x {} and y of {} values",
                self.rows,
                self.cols,
                q.rows,
                q.cols,
                y.len()
            );
        }
        let blocks = (n / BLOCK) as u64;
        // SAFETY: the matrix holds `blocks` blocks of codes and scales (q.check) and y 16 *
        // blocks values (checked above); the grid covers every block.
        unsafe {
            dequantize_nvfp4_bf16(
                gpu,
                self.kernel,
                &self.shape,
                &q.packed,
                &q.scales,
                &q.tensor_scale,
                y,
                blocks,
            )
        }
    }
}
