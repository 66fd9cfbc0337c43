//! Day 21: 1D and 2D convolution with "same" output size (PyTorch's `padding="same"`), from
//! one thread per output to a filter in constant memory and register-blocked tiles. The
//! launchers for `conv.cu`: [`conv1d`] and [`conv2d`] plan each version on a shape; this file
//! loads the kernels and owns the constant-memory copy of the filter.

pub mod conv1d;
pub mod conv2d;
pub mod problem;
pub mod reference;
pub mod run;

use std::collections::HashMap;

use anyhow::{Result, anyhow, bail};
use common::dtype::Dtype;
use common::family::ops;
use common::gpu::kernel::Module;
use common::gpu::kernel_build::KernelBuild;
use common::gpu::nvrtc::KernelSource;
use common::session::Refused;
use common::{Element, Gpu, Kernel};
use cudarc::driver::CudaSlice;

pub use problem::{HostInputs, Op, Shape};

pub const SOURCE: KernelSource = common::kernel_source!("conv.cu");

/// What the day compiles: every kernel, for the GPU's own architecture. The loader compiles the
/// same, the compile test checks this list, and `cargo xtask bundle` compiles it ahead of time for
/// the GPU host's kernel cache.
pub fn kernel_builds() -> Vec<KernelBuild> {
    vec![KernelBuild::device(SOURCE, all_functions())]
}

common::test_kernel_builds!();

/// Version names, in table order; every op has all four.
pub const VERSIONS: &[&str] = &["naive", "smem_halo", "const_filter", "vec_regs"];

/// The storage types with kernels (math is f32 in every one).
pub const DTYPES: &[Dtype] = &[Dtype::F32, Dtype::Bf16];

/// Widest 1D filter (`vec_regs`' largest instance, `conv1d_vec_*_w31`).
pub const MAX_WIDTH_1D: usize = 31;
/// Largest 2D filter side (`KMAX` in the .cu).
pub const MAX_FILTER_2D: usize = 7;
/// Filter elements the `__constant__` copy holds (`CONST_FILTER_CAPACITY` in the .cu): 32 KB
/// of f32 plus 16 KB of bf16, within the 64 KB of constant memory a module may declare.
pub const CONST_FILTER_CAPACITY: usize = 8192;

/// How one version runs on one shape; its launch enqueues one run on `(x, w, y)`.
pub type Plan<'a, T> =
    ops::Plan<'a, dyn FnMut(&CudaSlice<T>, &CudaSlice<T>, &mut CudaSlice<T>) -> Result<()> + 'a>;

/// The day's kernels, loaded, and the module whose constant memory holds the filter of
/// `const_filter` and `vec_regs`.
pub struct Conv {
    module: Module,
    kernels: HashMap<String, Kernel>,
}

impl Conv {
    pub fn load(gpu: &Gpu) -> Result<Self> {
        let module = gpu.load(&SOURCE)?;
        let kernels = all_functions()
            .into_iter()
            .map(|name| Ok((name.clone(), module.kernel(gpu, &name)?)))
            .collect::<Result<_>>()?;
        Ok(Self { module, kernels })
    }

    /// How `version` runs on `shape`, or [`Refused`] (a grid beyond the device's limits, a
    /// filter larger than the constant copy holds).
    pub fn plan<'a, T: Element>(
        &'a self,
        gpu: &'a Gpu,
        version: &str,
        shape: &Shape,
    ) -> Result<Plan<'a, T>> {
        if !DTYPES.contains(&T::DTYPE) {
            bail!("day21 has no {} kernels", T::NAME);
        }
        match *shape {
            Shape::Conv1d { n, width } => self.plan_conv1d(gpu, version, n, width),
            Shape::Conv2d(s) => self.plan_conv2d(gpu, version, s),
        }
    }

    fn kernel(&self, name: &str) -> Result<&Kernel> {
        self.kernels
            .get(name)
            .ok_or_else(|| anyhow!("kernel `{name}` was not loaded"))
    }

    /// Copies the filter `w` into the module's `__constant__` array of its type, on the
    /// stream, so that the launch enqueued after it reads it there. Every run of a
    /// constant-memory version does this (a copy of at most 32 KB, timed with the kernel):
    /// like every other version, it is given the filter in global memory.
    fn copy_filter_to_constant<T: Element>(&self, gpu: &Gpu, w: &CudaSlice<T>) -> Result<()> {
        if w.len() > CONST_FILTER_CAPACITY {
            bail!(
                "a filter of {} elements does not fit the {CONST_FILTER_CAPACITY} of the \
                 constant copy",
                w.len()
            );
        }
        let symbol = format!("c_filter_{}", T::NAME);
        let mut global = self.module.module.get_global(&symbol, &gpu.stream)?;
        // SAFETY: the symbol is an array of CONST_FILTER_CAPACITY elements of T (`float` or
        // `bf16_t`, whose bits are half::bf16's), and w.len() is at most that (checked).
        let mut view = unsafe { global.transmute_mut::<T>(w.len()) }
            .ok_or_else(|| anyhow!("`{symbol}` is smaller than {} elements", w.len()))?;
        gpu.stream.memcpy_dtod(w, &mut view)?;
        Ok(())
    }
}

/// Refuses a filter the constant copy cannot hold, for the versions that read it there.
fn check_constant_fits(version: &str, weights: usize) -> Result<()> {
    if weights > CONST_FILTER_CAPACITY {
        return Err(Refused(format!(
            "{version} keeps the filter in constant memory, which holds {CONST_FILTER_CAPACITY} \
             elements; this one has {weights} (C_out x C_in x KH x KW)"
        ))
        .into());
    }
    Ok(())
}

/// `blocks` as a grid's x, or [`Refused`] past its 2^31 - 1.
fn grid_x(blocks: usize) -> Result<u32> {
    u32::try_from(blocks)
        .ok()
        .filter(|&b| b <= i32::MAX as u32)
        .ok_or_else(|| Refused(format!("{blocks} blocks exceed the grid's 2^31 - 1 in x")).into())
}

/// `blocks` as a grid's y or z, or [`Refused`] past 65535.
fn grid_yz(blocks: usize, what: &str) -> Result<u32> {
    u32::try_from(blocks)
        .ok()
        .filter(|&b| b <= 65535)
        .ok_or_else(|| Refused(format!("{blocks} blocks of {what} exceed the grid's 65535")).into())
}

/// The same `(x, w, y)` lengths every launcher checks before it launches.
fn check_lengths<T>(
    x: &CudaSlice<T>,
    w: &CudaSlice<T>,
    y: &CudaSlice<T>,
    lengths: (usize, usize, usize),
) -> Result<()> {
    let got = (x.len(), w.len(), y.len());
    if got != lengths {
        bail!(
            "conv: x, w and y hold {} x {} x {} elements, {} x {} x {} expected",
            got.0,
            got.1,
            got.2,
            lengths.0,
            lengths.1,
            lengths.2
        );
    }
    Ok(())
}

fn all_functions() -> Vec<String> {
    let mut names = Vec::new();
    for dtype in DTYPES {
        for version in ["naive", "smem", "const"] {
            names.push(format!("conv1d_{version}_{dtype}"));
            names.push(format!("conv2d_{version}_{dtype}"));
        }
        for bucket in conv1d::WIDTH_BUCKETS {
            names.push(conv1d::vec_function(*dtype, bucket));
        }
        for blocking in conv2d::BLOCKINGS {
            names.push(conv2d::vec_function(*dtype, blocking));
        }
        let (kh, kw) = conv2d::FIXED_FILTER;
        names.push(conv2d::vec_kernel_for(*dtype, conv2d::BLOCKINGS[0], kh, kw));
    }
    names
}

/// Elements in one 16-byte pack of `dtype`.
fn pack(dtype: Dtype) -> usize {
    16 / dtype.size()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kernel_is_built() {
        // Per dtype: 6 simple kernels, 4 conv1d width buckets, 2 conv2d blockings, one 5 x 5.
        assert_eq!(all_functions().len(), 2 * (6 + 4 + 2 + 1));
    }
}
