//! Launchers for `quantize.cu`: bf16 -> NVFP4 (two passes: the tensor's amax, then the
//! blocks) and NVFP4 -> bf16.

use anyhow::{Result, bail};
use common::gpu::kernel::KernelSet;
use common::{Gpu, Kernel, LaunchShape};
use cudarc::driver::{CudaSlice, PushKernelArg};
use half::bf16;

use crate::{BLOCK, Nvfp4Dev, QUANTIZE_SOURCE, check_shape};

pub const FUNCTIONS: &[&str] = &[
    "amax_finite_bf16",
    "quantize_nvfp4_bf16",
    "dequantize_nvfp4_bf16",
];

const THREADS: u32 = 256;
/// Blocks per SM of the grid-stride amax pass (one full wave).
const AMAX_BLOCKS_PER_SM: u32 = 8;

pub struct Quantize {
    kernels: KernelSet,
    sms: u32,
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

    /// The quantize pass (the one the table shows) for `rows x cols`.
    pub fn quantize_kernel(&self, rows: usize, cols: usize) -> Result<(&Kernel, LaunchShape)> {
        Ok((
            self.kernels.get("quantize_nvfp4_bf16")?,
            Self::per_block_shape(rows * cols / BLOCK)?,
        ))
    }

    pub fn dequantize_kernel(&self, rows: usize, cols: usize) -> Result<(&Kernel, LaunchShape)> {
        Ok((
            self.kernels.get("dequantize_nvfp4_bf16")?,
            Self::per_block_shape(rows * cols / BLOCK)?,
        ))
    }

    /// Quantizes the row-major `rows x cols` bf16 `x` into `packed` (rows * cols / 2 bytes),
    /// `scales` (rows * cols / 16) and `tensor_scale` (1). `amax` (one u32) is scratch: it is
    /// cleared, then holds the bits of the largest finite |x|.
    #[allow(clippy::too_many_arguments)]
    pub fn quantize(
        &self,
        gpu: &Gpu,
        x: &CudaSlice<bf16>,
        (rows, cols): (usize, usize),
        packed: &mut CudaSlice<u8>,
        scales: &mut CudaSlice<u8>,
        tensor_scale: &mut CudaSlice<f32>,
        amax: &mut CudaSlice<u32>,
    ) -> Result<()> {
        check_shape("quantize: x", rows, cols)?;
        let n = rows * cols;
        if x.len() != n
            || packed.len() != n / 2
            || scales.len() != n / BLOCK
            || tensor_scale.len() != 1
            || amax.is_empty()
        {
            bail!(
                "quantize: {rows} x {cols} needs x of {n}, packed of {}, scales of {} and one \
                 tensor scale and amax; given {}, {}, {}, {}, {}",
                n / 2,
                n / BLOCK,
                x.len(),
                packed.len(),
                scales.len(),
                tensor_scale.len(),
                amax.len()
            );
        }
        gpu.stream.memset_zeros(amax)?;
        let chunks = (n / 8) as u64;
        let amax_kernel = self.kernels.get("amax_finite_bf16")?;
        let wave = (self.sms * AMAX_BLOCKS_PER_SM).min((n / 8).div_ceil(THREADS as usize) as u32);
        let shape = LaunchShape::linear(wave.max(1), THREADS);
        let mut launch = gpu.stream.launch_builder(&amax_kernel.func);
        launch.arg(x).arg(&mut *amax).arg(&chunks);
        // SAFETY: matches amax_finite_bf16(const bf16_t* x, unsigned* amax_bits, index_t
        // chunks): x holds 8 * chunks bf16 (n is a multiple of 16), amax one cleared u32.
        unsafe { launch.launch(amax_kernel.config(&shape)?) }?;

        let (kernel, shape) = self.quantize_kernel(rows, cols)?;
        let blocks = (n / BLOCK) as u64;
        let mut launch = gpu.stream.launch_builder(&kernel.func);
        launch
            .arg(x)
            .arg(&*amax)
            .arg(packed)
            .arg(scales)
            .arg(tensor_scale)
            .arg(&blocks);
        // SAFETY: matches quantize_nvfp4_bf16(x, amax_bits, packed, scales, tensor_scale,
        // blocks): x holds 16 * blocks bf16, packed 8 * blocks bytes, scales `blocks`,
        // tensor_scale one float (checked above); the grid covers every block.
        unsafe { launch.launch(kernel.config(&shape)?) }?;
        Ok(())
    }

    /// `y = (code * scale) * tensor_scale` as bf16, row-major `rows x cols`.
    pub fn dequantize(&self, gpu: &Gpu, q: &Nvfp4Dev, y: &mut CudaSlice<bf16>) -> Result<()> {
        q.check()?;
        let n = q.rows * q.cols;
        if y.len() != n {
            bail!("dequantize: y holds {} values, the matrix {n}", y.len());
        }
        let (kernel, shape) = self.dequantize_kernel(q.rows, q.cols)?;
        let blocks = (n / BLOCK) as u64;
        let mut launch = gpu.stream.launch_builder(&kernel.func);
        launch
            .arg(&q.packed)
            .arg(&q.scales)
            .arg(&q.tensor_scale)
            .arg(y)
            .arg(&blocks);
        // SAFETY: matches dequantize_nvfp4_bf16(packed, scales, tensor_scale, y, blocks) with
        // the lengths checked above; the grid covers every block.
        unsafe { launch.launch(kernel.config(&shape)?) }?;
        Ok(())
    }
}
