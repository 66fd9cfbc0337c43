//! The launchers of `reduce.cu`: sum, count, dot product and segment sum, each version's
//! plan (launch shape, the summation depth its order implies, for the tolerance: see
//! [`crate::reference`], and the buffers it writes between its kernels), and its launch.

use anyhow::{Result, bail};
use common::gpu::kernel::KernelSet;
use common::gpu::kernel_build::KernelBuild;
use common::gpu::nvrtc::KernelSource;
use common::gpu::tile::file_define;
use common::session::Refused;
use common::{Gpu, Kernel, LaunchShape, Tolerance};
use cudarc::driver::CudaSlice;

pub const SOURCE: KernelSource = common::kernel_source!("reduce.cu");

/// Threads per block of every reduction kernel but the second stage; `sum_tree_f32` gets it as
/// a define ([`build`]).
pub const THREADS: u32 = 256;
/// Threads of the one block that adds the partials.
const FINISH_THREADS: u32 = 1024;
/// Elements one block of `sum_tree_f32` reduces: two a thread.
const TREE_ELEMENTS: usize = 2 * THREADS as usize;

/// `reduce.cu`, every kernel, with the tree's block as a define.
pub fn build() -> KernelBuild {
    KernelBuild::device(SOURCE, FUNCTIONS.iter().copied()).with_options(vec![file_define(
        "REDUCE",
        "TREE_THREADS",
        THREADS as usize,
    )])
}
/// Roundings on top of a thread's own sequential adds: its accumulators (4), the tail (1), the
/// warp (5) and the block (5) shuffles, and the second stage (at most 2 + 5 + 5), rounded up.
const COMBINE_DEPTH: u64 = 32;

common::versions! {
    pub enum SumVersion { Tree => "tree", WarpShuffle => "warp_shuffle", Vec4 => "vec4" }
}
common::versions! {
    pub enum CountVersion {
        GlobalAtomic => "global_atomic",
        WarpAggregated => "warp_aggregated",
        BlockLocal => "block_local",
    }
}
common::versions! {
    pub enum DotVersion { Vec4 => "vec4" }
}
common::versions! {
    pub enum SegmentVersion { Warp => "warp", Block => "block" }
}

/// Every CUDA function of `reduce.cu`.
pub const FUNCTIONS: &[&str] = &[
    "sum_tree_f32",
    "sum_grid_stride_f32",
    "sum_grid_stride_f32x4",
    "sum_partials_f32",
    "dot_grid_stride_f32x4",
    "count_global_atomic_i32",
    "count_warp_aggregated_i32",
    "count_block_local_i32x4",
    "count_finish_u32",
    "segment_sum_warp_f32x4",
    "segment_sum_warp_f32",
    "segment_sum_block_f32x4",
    "segment_sum_block_f32",
];

common::kernel_args! {
    /// `sum_tree_f32(const float* in, float* out, index_t n)`, and the one-wave
    /// `sum_grid_stride_f32[x4](const float* in, float* partials, index_t n)`.
    fn sum_pass(input: &CudaSlice<f32>, out: &mut CudaSlice<f32>, n: u64);
    /// `dot_grid_stride_f32x4(const float* a, const float* b, float* partials, index_t n)`
    fn dot_pass(a: &CudaSlice<f32>, b: &CudaSlice<f32>, partials: &mut CudaSlice<f32>, n: u64);
    /// `sum_partials_f32(const float* partials, float* out, unsigned count)`
    fn sum_partials_f32(partials: &CudaSlice<f32>, out: &mut CudaSlice<f32>, count: u32);
    /// `count_<version>_i32(const int* x, index_t n, int value, unsigned* counter)`
    fn count_pass(x: &CudaSlice<i32>, n: u64, value: i32, counter: &mut CudaSlice<u32>);
    /// `count_finish_u32(const unsigned* counter, unsigned* out)`
    fn count_finish_u32(counter: &CudaSlice<u32>, out: &mut CudaSlice<u32>);
    /// `segment_sum_warp_f32[x4](const float* x, float* out, index_t segments, index_t len)`
    fn segment_sum_warp(x: &CudaSlice<f32>, out: &mut CudaSlice<f32>, segments: u64, len: u64);
    /// `segment_sum_block_f32[x4](const float* x, float* out, index_t len)`
    fn segment_sum_block(x: &CudaSlice<f32>, out: &mut CudaSlice<f32>, len: u64);
}

/// The reduction kernels, compiled and loaded for one GPU.
pub struct Reductions {
    kernels: KernelSet,
    sms: u32,
    max_threads_per_sm: u32,
}

/// The sum of one version planned for one size: the kernel the table shows and its launch
/// shape, the summation depth its order implies, and the buffers it writes between its
/// kernels (made here, never inside a timed run).
pub struct SumPlan<'a> {
    pub kernel: &'a Kernel,
    pub shape: LaunchShape,
    /// The most f32 roundings any input goes through in this order of summation.
    pub depth: u64,
    finish: &'a Kernel,
    n: usize,
    /// The tree: the length each pass reduces (empty for the one-wave versions).
    passes: Vec<usize>,
    /// The tree's odd passes' partials (the first pass has the most: n / 512), or one partial
    /// per block of a one-wave kernel.
    partials: CudaSlice<f32>,
    /// The tree's even passes' partials.
    tree_b: CudaSlice<f32>,
}

/// The dot product planned for one size: one wave of blocks, then the second stage.
pub struct DotPlan<'a> {
    pub kernel: &'a Kernel,
    pub shape: LaunchShape,
    /// The sum's depth plus the product (an fma rounds once for both; counted to be safe).
    pub depth: u64,
    finish: &'a Kernel,
    n: usize,
    partials: CudaSlice<f32>,
}

/// The count of one version planned for one size, with its atomic counter.
pub struct CountPlan<'a> {
    pub kernel: &'a Kernel,
    pub shape: LaunchShape,
    finish: &'a Kernel,
    n: usize,
    /// Zeroed before each run.
    counter: CudaSlice<u32>,
}

/// The segment sum of one version planned for `segments` segments of `len`.
pub struct SegmentPlan<'a> {
    pub kernel: &'a Kernel,
    pub shape: LaunchShape,
    pub depth: u64,
    warp: bool,
    segments: usize,
    len: usize,
}

/// The check's tolerance of a reduction whose outputs go through at most `depth` roundings:
/// the cover of every output's bound (`reference::covering_tolerance`).
pub fn tolerance(reference: &[f64], abs_sums: &[f64], depth: u64) -> Tolerance {
    crate::reference::covering_tolerance(reference, abs_sums, depth)
}

impl Reductions {
    pub fn load(gpu: &Gpu) -> Result<Self> {
        Ok(Self {
            kernels: KernelSet::load_build(gpu, &build())?,
            sms: gpu.info.sms,
            max_threads_per_sm: gpu.info.max_threads_per_sm,
        })
    }

    pub fn kernel(&self, function: &str) -> &Kernel {
        self.kernels
            .get(function)
            .unwrap_or_else(|e| panic!("{e}: `{function}` is not in reduce.cu's list"))
    }

    /// Blocks of `kernel` that fill every SM once (one wave): resident blocks per SM from the
    /// occupancy calculator, times the SMs. A grid-stride kernel launched so never has a tail
    /// wave of a few blocks while the rest of the GPU idles.
    fn wave_blocks(&self, kernel: &Kernel) -> u32 {
        let per_sm = kernel
            .occupancy(&LaunchShape::linear(1, THREADS))
            .map(|o| (o * self.max_threads_per_sm as f64 / THREADS as f64).round() as u32)
            .unwrap_or(1);
        self.sms * per_sm.max(1)
    }

    /// A one-wave grid, but never more blocks than there are elements for.
    fn wave_shape(&self, kernel: &Kernel, elements_per_thread: usize, n: usize) -> LaunchShape {
        let needed = n.div_ceil(elements_per_thread * THREADS as usize).max(1);
        LaunchShape::linear(
            self.wave_blocks(kernel)
                .min(needed.min(u32::MAX as usize) as u32),
            THREADS,
        )
    }

    /// Rounds of a one-wave kernel's `shape` on `n`: a thread's sequential adds, then the
    /// combining tree.
    fn wave_depth(shape: &LaunchShape, n: usize) -> u64 {
        let threads = shape.grid.0 as usize * THREADS as usize;
        n.div_ceil(threads) as u64 + COMBINE_DEPTH
    }

    // ---- sum ----------------------------------------------------------------------------

    /// Plans `version` of the sum of `n` elements.
    pub fn plan_sum(&self, gpu: &Gpu, version: SumVersion, n: usize) -> Result<SumPlan<'_>> {
        check_input("sum", n)?;
        let finish = self.kernel("sum_partials_f32");
        Ok(match version {
            SumVersion::Tree => {
                let mut passes = vec![n];
                while passes[passes.len() - 1] > TREE_ELEMENTS {
                    passes.push(passes[passes.len() - 1].div_ceil(TREE_ELEMENTS));
                }
                let first = n.div_ceil(TREE_ELEMENTS);
                SumPlan {
                    kernel: self.kernel("sum_tree_f32"),
                    shape: LaunchShape::linear(first.min(u32::MAX as usize) as u32, THREADS),
                    // 9 levels of halving per pass (log2 512).
                    depth: 9 * passes.len() as u64,
                    finish,
                    n,
                    partials: gpu.alloc_poisoned(first)?,
                    tree_b: gpu.alloc_poisoned(first.div_ceil(TREE_ELEMENTS))?,
                    passes,
                }
            }
            SumVersion::WarpShuffle | SumVersion::Vec4 => {
                let (function, per_thread) = match version {
                    SumVersion::WarpShuffle => ("sum_grid_stride_f32", 1),
                    _ => ("sum_grid_stride_f32x4", 16),
                };
                let kernel = self.kernel(function);
                let shape = self.wave_shape(kernel, per_thread, n);
                SumPlan {
                    kernel,
                    shape,
                    depth: Self::wave_depth(&shape, n),
                    finish,
                    n,
                    passes: Vec::new(),
                    partials: gpu.alloc_poisoned(shape.grid.0 as usize)?,
                    tree_b: gpu.alloc_poisoned(1)?,
                }
            }
        })
    }

    // ---- dot ----------------------------------------------------------------------------

    /// Plans the dot product of two vectors of `n`.
    pub fn plan_dot(&self, gpu: &Gpu, _version: DotVersion, n: usize) -> Result<DotPlan<'_>> {
        check_input("dot", n)?;
        let kernel = self.kernel("dot_grid_stride_f32x4");
        let shape = self.wave_shape(kernel, 16, n);
        Ok(DotPlan {
            kernel,
            shape,
            depth: Self::wave_depth(&shape, n) + 1,
            finish: self.kernel("sum_partials_f32"),
            n,
            partials: gpu.alloc_poisoned(shape.grid.0 as usize)?,
        })
    }

    // ---- count --------------------------------------------------------------------------

    /// Plans `version` of the count over `n` elements.
    pub fn plan_count(&self, gpu: &Gpu, version: CountVersion, n: usize) -> Result<CountPlan<'_>> {
        check_input("count", n)?;
        // The poison 0xdeadbeef must not be a count the kernel can legitimately write.
        if n >= 0xdead_beef {
            bail!("count: {n} elements could give a count of 0xdeadbeef, the output's poison");
        }
        let per_element = |f| {
            let blocks = n.div_ceil(THREADS as usize).min(u32::MAX as usize) as u32;
            (self.kernel(f), LaunchShape::linear(blocks, THREADS))
        };
        let (kernel, shape) = match version {
            CountVersion::GlobalAtomic => per_element("count_global_atomic_i32"),
            CountVersion::WarpAggregated => per_element("count_warp_aggregated_i32"),
            CountVersion::BlockLocal => {
                let k = self.kernel("count_block_local_i32x4");
                (k, self.wave_shape(k, 16, n))
            }
        };
        Ok(CountPlan {
            kernel,
            shape,
            finish: self.kernel("count_finish_u32"),
            n,
            counter: gpu.alloc_poisoned(1)?,
        })
    }

    // ---- segment sum --------------------------------------------------------------------

    /// Plans `version` on `segments` segments of `len`: the 16-byte instantiation when every
    /// segment starts 16-byte aligned. A [`Refused`] when the grid cannot hold the segments.
    pub fn plan_segment(
        &self,
        version: SegmentVersion,
        segments: usize,
        len: usize,
    ) -> Result<SegmentPlan<'_>> {
        if len == 0 || segments == 0 {
            bail!("segment_sum: {segments} segments of {len}: both must be non-zero");
        }
        let vec = len.is_multiple_of(4);
        let (function, blocks, threads) = match version {
            SegmentVersion::Warp => {
                let blocks = segments.div_ceil(THREADS as usize / 32);
                if blocks > i32::MAX as usize {
                    return Err(Refused(format!("{segments} segments: too many blocks")).into());
                }
                let f = if vec {
                    "segment_sum_warp_f32x4"
                } else {
                    "segment_sum_warp_f32"
                };
                (f, blocks, 32)
            }
            SegmentVersion::Block => {
                if segments > i32::MAX as usize {
                    return Err(Refused(format!(
                        "{segments} segments: more than the 2^31 - 1 blocks of one grid"
                    ))
                    .into());
                }
                let f = if vec {
                    "segment_sum_block_f32x4"
                } else {
                    "segment_sum_block_f32"
                };
                (f, segments, THREADS as usize)
            }
        };
        Ok(SegmentPlan {
            kernel: self.kernel(function),
            shape: LaunchShape::linear(blocks as u32, THREADS),
            depth: len.div_ceil(threads) as u64 + COMBINE_DEPTH,
            warp: version == SegmentVersion::Warp,
            segments,
            len,
        })
    }
}

impl SumPlan<'_> {
    /// `out[0] = sum x`.
    pub fn launch(
        &mut self,
        gpu: &Gpu,
        x: &CudaSlice<f32>,
        out: &mut CudaSlice<f32>,
    ) -> Result<()> {
        check_planned("sum", self.n, x.len(), out.len())?;
        if self.passes.is_empty() {
            let (partials, n) = (&mut self.partials, self.n as u64);
            // SAFETY: x holds n floats (checked above) and the kernel reads x[0..n) only;
            // partials hold one float per block of the grid.
            unsafe { sum_pass(gpu, self.kernel, &self.shape, x, partials, n) }?;
            return add_partials(gpu, self.finish, &self.partials, self.shape.grid.0, out);
        }
        // Passes of `sum_tree_f32`: x -> partials -> tree_b -> partials ... -> out.
        let (tree_a, tree_b) = (&mut self.partials, &mut self.tree_b);
        let last = self.passes.len() - 1;
        for (pass, &len) in self.passes.iter().enumerate() {
            let blocks = len.div_ceil(TREE_ELEMENTS);
            let shape = LaunchShape::linear(blocks.min(u32::MAX as usize) as u32, THREADS);
            let (src, dst): (&CudaSlice<f32>, &mut CudaSlice<f32>) = match pass {
                0 if pass == last => (x, &mut *out),
                0 => (x, &mut *tree_a),
                p if p % 2 == 1 && p == last => (&*tree_a, &mut *out),
                p if p % 2 == 1 => (&*tree_a, &mut *tree_b),
                p if p == last => (&*tree_b, &mut *out),
                _ => (&*tree_b, &mut *tree_a),
            };
            // SAFETY: src holds >= len floats, dst >= ceil(len / 512): tree_a holds ceil(n /
            // 512) and tree_b ceil(n / 512^2) floats, enough for every pass that writes them;
            // src and dst are different buffers.
            unsafe { sum_pass(gpu, self.kernel, &shape, src, dst, len as u64) }?;
        }
        Ok(())
    }
}

impl DotPlan<'_> {
    /// `out[0] = sum a_i b_i`.
    pub fn launch(
        &mut self,
        gpu: &Gpu,
        a: &CudaSlice<f32>,
        b: &CudaSlice<f32>,
        out: &mut CudaSlice<f32>,
    ) -> Result<()> {
        if b.len() != a.len() {
            bail!(
                "dot: inputs of {} and {} elements: lengths must be equal",
                a.len(),
                b.len()
            );
        }
        check_planned("dot", self.n, a.len(), out.len())?;
        let (partials, n) = (&mut self.partials, self.n as u64);
        // SAFETY: a and b hold n floats (checked above), partials one per block of the grid.
        unsafe { dot_pass(gpu, self.kernel, &self.shape, a, b, partials, n) }?;
        add_partials(gpu, self.finish, &self.partials, self.shape.grid.0, out)
    }
}

impl CountPlan<'_> {
    /// `out[0]` = how many elements of `x` equal `value`: counter zeroed, counted, copied out.
    pub fn launch(
        &mut self,
        gpu: &Gpu,
        x: &CudaSlice<i32>,
        value: i32,
        out: &mut CudaSlice<u32>,
    ) -> Result<()> {
        check_planned("count", self.n, x.len(), out.len())?;
        gpu.stream.memset_zeros(&mut self.counter)?;
        let n = self.n as u64;
        // SAFETY: x holds n ints (checked above), the counter one u32.
        unsafe {
            count_pass(
                gpu,
                self.kernel,
                &self.shape,
                x,
                n,
                value,
                &mut self.counter,
            )
        }?;
        let one = LaunchShape::linear(1, 1);
        // SAFETY: one thread copies the one counter into the one output.
        unsafe { count_finish_u32(gpu, self.finish, &one, &self.counter, out) }?;
        Ok(())
    }
}

impl SegmentPlan<'_> {
    /// `out[s]` = the sum of `x[s * len .. (s + 1) * len]`.
    pub fn launch(&self, gpu: &Gpu, x: &CudaSlice<f32>, out: &mut CudaSlice<f32>) -> Result<()> {
        let (segments, len) = (self.segments, self.len);
        if out.len() != segments || x.len() != segments * len {
            bail!(
                "segment_sum: {} elements and {} outputs are not the planned {segments} segments \
                 of {len}",
                x.len(),
                out.len()
            );
        }
        let (s, l) = (segments as u64, len as u64);
        if self.warp {
            // SAFETY: x holds segments x len floats and out segments (checked above); a warp
            // per segment, warps past the last return.
            unsafe { segment_sum_warp(gpu, self.kernel, &self.shape, x, out, s, l) }?;
        } else {
            // SAFETY: as above, one block per segment.
            unsafe { segment_sum_block(gpu, self.kernel, &self.shape, x, out, l) }?;
        }
        Ok(())
    }
}

/// The second stage: one block adds `count` partials into `out[0]`.
fn add_partials(
    gpu: &Gpu,
    finish: &Kernel,
    partials: &CudaSlice<f32>,
    count: u32,
    out: &mut CudaSlice<f32>,
) -> Result<()> {
    let shape = LaunchShape::linear(1, FINISH_THREADS);
    // SAFETY: partials hold at least `count` floats, out one.
    unsafe { sum_partials_f32(gpu, finish, &shape, partials, out, count) }
}

fn check_input(what: &str, n: usize) -> Result<()> {
    if n == 0 {
        bail!("{what}: an input of 0 elements: need n >= 1");
    }
    Ok(())
}

/// A launch's input of `n` and output of `out_len` against the plan's `planned` elements.
fn check_planned(what: &str, planned: usize, n: usize, out_len: usize) -> Result<()> {
    if n != planned || out_len != 1 {
        bail!(
            "{what}: planned for {planned} elements, given an input of {n} elements and an \
             output of {out_len}: need one output"
        );
    }
    Ok(())
}
