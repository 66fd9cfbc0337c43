//! A loaded kernel with the attributes every table prints, and its launch shape.

use std::fmt;

use anyhow::{Context, Result, bail};
use std::sync::Arc;

use cudarc::driver::{CudaFunction, CudaModule, LaunchConfig, sys::CUfunction_attribute};
use serde::{Deserialize, Serialize};

use crate::gpu::Gpu;
use crate::gpu::kernel_build::{KernelBuild, Target, first_runnable};
use crate::gpu::nvrtc::{self, Compiled, KernelSource};

/// What the compiler gave a kernel: the resources that decide how many of its blocks share
/// an SM.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct KernelAttrs {
    pub registers: u32,
    pub static_shared_bytes: u32,
    /// Per-thread local memory: register spills and arrays indexed at run time.
    pub local_bytes: u32,
    /// Spill stores + loads from ptxas's report (None if the report did not say).
    pub spill_bytes: Option<u32>,
    pub max_threads_per_block: u32,
}

/// A kernel ready to launch.
pub struct Kernel {
    pub name: String,
    pub func: CudaFunction,
    pub attrs: KernelAttrs,
    max_threads_per_sm: u32,
    max_shared_optin: u32,
}

/// Grid, block and dynamic shared memory of one launch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LaunchShape {
    pub grid: (u32, u32, u32),
    pub block: (u32, u32, u32),
    pub dynamic_shared_bytes: u32,
}

impl LaunchShape {
    /// A 1-D launch of `blocks` blocks of `threads` threads, no dynamic shared memory.
    pub fn linear(blocks: u32, threads: u32) -> Self {
        Self {
            grid: (blocks, 1, 1),
            block: (threads, 1, 1),
            dynamic_shared_bytes: 0,
        }
    }

    pub fn threads_per_block(&self) -> u32 {
        self.block.0 * self.block.1 * self.block.2
    }
}

impl fmt::Display for LaunchShape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let dims = |(x, y, z): (u32, u32, u32)| match (y, z) {
            (1, 1) => format!("{x}"),
            (_, 1) => format!("{x}x{y}"),
            _ => format!("{x}x{y}x{z}"),
        };
        write!(f, "{} x {}", dims(self.grid), dims(self.block))?;
        if self.dynamic_shared_bytes > 0 {
            write!(f, " +{}B", self.dynamic_shared_bytes)?;
        }
        Ok(())
    }
}

impl Kernel {
    pub(crate) fn new(
        gpu: &Gpu,
        name: &str,
        func: CudaFunction,
        spill_bytes: Option<u32>,
    ) -> Result<Self> {
        let get = |a: CUfunction_attribute| -> Result<u32> { Ok(func.get_attribute(a)? as u32) };
        let attrs = KernelAttrs {
            registers: get(CUfunction_attribute::CU_FUNC_ATTRIBUTE_NUM_REGS)?,
            static_shared_bytes: get(CUfunction_attribute::CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES)?,
            local_bytes: get(CUfunction_attribute::CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES)?,
            spill_bytes,
            max_threads_per_block: get(
                CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK,
            )?,
        };
        Ok(Self {
            name: name.to_string(),
            func,
            attrs,
            max_threads_per_sm: gpu.info.max_threads_per_sm,
            max_shared_optin: gpu.info.max_shared_per_block_optin,
        })
    }

    /// Checks that `shape` can launch this kernel and returns cudarc's config for it. Raises
    /// the kernel's dynamic shared-memory limit when the shape asks for more than 48 KB.
    pub fn config(&self, shape: &LaunchShape) -> Result<LaunchConfig> {
        let threads = shape.threads_per_block();
        if threads == 0 || threads > self.attrs.max_threads_per_block {
            bail!(
                "{}: a block of {threads} threads is outside 1..={} for this kernel",
                self.name,
                self.attrs.max_threads_per_block
            );
        }
        let (gx, gy, gz) = shape.grid;
        if gx == 0 || gy == 0 || gz == 0 || gy > 65535 || gz > 65535 || gx > i32::MAX as u32 {
            bail!(
                "{}: grid {:?} is outside the device's limits",
                self.name,
                shape.grid
            );
        }
        let shared = shape.dynamic_shared_bytes;
        self.allow_dynamic_shared(shared)?;
        Ok(LaunchConfig {
            grid_dim: shape.grid,
            block_dim: shape.block,
            shared_mem_bytes: shared,
        })
    }

    /// Raises the kernel's dynamic shared-memory limit to `shared` bytes where the default
    /// does not allow them: by default a block may have 48 KB of shared memory in all, static
    /// and dynamic together, and both launches and occupancy queries hold the kernel to that.
    fn allow_dynamic_shared(&self, shared: u32) -> Result<()> {
        let total = shared + self.attrs.static_shared_bytes;
        if total <= 48 * 1024 {
            return Ok(());
        }
        if total > self.max_shared_optin {
            bail!(
                "{}: {shared} bytes of dynamic shared memory (and {} static) exceed the \
                 device's {} a block",
                self.name,
                self.attrs.static_shared_bytes,
                self.max_shared_optin
            );
        }
        self.func.set_attribute(
            CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
            shared as i32,
        )?;
        Ok(())
    }

    /// Blocks of `threads` threads and `shared` bytes of dynamic shared memory that one SM
    /// holds at once (0 when the kernel cannot run with them at all).
    pub fn blocks_per_sm(&self, threads: u32, shared: u32) -> Result<u32> {
        self.allow_dynamic_shared(shared)?;
        Ok(self.func.occupancy_max_active_blocks_per_multiprocessor(
            threads,
            shared as usize,
            None,
        )?)
    }

    /// Theoretical occupancy of `shape`: resident threads per SM over the SM's maximum.
    pub fn occupancy(&self, shape: &LaunchShape) -> Result<f64> {
        let threads = shape.threads_per_block();
        let blocks = self.blocks_per_sm(threads, shape.dynamic_shared_bytes)?;
        Ok((blocks * threads) as f64 / self.max_threads_per_sm as f64)
    }

    /// Thread-block clusters of this kernel (whose cluster shape is compiled in with
    /// `__cluster_dims__`) that can be resident at once for `shape`'s block and shared memory.
    pub fn max_active_clusters(
        &self,
        shape: &LaunchShape,
        stream: &cudarc::driver::CudaStream,
    ) -> Result<u32> {
        let config = self.config(shape)?;
        Ok(self.func.occupancy_max_active_clusters(config, stream)?)
    }

    /// One line for the console: `vector_add_f32: 16 regs, 0 B smem, 0 B local, 0 B spill`.
    pub fn describe(&self) -> String {
        let a = &self.attrs;
        let spill = a
            .spill_bytes
            .map_or_else(|| "?".to_string(), |s| s.to_string());
        format!(
            "{}: {} regs, {} B static smem, {} B local, {spill} B spill",
            self.name, a.registers, a.static_shared_bytes, a.local_bytes
        )
    }
}

/// The kernels of one file, by CUDA function name: for days with many instantiations
/// (one per dtype, per tile size).
pub struct KernelSet {
    kernels: std::collections::HashMap<String, Kernel>,
}

impl KernelSet {
    /// Compiles `build` for `gpu` and loads each of its functions; an error on a GPU that
    /// cannot run it (the caller asks only for the builds its GPU takes).
    pub fn load_build(gpu: &Gpu, build: &KernelBuild) -> Result<Self> {
        let Some(module) = gpu.load_build(build)? else {
            bail!(
                "{} is not for {} ({})",
                build.source.file_name,
                gpu.info.name,
                gpu.info.arch
            );
        };
        let kernels = build
            .functions
            .iter()
            .map(|name| Ok((name.clone(), module.kernel(gpu, name)?)))
            .collect::<Result<_>>()?;
        Ok(Self { kernels })
    }

    /// Loads the first of `builds` that `gpu` runs ([`first_runnable`]: of
    /// `KernelBuild::hopper_or_portable`'s, the sm_90a build on Hopper and the portable one
    /// elsewhere), and says whether that was a Hopper build.
    pub fn load_first_runnable(gpu: &Gpu, builds: Vec<KernelBuild>) -> Result<(Self, bool)> {
        let Some(build) = first_runnable(builds, &gpu.info.arch) else {
            bail!(
                "no kernel build runs on {} ({})",
                gpu.info.name,
                gpu.info.arch
            );
        };
        let hopper = build.target == Target::Hopper;
        Ok((Self::load_build(gpu, &build)?, hopper))
    }

    /// Compiles `source` for `gpu` and loads each of `names`.
    pub fn load(
        gpu: &Gpu,
        source: &crate::gpu::nvrtc::KernelSource,
        names: impl IntoIterator<Item = String>,
    ) -> Result<Self> {
        let module = gpu.load(source)?;
        let kernels = names
            .into_iter()
            .map(|name| Ok((name.clone(), module.kernel(gpu, &name)?)))
            .collect::<Result<_>>()?;
        Ok(Self { kernels })
    }

    /// The kernel named `name`; a name that was not loaded is a bug in the day's launcher.
    pub fn get(&self, name: &str) -> Result<&Kernel> {
        self.kernels
            .get(name)
            .ok_or_else(|| anyhow::anyhow!("kernel `{name}` was not loaded"))
    }
}

/// Loading kernel files: here, above the device layer, so that `gpu` needs nothing of
/// `kernel` or `nvrtc`.
impl Gpu {
    /// Compiles `build` for this GPU and loads it; None when this GPU cannot run it (an
    /// sm_90a build on another GPU).
    pub fn load_build(&self, build: &KernelBuild) -> Result<Option<Module>> {
        let Some(arch) = build.arch_on(&self.info.arch) else {
            return Ok(None);
        };
        self.load_for_arch(&build.source, &arch, &build.option_args())
            .map(Some)
    }

    /// Compiles a day's kernel file for this device and loads it.
    pub fn load(&self, source: &KernelSource) -> Result<Module> {
        self.load_for_arch(source, &self.info.arch.clone(), &[])
    }

    /// Like [`Gpu::load`] with an explicit target (`sm_90a` for wgmma) and extra NVRTC options.
    pub fn load_for_arch(
        &self,
        source: &KernelSource,
        arch: &str,
        extra_options: &[&str],
    ) -> Result<Module> {
        let compiled = nvrtc::compile(source, arch, extra_options)?;
        let image = cudarc::nvrtc::Ptx::from_binary(compiled.cubin.clone());
        let module = self
            .ctx
            .load_module(image)
            .with_context(|| format!("loading the CUBIN of {}", source.file_name))?;
        Ok(Module { module, compiled })
    }
}

/// A loaded kernel file: the driver module and what the compiler said.
pub struct Module {
    pub module: Arc<CudaModule>,
    pub compiled: Compiled,
}

impl Module {
    /// Looks up a kernel by its `extern "C"` name and reads its attributes.
    pub fn kernel(&self, gpu: &Gpu, name: &str) -> Result<Kernel> {
        let func = self
            .module
            .load_function(name)
            .with_context(|| format!("kernel `{name}` is not in {}", self.compiled.arch))?;
        Kernel::new(gpu, name, func, self.compiled.spills.get(name).copied())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn launch_shapes_print_compactly() {
        assert_eq!(LaunchShape::linear(256, 128).to_string(), "256 x 128");
        let shape = LaunchShape {
            grid: (8, 4, 1),
            block: (32, 8, 1),
            dynamic_shared_bytes: 1024,
        };
        assert_eq!(shape.to_string(), "8x4 x 32x8 +1024B");
        assert_eq!(shape.threads_per_block(), 256);
    }
}
