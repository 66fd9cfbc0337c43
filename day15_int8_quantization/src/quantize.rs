//! Launchers for `quantize.cu`: per-tensor symmetric (int8) and asymmetric (uint8)
//! quantization in three versions, and dequantization.

use anyhow::{Result, bail};
use common::gpu::kernel::KernelSet;
use common::gpu::tile::file_define;
use common::session::Refused;
use common::{Element, Gpu, Kernel, LaunchShape};
use cudarc::driver::{CudaSlice, PushKernelArg};

/// The kernels' launch numbers, held here once: `quantize.cu` gets them as NVRTC defines
/// ([`defines`]) and checks its own layout against them. Threads per block of the grid-stride
/// kernels, and their blocks per SM (one full wave).
const THREADS: u32 = 256;
const BLOCKS_PER_SM: u32 = 8;
/// The fused kernel's block and its shared-memory cache: FUSED_SHARED_STEPS steps of one
/// float4 per thread.
const FUSED_THREADS: u32 = 512;
const FUSED_SHARED_STEPS: u32 = 12;
const FUSED_SHARED_BYTES: u32 = FUSED_SHARED_STEPS * FUSED_THREADS * 16;

/// The `-DQUANTIZE_...` options that give `quantize.cu` the numbers above.
pub fn defines() -> Vec<String> {
    [
        ("THREADS", THREADS),
        ("BLOCKS_PER_SM", BLOCKS_PER_SM),
        ("FUSED_THREADS", FUSED_THREADS),
        ("FUSED_STEPS", FUSED_SHARED_STEPS),
        ("FUSED_SHARED_BYTES", FUSED_SHARED_BYTES),
    ]
    .into_iter()
    .map(|(name, value)| file_define("QUANTIZE", name, value as usize))
    .collect()
}

common::versions! {
    /// Which per-tensor scheme, named as in kernel names and problem keys (`quantize_sym`).
    pub enum Scheme {
        /// int8 in [-127, 127], zero point 0.
        Sym => "sym",
        /// uint8 in [0, 255] with a zero point.
        Asym => "asym",
    }
}

impl Scheme {
    /// The storage type of q: `i8` or `u8`.
    pub fn storage(self) -> &'static str {
        match self {
            Scheme::Sym => "i8",
            Scheme::Asym => "u8",
        }
    }

    /// Refuses a q of the other scheme's storage type, the error led by `kernel`.
    fn check_storage<Q: Element>(self, kernel: std::fmt::Arguments) -> Result<()> {
        if Q::NAME != self.storage() {
            bail!("{kernel}: q must be {}, not {}", self.storage(), Q::NAME);
        }
        Ok(())
    }
}

/// Refuses buffers other than those `op` was planned for: the two tensors (named as in its
/// signature) of `n` elements each and params of 2 floats (`[scale, zero_point]`).
fn check_lengths(op: &str, n: usize, tensors: [(&str, usize); 2], params: usize) -> Result<()> {
    let [(a, a_len), (b, b_len)] = tensors;
    if a_len != n || b_len != n || params != 2 {
        bail!(
            "{op}: planned for {n} elements, given {a} of {a_len}, {b} of {b_len} and params of \
             {params} (2 needed)"
        );
    }
    Ok(())
}

common::versions! {
    /// The quantize versions, in the order the table shows them.
    pub enum Version {
        TwoPass => "two_pass",
        TwoPassReverse => "two_pass_reverse",
        Fused => "fused",
    }
}

impl Version {
    /// The CUDA functions a run launches, in order.
    pub fn functions(self, scheme: Scheme) -> Vec<String> {
        let s = scheme.name();
        match self {
            Version::TwoPass => vec![format!("min_max_{s}_f32x4"), format!("quantize_{s}_f32x4")],
            Version::TwoPassReverse => vec![
                format!("min_max_{s}_f32x4"),
                format!("quantize_{s}_reverse_f32x4"),
            ],
            Version::Fused => vec![format!("quantize_{s}_fused_f32x4")],
        }
    }
}

/// The dequantize kernel for q stored as `storage` (`i8` or `u8`).
pub fn dequantize_function(scheme: Scheme) -> String {
    format!("dequantize_{}x4", scheme.storage())
}

/// Every CUDA function of `quantize.cu`.
pub fn all_functions() -> Vec<String> {
    let mut names: Vec<String> = Scheme::ALL
        .iter()
        .flat_map(|&s| Version::ALL.iter().flat_map(move |v| v.functions(s)))
        .chain(Scheme::ALL.iter().map(|&s| dequantize_function(s)))
        .collect();
    names.sort();
    names.dedup();
    names
}

common::kernel_args! {
    /// `min_max_<s>_f32x4(const float* x, MinMax* partials, unsigned* done, float* params,
    /// index_t n)`: MinMax is two floats.
    fn min_max_f32x4(
        x: &CudaSlice<f32>,
        partials: &mut CudaSlice<f32>,
        done: &mut CudaSlice<u32>,
        params: &mut CudaSlice<f32>,
        n: u64,
    );
    /// `quantize_<s>[_reverse]_f32x4(const float* x, unsigned char* q, const float* params,
    /// index_t n)`: q as bytes, i8 or u8.
    fn quantize_f32x4<Q>(x: &CudaSlice<f32>, q: &mut CudaSlice<Q>, params: &CudaSlice<f32>, n: u64);
    /// `dequantize_<i8|u8>x4(const Q* q, float* y, const float* params, index_t n)`
    fn dequantize_x4<Q>(q: &CudaSlice<Q>, y: &mut CudaSlice<f32>, params: &CudaSlice<f32>, n: u64);
}

/// The kernels of `quantize.cu`, loaded for one GPU.
pub struct Quantize {
    kernels: KernelSet,
    sms: u32,
}

/// One version set up for one size: its kernels and launch shapes, and the scratch buffers it
/// keeps between launches (block partials, a counter).
pub struct QuantizePlan<'a> {
    scheme: Scheme,
    version: Version,
    n: usize,
    /// (kernel, shape) per launch, in order; the last is the one the table shows.
    launches: Vec<(&'a Kernel, LaunchShape)>,
    /// MinMax per block of the reduction (two floats each).
    partials: CudaSlice<f32>,
    /// two_pass: blocks done with pass 1 (the last resets it). fused: arrivals at the barrier,
    /// which only grows.
    counter: CudaSlice<u32>,
    fused_launches: u32,
    fused_chunk: u64,
}

impl Quantize {
    pub fn load(gpu: &Gpu) -> Result<Self> {
        Ok(Self {
            kernels: KernelSet::load_build(gpu, &crate::quantize_build())?,
            sms: gpu.info.sms,
        })
    }

    /// Blocks of a grid-stride kernel: one wave, never more than there are tiles of 4 x 4
    /// elements per thread, at least one.
    fn wave(&self, n: usize) -> u32 {
        let tiles = (n / 4).div_ceil(4 * THREADS as usize).max(1);
        (self.sms * BLOCKS_PER_SM).min(tiles as u32)
    }

    /// Sets up `version` of `scheme` for a tensor of `n` elements.
    pub fn plan(
        &self,
        gpu: &Gpu,
        scheme: Scheme,
        version: Version,
        n: usize,
    ) -> Result<QuantizePlan<'_>> {
        if n == 0 {
            bail!("quantize: the tensor is empty");
        }
        let functions = version.functions(scheme);
        let (launches, blocks, fused_chunk) = match version {
            Version::TwoPass | Version::TwoPassReverse => {
                let shape = LaunchShape::linear(self.wave(n), THREADS);
                let launches = functions
                    .iter()
                    .map(|f| Ok((self.kernels.get(f)?, shape)))
                    .collect::<Result<Vec<_>>>()?;
                (launches, shape.grid.0, 0)
            }
            Version::Fused => {
                let kernel = self.kernels.get(&functions[0])?;
                let mut shape = LaunchShape {
                    grid: (1, 1, 1),
                    block: (FUSED_THREADS, 1, 1),
                    dynamic_shared_bytes: FUSED_SHARED_BYTES,
                };
                // Raises the kernel's shared-memory limit, which the occupancy query reads.
                kernel.config(&shape)?;
                let per_sm = kernel.func.occupancy_max_active_blocks_per_multiprocessor(
                    FUSED_THREADS,
                    FUSED_SHARED_BYTES as usize,
                    None,
                )?;
                if per_sm == 0 {
                    return Err(Refused(
                        "the fused kernel's block does not fit on an SM of this GPU".into(),
                    )
                    .into());
                }
                shape.grid.0 = per_sm * self.sms;
                let chunk = (n / 4).div_ceil(shape.grid.0 as usize) as u64;
                (vec![(kernel, shape)], shape.grid.0, chunk)
            }
        };
        Ok(QuantizePlan {
            scheme,
            version,
            n,
            launches,
            partials: gpu.stream.alloc_zeros::<f32>(2 * blocks as usize)?,
            counter: gpu.stream.alloc_zeros::<u32>(1)?,
            fused_launches: 0,
            fused_chunk,
        })
    }
}

impl<'a> QuantizePlan<'a> {
    /// The kernel and shape the table shows: the quantize pass (or the fused kernel).
    pub fn kernel(&self) -> (&'a Kernel, LaunchShape) {
        let (kernel, shape) = self.launches[self.launches.len() - 1];
        (kernel, shape)
    }

    /// Quantizes `x` into `q` (i8 for symmetric, u8 for asymmetric) and writes the scale and
    /// zero point into `params` (`[scale, zero_point]`).
    pub fn launch<Q: Element>(
        &mut self,
        gpu: &Gpu,
        x: &CudaSlice<f32>,
        q: &mut CudaSlice<Q>,
        params: &mut CudaSlice<f32>,
    ) -> Result<()> {
        let n = self.n;
        let tensors = [("x", x.len()), ("q", q.len())];
        check_lengths("quantize", n, tensors, params.len())?;
        self.scheme
            .check_storage::<Q>(format_args!("quantize_{}", self.scheme.name()))?;
        // The kernels take q as bytes (unsigned char*): i8 and u8 are both one byte, and the
        // pointer is all a launch passes.
        let n64 = n as u64;
        match self.version {
            Version::TwoPass | Version::TwoPassReverse => {
                let (reduce, shape) = self.launches[0];
                let (partials, counter) = (&mut self.partials, &mut self.counter);
                let p = &mut *params;
                // SAFETY: x holds n floats (checked above), partials two floats per block of
                // this grid, the counter is 0 between launches (the last block resets it) and
                // params holds 2 floats.
                unsafe { min_max_f32x4(gpu, reduce, &shape, x, partials, counter, p, n64) }?;
                let (pass2, shape) = self.launches[1];
                // SAFETY: x and q hold n elements (checked above), params 2.
                unsafe { quantize_f32x4(gpu, pass2, &shape, x, q, &*params, n64) }?;
            }
            Version::Fused => {
                let (kernel, shape) = self.launches[0];
                self.fused_launches += 1;
                let target = self
                    .fused_launches
                    .checked_mul(shape.grid.0)
                    .ok_or_else(|| anyhow::anyhow!("the arrival counter would overflow"))?;
                let mut launch = gpu.stream.launch_builder(&kernel.func);
                launch
                    .arg(x)
                    .arg(q)
                    .arg(&mut self.partials)
                    .arg(&mut self.counter)
                    .arg(&mut *params)
                    .arg(&n64)
                    .arg(&self.fused_chunk)
                    .arg(&target);
                // SAFETY: matches quantize_<s>_fused_f32x4(const float* x, unsigned char* q,
                // MinMax* partials (two floats per block), unsigned* arrivals (grid per
                // earlier launch), float* params, index_t n, index_t chunk, unsigned target).
                // A cooperative launch fails rather than run with blocks that are not resident,
                // which would otherwise wait at the barrier forever; `kernel_args!` launches
                // only the ordinary way, so this one pushes its arguments itself.
                unsafe { launch.launch_cooperative(kernel.config(&shape)?) }?;
            }
        }
        Ok(())
    }
}

/// Dequantization planned for one size: its kernel and launch shape.
pub struct DequantizePlan<'a> {
    pub kernel: &'a Kernel,
    pub shape: LaunchShape,
    scheme: Scheme,
    n: usize,
}

impl Quantize {
    /// Plans the dequantization of `n` elements of `scheme`'s storage: a block per 256 words
    /// of q (4 bytes, one float4 of y, per thread; see the kernel for why not a wave of
    /// grid-stride blocks). The grid is capped at 2^31 - 1 blocks (the kernel's loop takes the
    /// rest).
    pub fn plan_dequantize(&self, scheme: Scheme, n: usize) -> Result<DequantizePlan<'_>> {
        if n == 0 {
            bail!("dequantize: the tensor is empty");
        }
        let tiles = (n / 4)
            .div_ceil(THREADS as usize)
            .clamp(1, i32::MAX as usize);
        Ok(DequantizePlan {
            kernel: self.kernels.get(&dequantize_function(scheme))?,
            shape: LaunchShape::linear(tiles as u32, THREADS),
            scheme,
            n,
        })
    }
}

impl DequantizePlan<'_> {
    /// `y = (q - zero_point) * scale` with `params = [scale, zero_point]`; q is i8 for the
    /// symmetric scheme, u8 for the asymmetric one.
    pub fn launch<Q: Element>(
        &self,
        gpu: &Gpu,
        q: &CudaSlice<Q>,
        params: &CudaSlice<f32>,
        y: &mut CudaSlice<f32>,
    ) -> Result<()> {
        let n = self.n;
        let tensors = [("q", q.len()), ("y", y.len())];
        check_lengths("dequantize", n, tensors, params.len())?;
        self.scheme.check_storage::<Q>(format_args!("dequantize"))?;
        // SAFETY: q and y hold n elements and params 2 (checked above).
        unsafe { dequantize_x4(gpu, self.kernel, &self.shape, q, y, params, n as u64) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use common::gpu::tile::Violations;

    #[test]
    fn the_fused_block_fits_an_h100() {
        let mut v = Violations::new("quantize fused");
        v.shared_bytes(FUSED_SHARED_BYTES as usize);
        v.require(
            FUSED_THREADS.is_multiple_of(32) && THREADS.is_multiple_of(32),
            || "blocks of whole warps".into(),
        );
        assert_eq!(v.into_lines(), Vec::<String>::new());
    }
}
