//! The launchers of `reduce.cu`: sum, count, dot product and segment sum, each version's
//! launch shape, and the summation depth its order implies (for the tolerance; see
//! `common::reference::reduce`).

use anyhow::{Result, bail};
use common::gpu::nvrtc::KernelSource;
use common::session::Refused;
use common::{Gpu, Kernel, LaunchShape};
use cudarc::driver::{CudaSlice, PushKernelArg};

pub const SOURCE: KernelSource = KernelSource {
    file_name: "reduce.cu",
    code: include_str!("reduce.cu"),
};

/// Threads per block of every reduction kernel but the second stage.
pub const THREADS: u32 = 256;
/// Threads of the one block that adds the partials.
const FINISH_THREADS: u32 = 1024;
/// Elements one block of `sum_tree_f32` reduces.
const TREE_ELEMENTS: usize = 512;
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

/// Buffers the multi-kernel versions write between their kernels, made once per problem size
/// (never inside a timed run).
pub struct Scratch {
    /// Partials of the tree's odd passes (the first pass has the most: n / 512).
    tree_a: CudaSlice<f32>,
    /// Partials of the tree's even passes.
    tree_b: CudaSlice<f32>,
    /// One partial per block of a one-wave kernel.
    partials: CudaSlice<f32>,
    /// The count's atomic counter, zeroed before each run.
    counter: CudaSlice<u32>,
}

/// The reduction kernels, compiled and loaded for one GPU.
pub struct Reductions {
    kernels: Vec<Kernel>,
    sms: u32,
    max_threads_per_sm: u32,
}

impl Reductions {
    pub fn load(gpu: &Gpu) -> Result<Self> {
        let module = gpu.load(&SOURCE)?;
        let kernels = FUNCTIONS
            .iter()
            .map(|f| module.kernel(gpu, f))
            .collect::<Result<_>>()?;
        Ok(Self {
            kernels,
            sms: gpu.info.sms,
            max_threads_per_sm: gpu.info.max_threads_per_sm,
        })
    }

    pub fn kernel(&self, function: &str) -> &Kernel {
        let i = FUNCTIONS
            .iter()
            .position(|f| *f == function)
            .unwrap_or_else(|| panic!("`{function}` is not in reduce.cu's list"));
        &self.kernels[i]
    }

    /// Scratch buffers for problems of up to `n` elements.
    pub fn scratch(&self, gpu: &Gpu, n: usize) -> Result<Scratch> {
        let first = n.div_ceil(TREE_ELEMENTS).max(1);
        let second = first.div_ceil(TREE_ELEMENTS).max(1);
        let wave = self.max_wave_blocks() as usize;
        Ok(Scratch {
            tree_a: gpu.alloc_poisoned(first)?,
            tree_b: gpu.alloc_poisoned(second)?,
            partials: gpu.alloc_poisoned(wave)?,
            counter: gpu.alloc_poisoned(1)?,
        })
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

    /// The most blocks any one-wave kernel here launches: the size of `Scratch::partials`.
    fn max_wave_blocks(&self) -> u32 {
        [
            "sum_grid_stride_f32",
            "sum_grid_stride_f32x4",
            "dot_grid_stride_f32x4",
        ]
        .iter()
        .map(|f| self.wave_blocks(self.kernel(f)))
        .max()
        .unwrap_or(1)
        .min(FINISH_THREADS * 64)
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

    // ---- sum ----------------------------------------------------------------------------

    /// The CUDA function doing the bulk of `version`'s work and its launch shape on `n`.
    pub fn sum_plan(&self, version: SumVersion, n: usize) -> (&Kernel, LaunchShape) {
        match version {
            SumVersion::Tree => {
                let blocks = n.div_ceil(TREE_ELEMENTS).min(u32::MAX as usize) as u32;
                (
                    self.kernel("sum_tree_f32"),
                    LaunchShape::linear(blocks, THREADS),
                )
            }
            SumVersion::WarpShuffle => {
                let k = self.kernel("sum_grid_stride_f32");
                (k, self.wave_shape(k, 1, n))
            }
            SumVersion::Vec4 => {
                let k = self.kernel("sum_grid_stride_f32x4");
                (k, self.wave_shape(k, 16, n))
            }
        }
    }

    /// The most f32 roundings any input goes through in `version`'s order of summation.
    pub fn sum_depth(&self, version: SumVersion, n: usize) -> u64 {
        match version {
            // 9 levels of halving per pass (log2 512), and passes until one value is left.
            SumVersion::Tree => {
                let (mut len, mut passes) = (n.max(1), 0u64);
                loop {
                    passes += 1;
                    len = len.div_ceil(TREE_ELEMENTS);
                    if len == 1 {
                        break 9 * passes;
                    }
                }
            }
            SumVersion::WarpShuffle | SumVersion::Vec4 => {
                let threads = self.sum_plan(version, n).1.grid.0 as usize * THREADS as usize;
                n.div_ceil(threads) as u64 + COMBINE_DEPTH
            }
        }
    }

    /// `out[0] = sum x` with `version`.
    pub fn sum(
        &self,
        gpu: &Gpu,
        version: SumVersion,
        x: &CudaSlice<f32>,
        out: &mut CudaSlice<f32>,
        scratch: &mut Scratch,
    ) -> Result<()> {
        let n = x.len();
        check_one_output("sum", n, out.len())?;
        self.check_scratch(scratch, n)?;
        match version {
            SumVersion::Tree => self.sum_tree(gpu, x, out, scratch),
            SumVersion::WarpShuffle | SumVersion::Vec4 => {
                let (kernel, shape) = self.sum_plan(version, n);
                let n64 = n as u64;
                let mut launch = gpu.stream.launch_builder(&kernel.func);
                launch.arg(x).arg(&mut scratch.partials).arg(&n64);
                // SAFETY: (const float*, float* partials of >= grid blocks, index_t n); the
                // kernel reads x[0..n) only.
                unsafe { launch.launch(kernel.config(&shape)?) }?;
                self.add_partials(gpu, &scratch.partials, shape.grid.0, out)
            }
        }
    }

    fn check_scratch(&self, scratch: &Scratch, n: usize) -> Result<()> {
        if scratch.tree_a.len() < n.div_ceil(TREE_ELEMENTS) {
            bail!("reduction scratch was made for fewer than {n} elements");
        }
        Ok(())
    }

    /// Passes of `sum_tree_f32`: x -> tree_a -> tree_b -> tree_a ... -> out.
    fn sum_tree(
        &self,
        gpu: &Gpu,
        x: &CudaSlice<f32>,
        out: &mut CudaSlice<f32>,
        scratch: &mut Scratch,
    ) -> Result<()> {
        let kernel = self.kernel("sum_tree_f32");
        let Scratch { tree_a, tree_b, .. } = scratch;
        let mut len = x.len();
        for pass in 0.. {
            let blocks = len.div_ceil(TREE_ELEMENTS);
            let config = kernel.config(&LaunchShape::linear(
                blocks.min(u32::MAX as usize) as u32,
                THREADS,
            ))?;
            let n = len as u64;
            let last = blocks == 1;
            let (src, dst): (&CudaSlice<f32>, &mut CudaSlice<f32>) = match pass {
                0 if last => (x, &mut *out),
                0 => (x, &mut *tree_a),
                p if p % 2 == 1 && last => (&*tree_a, &mut *out),
                p if p % 2 == 1 => (&*tree_a, &mut *tree_b),
                _ if last => (&*tree_b, &mut *out),
                _ => (&*tree_b, &mut *tree_a),
            };
            let mut launch = gpu.stream.launch_builder(&kernel.func);
            launch.arg(src).arg(dst);
            launch.arg(&n);
            // SAFETY: (const float* in of >= len, float* out of >= ceil(len / 512), index_t
            // len); tree_a holds ceil(n / 512) and tree_b ceil(n / 512^2) floats, enough for
            // every pass that writes them; in and out are different buffers.
            unsafe { launch.launch(config) }?;
            if blocks == 1 {
                return Ok(());
            }
            len = blocks;
        }
        unreachable!("the loop returns once one block is left")
    }

    /// The second stage: one block adds `count` partials into `out[0]`.
    fn add_partials(
        &self,
        gpu: &Gpu,
        partials: &CudaSlice<f32>,
        count: u32,
        out: &mut CudaSlice<f32>,
    ) -> Result<()> {
        let kernel = self.kernel("sum_partials_f32");
        let mut launch = gpu.stream.launch_builder(&kernel.func);
        launch.arg(partials).arg(out).arg(&count);
        // SAFETY: (const float* of >= count partials, float* out of >= 1, unsigned count).
        unsafe { launch.launch(kernel.config(&LaunchShape::linear(1, FINISH_THREADS))?) }?;
        Ok(())
    }

    // ---- dot ----------------------------------------------------------------------------

    pub fn dot_plan(&self, _version: DotVersion, n: usize) -> (&Kernel, LaunchShape) {
        let k = self.kernel("dot_grid_stride_f32x4");
        (k, self.wave_shape(k, 16, n))
    }

    /// The sum's depth plus the product (an fma rounds once for both; counted to be safe).
    pub fn dot_depth(&self, version: DotVersion, n: usize) -> u64 {
        let threads = self.dot_plan(version, n).1.grid.0 as usize * THREADS as usize;
        n.div_ceil(threads) as u64 + COMBINE_DEPTH + 1
    }

    /// `out[0] = sum a_i b_i`.
    pub fn dot(
        &self,
        gpu: &Gpu,
        version: DotVersion,
        a: &CudaSlice<f32>,
        b: &CudaSlice<f32>,
        out: &mut CudaSlice<f32>,
        scratch: &mut Scratch,
    ) -> Result<()> {
        let n = a.len();
        if b.len() != n {
            bail!(
                "dot: inputs of {n} and {} elements: lengths must be equal",
                b.len()
            );
        }
        check_one_output("dot", n, out.len())?;
        let (kernel, shape) = self.dot_plan(version, n);
        let n64 = n as u64;
        let mut launch = gpu.stream.launch_builder(&kernel.func);
        launch.arg(a).arg(b).arg(&mut scratch.partials).arg(&n64);
        // SAFETY: (const float* a, const float* b, both of n, float* partials of >= grid
        // blocks, index_t n).
        unsafe { launch.launch(kernel.config(&shape)?) }?;
        self.add_partials(gpu, &scratch.partials, shape.grid.0, out)
    }

    // ---- count --------------------------------------------------------------------------

    pub fn count_plan(&self, version: CountVersion, n: usize) -> (&Kernel, LaunchShape) {
        let per_element = |f| {
            let blocks = n.div_ceil(THREADS as usize).min(u32::MAX as usize) as u32;
            (self.kernel(f), LaunchShape::linear(blocks, THREADS))
        };
        match version {
            CountVersion::GlobalAtomic => per_element("count_global_atomic_i32"),
            CountVersion::WarpAggregated => per_element("count_warp_aggregated_i32"),
            CountVersion::BlockLocal => {
                let k = self.kernel("count_block_local_i32x4");
                (k, self.wave_shape(k, 16, n))
            }
        }
    }

    /// `out[0]` = how many elements of `x` equal `value`: counter zeroed, counted, copied out.
    pub fn count(
        &self,
        gpu: &Gpu,
        version: CountVersion,
        x: &CudaSlice<i32>,
        value: i32,
        out: &mut CudaSlice<u32>,
        scratch: &mut Scratch,
    ) -> Result<()> {
        let n = x.len();
        check_one_output("count", n, out.len())?;
        // The poison 0xdeadbeef must not be a count the kernel can legitimately write.
        if n >= 0xdead_beef {
            bail!("count: {n} elements could give a count of 0xdeadbeef, the output's poison");
        }
        gpu.stream.memset_zeros(&mut scratch.counter)?;
        let (kernel, shape) = self.count_plan(version, n);
        let n64 = n as u64;
        let mut launch = gpu.stream.launch_builder(&kernel.func);
        launch
            .arg(x)
            .arg(&n64)
            .arg(&value)
            .arg(&mut scratch.counter);
        // SAFETY: (const int* x of n, index_t n, int value, unsigned* counter of 1).
        unsafe { launch.launch(kernel.config(&shape)?) }?;
        let finish = self.kernel("count_finish_u32");
        let mut launch = gpu.stream.launch_builder(&finish.func);
        launch.arg(&scratch.counter).arg(out);
        // SAFETY: (const unsigned* counter of 1, unsigned* out of 1).
        unsafe { launch.launch(finish.config(&LaunchShape::linear(1, 1))?) }?;
        Ok(())
    }

    // ---- segment sum --------------------------------------------------------------------

    /// The function and launch shape of `version` on `segments` segments of `len`: the
    /// 16-byte instantiation when every segment starts 16-byte aligned.
    pub fn segment_plan(
        &self,
        version: SegmentVersion,
        segments: usize,
        len: usize,
    ) -> Result<(&Kernel, LaunchShape)> {
        let vec = len.is_multiple_of(4);
        Ok(match version {
            SegmentVersion::Warp => {
                let f = if vec {
                    "segment_sum_warp_f32x4"
                } else {
                    "segment_sum_warp_f32"
                };
                let blocks = segments.div_ceil(THREADS as usize / 32);
                if blocks > i32::MAX as usize {
                    return Err(Refused(format!("{segments} segments: too many blocks")).into());
                }
                (self.kernel(f), LaunchShape::linear(blocks as u32, THREADS))
            }
            SegmentVersion::Block => {
                let f = if vec {
                    "segment_sum_block_f32x4"
                } else {
                    "segment_sum_block_f32"
                };
                if segments > i32::MAX as usize {
                    return Err(Refused(format!(
                        "{segments} segments: more than the 2^31 - 1 blocks of one grid"
                    ))
                    .into());
                }
                (
                    self.kernel(f),
                    LaunchShape::linear(segments as u32, THREADS),
                )
            }
        })
    }

    pub fn segment_depth(&self, version: SegmentVersion, len: usize) -> u64 {
        let threads = match version {
            SegmentVersion::Warp => 32,
            SegmentVersion::Block => THREADS as usize,
        };
        len.div_ceil(threads) as u64 + COMBINE_DEPTH
    }

    /// `out[s]` = the sum of `x[s * len .. (s + 1) * len]`.
    pub fn segment_sum(
        &self,
        gpu: &Gpu,
        version: SegmentVersion,
        x: &CudaSlice<f32>,
        len: usize,
        out: &mut CudaSlice<f32>,
    ) -> Result<()> {
        let segments = out.len();
        if len == 0 || segments == 0 || segments.checked_mul(len) != Some(x.len()) {
            bail!(
                "segment_sum: {} elements are not {segments} segments of {len} (both non-zero)",
                x.len()
            );
        }
        let (kernel, shape) = self.segment_plan(version, segments, len)?;
        let config = kernel.config(&shape)?;
        let (segments, len) = (segments as u64, len as u64);
        let mut launch = gpu.stream.launch_builder(&kernel.func);
        launch.arg(x).arg(out);
        if version == SegmentVersion::Warp {
            launch.arg(&segments);
        }
        launch.arg(&len);
        // SAFETY: warp: (const float* x, float* out, index_t segments, index_t len); block:
        // (const float* x, float* out, index_t len) with one block per segment; x holds
        // segments * len floats and out segments.
        unsafe { launch.launch(config) }?;
        Ok(())
    }
}

fn check_one_output(what: &str, n: usize, out_len: usize) -> Result<()> {
    if n == 0 || out_len != 1 {
        bail!(
            "{what}: an input of {n} elements and an output of {out_len}: need n >= 1 and one output"
        );
    }
    Ok(())
}
