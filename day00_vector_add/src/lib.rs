//! Day 0: vector addition. The launchers for `vector_add.cu`: each version's launch
//! configuration (step 1 of the lesson) and a typed, size-checked launch (step 2).

use anyhow::{Result, bail};
use common::gpu::kernel_build::KernelBuild;
use common::gpu::nvrtc::KernelSource;
use common::{Gpu, Kernel, LaunchShape};
use cudarc::driver::{CudaSlice, PushKernelArg};

pub const SOURCE: KernelSource = KernelSource {
    file_name: "vector_add.cu",
    code: include_str!("vector_add.cu"),
};

/// What the day compiles: `vector_add.cu`, every version's kernel, for the GPU's own architecture.
/// The loader compiles the same, the compile test checks this list, and `cargo xtask bundle`
/// compiles it ahead of time for the GPU host's kernel cache.
pub fn kernel_builds() -> Vec<KernelBuild> {
    vec![KernelBuild::device(
        SOURCE,
        Version::ALL.iter().map(|v| v.function()),
    )]
}

/// Threads per block for every version: a multiple of the 32-thread warp, small enough that
/// 8 blocks fill an SM's 2048 threads.
const THREADS: u32 = 256;

/// The kernel versions, in the order the table shows them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    Naive,
    Vec4,
    GridStride,
}

impl Version {
    pub const ALL: [Version; 3] = [Version::Naive, Version::Vec4, Version::GridStride];

    /// The name `--kernel` takes.
    pub fn name(self) -> &'static str {
        match self {
            Version::Naive => "naive",
            Version::Vec4 => "vec4",
            Version::GridStride => "grid_stride",
        }
    }

    /// The CUDA function in `vector_add.cu`.
    pub fn function(self) -> &'static str {
        match self {
            Version::Naive => "vector_add_f32",
            Version::Vec4 => "vector_add_f32x4",
            Version::GridStride => "vector_add_grid_stride_f32x4",
        }
    }

    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|v| v.name() == name)
    }
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
        let kernel = self.kernel(version);
        let config = kernel.config(&self.shape(version, n))?;
        let n = n as u64;
        let mut launch = gpu.stream.launch_builder(&kernel.func);
        launch.arg(a).arg(b).arg(out).arg(&n);
        // SAFETY: the arguments match the kernel's signature (three float buffers of `n`
        // elements, then `index_t n`), and the grid covers exactly the indices < n.
        unsafe { launch.launch(config) }?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kernel_compiles_for_sm90_without_spilling() {
        common::testing::assert_builds_compile_without_spills(&kernel_builds());
    }

    #[test]
    fn names_round_trip() {
        for v in Version::ALL {
            assert_eq!(Version::from_name(v.name()), Some(v));
        }
        assert_eq!(Version::from_name("nope"), None);
    }
}
