//! Launchers for `quantize.cu`: per-tensor symmetric (int8) and asymmetric (uint8)
//! quantization in three versions, and dequantization.

use anyhow::{Result, bail};
use common::gpu::kernel::KernelSet;
use common::session::Refused;
use common::{Element, Gpu, Kernel, LaunchShape};
use cudarc::driver::{CudaSlice, PushKernelArg};

use crate::QUANTIZE_SOURCE;

/// Threads per block of the grid-stride kernels, and their blocks per SM (one full wave).
const THREADS: u32 = 256;
const BLOCKS_PER_SM: u32 = 8;
/// The fused kernel's block (FUSED_THREADS) and its shared-memory cache (FUSED_S steps of one
/// float4 per thread), as `quantize.cu` defines them.
const FUSED_THREADS: u32 = 512;
const FUSED_SHARED_STEPS: u32 = 12;
const FUSED_SHARED_BYTES: u32 = FUSED_SHARED_STEPS * FUSED_THREADS * 16;

/// Which per-tensor scheme.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    /// int8 in [-127, 127], zero point 0.
    Sym,
    /// uint8 in [0, 255] with a zero point.
    Asym,
}

impl Scheme {
    pub const ALL: [Scheme; 2] = [Scheme::Sym, Scheme::Asym];

    /// As in kernel names and problem keys (`quantize_sym`).
    pub fn name(self) -> &'static str {
        match self {
            Scheme::Sym => "sym",
            Scheme::Asym => "asym",
        }
    }

    /// The storage type of q: `i8` or `u8`.
    pub fn storage(self) -> &'static str {
        match self {
            Scheme::Sym => "i8",
            Scheme::Asym => "u8",
        }
    }
}

/// The quantize versions, in the order the table shows them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    TwoPass,
    TwoPassReverse,
    Fused,
}

impl Version {
    pub const ALL: [Version; 3] = [Version::TwoPass, Version::TwoPassReverse, Version::Fused];

    pub fn name(self) -> &'static str {
        match self {
            Version::TwoPass => "two_pass",
            Version::TwoPassReverse => "two_pass_reverse",
            Version::Fused => "fused",
        }
    }

    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|v| v.name() == name)
    }

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
            kernels: KernelSet::load(gpu, &QUANTIZE_SOURCE, all_functions())?,
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
        if x.len() != n || q.len() != n || params.len() != 2 {
            bail!(
                "quantize: planned for {n} elements, given x of {}, q of {} and params of {} \
                 (2 needed)",
                x.len(),
                q.len(),
                params.len()
            );
        }
        if Q::NAME != self.scheme.storage() {
            bail!(
                "quantize_{}: q must be {}, not {}",
                self.scheme.name(),
                self.scheme.storage(),
                Q::NAME
            );
        }
        // The kernels take q as bytes (unsigned char*): i8 and u8 are both one byte, and the
        // pointer is all a launch passes.
        let n64 = n as u64;
        match self.version {
            Version::TwoPass | Version::TwoPassReverse => {
                let (reduce, shape) = self.launches[0];
                let mut launch = gpu.stream.launch_builder(&reduce.func);
                launch
                    .arg(x)
                    .arg(&mut self.partials)
                    .arg(&mut self.counter)
                    .arg(&mut *params)
                    .arg(&n64);
                // SAFETY: matches min_max_<s>_f32x4(const float* x, MinMax* partials (two
                // floats per block of this grid), unsigned* done (0 between launches),
                // float* params, index_t n).
                unsafe { launch.launch(reduce.config(&shape)?) }?;
                let (pass2, shape) = self.launches[1];
                let mut launch = gpu.stream.launch_builder(&pass2.func);
                launch.arg(x).arg(q).arg(&*params).arg(&n64);
                // SAFETY: matches quantize_<s>[_reverse]_f32x4(const float* x, unsigned char*
                // q, const float* params, index_t n); x and q hold n elements.
                unsafe { launch.launch(pass2.config(&shape)?) }?;
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
                // which would otherwise wait at the barrier forever.
                unsafe { launch.launch_cooperative(kernel.config(&shape)?) }?;
            }
        }
        Ok(())
    }
}

/// The dequantize kernels.
impl Quantize {
    /// A block per 256 words of q (4 bytes, one float4 of y, per thread): see the kernel for
    /// why not a wave of grid-stride blocks. The grid is capped at 2^31 - 1 blocks (the
    /// kernel's loop takes the rest).
    pub fn dequantize_kernel(&self, scheme: Scheme, n: usize) -> Result<(&Kernel, LaunchShape)> {
        let tiles = (n / 4)
            .div_ceil(THREADS as usize)
            .clamp(1, i32::MAX as usize);
        Ok((
            self.kernels.get(&dequantize_function(scheme))?,
            LaunchShape::linear(tiles as u32, THREADS),
        ))
    }

    /// `y = (q - zero_point) * scale` with `params = [scale, zero_point]`; q is i8 or u8.
    pub fn dequantize<Q: Element>(
        &self,
        gpu: &Gpu,
        q: &CudaSlice<Q>,
        params: &CudaSlice<f32>,
        y: &mut CudaSlice<f32>,
    ) -> Result<()> {
        let n = y.len();
        if n == 0 || q.len() != n || params.len() != 2 {
            bail!(
                "dequantize: q of {} and y of {n} elements must be equal and non-zero, params 2 \
                 (got {})",
                q.len(),
                params.len()
            );
        }
        let scheme = match Q::NAME {
            "i8" => Scheme::Sym,
            "u8" => Scheme::Asym,
            other => bail!("dequantize: q must be i8 or u8, not {other}"),
        };
        let (kernel, shape) = self.dequantize_kernel(scheme, n)?;
        let n = n as u64;
        let mut launch = gpu.stream.launch_builder(&kernel.func);
        launch.arg(q).arg(y).arg(params).arg(&n);
        // SAFETY: matches dequantize_<i8|u8>x4(const Q* q, float* y, const float* params,
        // index_t n); q and y hold n elements.
        unsafe { launch.launch(kernel.config(&shape)?) }?;
        Ok(())
    }
}
