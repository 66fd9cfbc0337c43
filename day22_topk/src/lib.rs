//! Day 22: per-row top-k. For each row of a `rows x width` matrix (f32 or bf16), the `k`
//! largest values in descending order and their column indices, as LLM sampling needs for
//! every token. Three versions, one `.cu` each: [`sort_row`] (a block sorts the row chunk by
//! chunk, the baseline), [`warp_bitonic`] (a warp keeps a sorted top-k in shared memory and
//! merges the few elements that beat its k-th, k <= 128) and [`radix_select`] (the k-th
//! largest found digit by digit with histograms, then the k gathered and sorted).
//!
//! # The defined order
//!
//! Every version and the CPU reference ([`reference`]) rank elements the same
//! way: by the order-preserving unsigned key of the stored float (sign bit set for a
//! positive, all bits flipped for a negative), so `-0.0` ranks just below `+0.0` and
//! subnormals rank by value (keys are integers: nothing is flushed to zero); every NaN gets
//! the largest key, above `+inf`, as `torch.topk` treats NaN as largest, and is returned with
//! its own bits; equal keys go to the lower column first. Values are the stored elements at the
//! returned columns, so the check is bit for bit and index for index.
//!
//! Indices are `u32`: a row has at most 2^20 columns, so 4 bytes hold any index, and they halve
//! the index traffic of torch's `int64`.

use anyhow::{Result, bail};
use common::family::ops;
use common::gpu::kernel::KernelSet;
use common::gpu::kernel_build::KernelBuild;
use common::gpu::nvrtc::KernelSource;
use common::session::Refused;
use common::{Gpu, UsageError, sizes};
use cudarc::driver::CudaSlice;

use crate::reference::TopkValue;

pub mod radix_select;
pub mod reference;
pub mod run;
pub mod sort_row;
pub mod warp_bitonic;

/// The kernels: what the versions share, then each version's file (NVRTC is given only
/// `common/cuda/` as headers, so the shared part is put in front rather than included).
pub const SOURCE: KernelSource = common::kernel_source!(
    "topk.cu" = [
        "topk.cuh",
        "sort_row.cu",
        "warp_bitonic.cu",
        "radix_select.cu"
    ]
);

/// What the day compiles: every kernel, for the GPU's own architecture. The loader compiles the
/// same, the compile test checks this list, and `cargo xtask bundle` compiles it ahead of time for
/// the GPU host's kernel cache.
pub fn kernel_builds() -> Vec<KernelBuild> {
    vec![KernelBuild::device(SOURCE, all_functions())]
}

common::test_kernel_builds!();

/// Version names, in table order.
pub const VERSIONS: &[&str] = &["sort_row", "warp_bitonic", "radix_select"];

/// The widest row: column indices take 20 bits of a rank (`topk.cuh`).
pub const MAX_WIDTH: usize = 1 << 20;
/// The largest k: the sorts of `sort_row` and `radix_select` hold 1024 ranks.
pub const MAX_K: usize = 1024;

/// One top-k problem's sizes, checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    pub rows: usize,
    pub width: usize,
    pub k: usize,
}

impl Shape {
    /// Refuses zero sizes, rows wider than [`MAX_WIDTH`], k above [`MAX_K`] or above the width,
    /// and a matrix too large to address.
    pub fn new(rows: usize, width: usize, k: usize) -> Result<Self, UsageError> {
        sizes::at_least_one("--rows", rows)?;
        sizes::at_least_one("--width", width)?;
        sizes::at_least_one("--k", k)?;
        sizes::at_most("--width", width, MAX_WIDTH)?;
        sizes::at_most("--k", k, MAX_K)?;
        if k > width {
            return Err(UsageError::new(format!(
                "--k {k} is more than the row's --width {width}: a row has only {width} elements \
                 to choose from"
            )));
        }
        sizes::product("--rows x --width", &[rows, width, 4])?;
        Ok(Self { rows, width, k })
    }

    pub fn elements(&self) -> usize {
        self.rows * self.width
    }

    /// Values (and indices) written: `rows * k`.
    pub fn outputs(&self) -> usize {
        self.rows * self.k
    }

    /// k rounded up to a power of two: the size of the kernels' sorted lists.
    pub fn padded_k(&self) -> usize {
        self.k.next_power_of_two()
    }

    /// Least traffic of one run: the input read once, values and u32 indices written once.
    pub fn bytes_per_run(&self, element_bytes: usize) -> u64 {
        (self.elements() * element_bytes + self.outputs() * (element_bytes + 4)) as u64
    }

    /// The key the report and `peers/topk.py` share: `topk/f32/4096x32768/k64`.
    pub fn key(&self, dtype: &str) -> String {
        format!("topk/{dtype}/{}x{}/k{}", self.rows, self.width, self.k)
    }
}

/// How one version runs on one shape: the kernel the table describes is the one that reads
/// the whole input; the launch enqueues one top-k of the input into values and indices
/// (`rows x k` each).
pub type Plan<'a, T> = ops::Plan<
    'a,
    dyn FnMut(&CudaSlice<T>, &mut CudaSlice<T>, &mut CudaSlice<u32>) -> Result<()> + 'a,
>;

pub struct TopK {
    kernels: KernelSet,
}

impl TopK {
    pub fn load(gpu: &Gpu) -> Result<Self> {
        Ok(Self {
            kernels: KernelSet::load(gpu, &SOURCE, all_functions())?,
        })
    }

    /// How `version` runs on `shape` for storage type `T`, or [`Refused`] (warp_bitonic for
    /// k > 128, a grid or scratch buffer beyond the device).
    pub fn plan<'a, T: TopkValue>(
        &'a self,
        gpu: &'a Gpu,
        version: &str,
        shape: Shape,
    ) -> Result<Plan<'a, T>> {
        // `Shape`'s fields are public, so a shape may not have come through `Shape::new`; the
        // kernels' shared arrays and 20-bit column ranks hold only what it accepts.
        let shape = Shape::new(shape.rows, shape.width, shape.k)?;
        match version {
            "sort_row" => sort_row::plan(&self.kernels, gpu, shape),
            "warp_bitonic" => warp_bitonic::plan(&self.kernels, gpu, shape),
            "radix_select" => radix_select::plan(&self.kernels, gpu, shape),
            other => bail!("day22 has no version `{other}`"),
        }
    }
}

/// Every CUDA function of [`SOURCE`].
pub fn all_functions() -> Vec<String> {
    let mut names = sort_row::functions();
    names.extend(warp_bitonic::functions());
    names.extend(radix_select::functions());
    names
}

/// The storage types day 22 takes, by kernel-name suffix.
pub(crate) const DTYPES: [&str; 2] = ["f32", "bf16"];

/// Elements per 16-byte load of a `T` (4 f32, 8 bf16), or 1 when `width` is not a multiple of
/// that (rows would then start off a 16-byte boundary).
pub fn vector_width<T: TopkValue>(width: usize) -> usize {
    let vec = 16 / T::DTYPE.size();
    if width.is_multiple_of(vec) { vec } else { 1 }
}

/// `blocks` as a grid's x, or [`Refused`] past its 2^31 - 1.
fn grid_x(blocks: usize) -> Result<u32> {
    u32::try_from(blocks)
        .ok()
        .filter(|&b| b <= i32::MAX as u32)
        .ok_or_else(|| Refused(format!("{blocks} blocks exceed the grid's 2^31 - 1 in x")).into())
}

/// How a version cuts long rows into segments, one per warp or block: enough of them for
/// `per_sm` on every SM when rows are few, each at least `min_len` long.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Segmenting {
    pub per_sm: usize,
    pub min_len: usize,
}

impl Segmenting {
    /// (segment length, segments per row) of `shape`'s rows, read `vec` elements at a time,
    /// on a GPU of `sms` SMs.
    pub fn split(self, shape: Shape, vec: usize, sms: usize) -> (usize, usize) {
        let parts = (sms * self.per_sm).div_ceil(shape.rows);
        segments(shape.width, vec, parts, self.min_len)
    }
}

/// A row cut into about `parts` segments whose length is a multiple of `vec` and at least
/// `min_len`: (segment length, segments).
fn segments(width: usize, vec: usize, parts: usize, min_len: usize) -> (usize, usize) {
    let len = width
        .div_ceil(parts.max(1))
        .max(min_len)
        .next_multiple_of(vec);
    (len, width.div_ceil(len))
}

fn check_buffers<T>(
    x: &CudaSlice<T>,
    values: &CudaSlice<T>,
    indices: &CudaSlice<u32>,
    shape: Shape,
) -> Result<()> {
    if x.len() != shape.elements()
        || values.len() != shape.outputs()
        || indices.len() != shape.outputs()
    {
        bail!(
            "topk: x of {}, values of {} and indices of {} elements do not fit {} rows of {} \
             with k {}",
            x.len(),
            values.len(),
            indices.len(),
            shape.rows,
            shape.width,
            shape.k
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use half::bf16;

    #[test]
    fn shapes_are_checked() {
        assert!(Shape::new(1, 1, 1).is_ok());
        assert!(Shape::new(16, MAX_WIDTH, MAX_K).is_ok());
        assert!(Shape::new(0, 5, 1).is_err());
        assert!(Shape::new(1, 0, 1).is_err());
        assert!(Shape::new(1, 5, 0).is_err());
        assert!(Shape::new(1, 5, 6).is_err());
        assert!(Shape::new(1, MAX_WIDTH + 1, 1).is_err());
        assert!(Shape::new(1, 4096, MAX_K + 1).is_err());
        assert!(Shape::new(usize::MAX, 2, 1).is_err());
    }

    #[test]
    fn bytes_keys_and_vectors() {
        let shape = Shape::new(4096, 32768, 64).unwrap();
        assert_eq!(shape.bytes_per_run(4), 4 * 4096 * 32768 + 8 * 4096 * 64);
        assert_eq!(shape.key("f32"), "topk/f32/4096x32768/k64");
        assert_eq!(shape.padded_k(), 64);
        assert_eq!(Shape::new(1, 100, 50).unwrap().padded_k(), 64);
        assert_eq!(vector_width::<f32>(1000), 4);
        assert_eq!(vector_width::<f32>(1001), 1);
        assert_eq!(vector_width::<bf16>(128_256), 8);
        assert_eq!(vector_width::<bf16>(1004), 1);
    }

    #[test]
    fn segments_cover_the_row_in_whole_vectors() {
        for (width, vec, parts, min_len) in [
            (128_256, 8, 66, 2048),
            (1 << 20, 4, 33, 8192),
            (33, 1, 7, 1),
            (1, 4, 100, 64),
        ] {
            let (len, count) = segments(width, vec, parts, min_len);
            assert!(len.is_multiple_of(vec) && len >= min_len.min(width));
            assert!(
                count * len >= width && (count - 1) * len < width,
                "{width} {len}"
            );
        }
    }
}
