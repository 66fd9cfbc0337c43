//! Day 0: vector addition. The launchers for `vector_add.cu`: each version's launch
//! configuration (step 1 of the lesson) and a typed, size-checked launch (step 2), and the CPU
//! reference the check compares with ([`reference`]).

pub mod reference;

use anyhow::{Result, bail};
use common::gpu::kernel_build::KernelBuild;
use common::gpu::nvrtc::KernelSource;
use common::{Gpu, Kernel, LaunchShape};
use cudarc::driver::CudaSlice;

pub const SOURCE: KernelSource = common::kernel_source!("vector_add.cu");

/// What the day compiles: every version's kernel for the GPU's own architecture.
pub fn kernel_builds() -> Vec<KernelBuild> {
    vec![KernelBuild::device(
        SOURCE,
        Version::ALL.iter().map(|v| v.function()),
    )]
}

common::test_kernel_builds!();

/// Threads per block for every version: a multiple of the 32-thread warp, small enough that
/// 8 blocks fill an SM's 2048 threads.
const THREADS: u32 = 256;

common::versions! {
    /// The kernel versions, in the order the table shows them.
    pub enum Version {
        Naive => "naive",
        Vec4 => "vec4",
        GridStride => "grid_stride",
    }
}

impl Version {
    /// The CUDA function in `vector_add.cu`.
    pub fn function(self) -> &'static str {
        match self {
            Version::Naive => "vector_add_f32",
            Version::Vec4 => "vector_add_f32x4",
            Version::GridStride => "vector_add_grid_stride_f32x4",
        }
    }
}

common::kernel_args! {
    /// Every version's kernel: `(const float* a, const float* b, float* out, index_t n)`.
    fn vector_add(a: &CudaSlice<f32>, b: &CudaSlice<f32>, out: &mut CudaSlice<f32>, n: u64);
}

/// The day's kernels, compiled and loaded for one GPU.
pub struct VectorAdd {
    kernels: Vec<Kernel>,
    sms: u32,
}

impl VectorAdd {
    pub fn load(gpu: &Gpu) -> Result<Self> {
        let module = gpu.load(&SOURCE)?;
        let kernels = Version::ALL
            .iter()
            .map(|v| module.kernel(gpu, v.function()))
            .collect::<Result<_>>()?;
        Ok(Self {
            kernels,
            sms: gpu.info.sms,
        })
    }

    pub fn kernel(&self, version: Version) -> &Kernel {
        &self.kernels[version as usize]
    }

    /// Step 1, the launch configuration of each version for `n` elements.
    pub fn shape(&self, version: Version, n: usize) -> LaunchShape {
        // Saturates rather than wraps, so an impossible grid is refused by `Kernel::config`.
        let blocks_for = |threads_needed: usize| {
            threads_needed
                .div_ceil(THREADS as usize)
                .min(u32::MAX as usize) as u32
        };
        match version {
            Version::Naive => LaunchShape::linear(blocks_for(n), THREADS),
            Version::Vec4 => LaunchShape::linear(blocks_for(n / 4 + 1), THREADS),
            // One full wave: 2048 resident threads per SM / 256 = 8 blocks per SM, and never
            // more blocks than there is work for.
            Version::GridStride => {
                let wave = self.sms * (2048 / THREADS);
                LaunchShape::linear(wave.min(blocks_for(n / 4 + 1)), THREADS)
            }
        }
    }

    /// Step 2, the launcher: `out = a + b` with `version`, enqueued on the GPU's stream.
    pub fn launch(
        &self,
        gpu: &Gpu,
        version: Version,
        a: &CudaSlice<f32>,
        b: &CudaSlice<f32>,
        out: &mut CudaSlice<f32>,
    ) -> Result<()> {
        let n = out.len();
        if n == 0 || a.len() != n || b.len() != n {
            bail!(
                "vector_add: inputs of {} and {} elements and an output of {n}: lengths must be \
                 equal and non-zero",
                a.len(),
                b.len()
            );
        }
        let shape = self.shape(version, n);
        // SAFETY: a, b and out hold n floats each (checked above), and every version's kernel
        // touches only the indices below n.
        unsafe { vector_add(gpu, self.kernel(version), &shape, a, b, out, n as u64) }?;
        Ok(())
    }
}
