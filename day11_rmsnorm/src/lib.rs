//! Day 11: RMSNorm forward and backward. The versions of `rmsnorm.cu`: one thread per row,
//! the reduction and the scaling split into two kernels, a block per row, and the row in
//! registers with 16-byte loads; backward as a block per row plus a two-stage column sum, and
//! fused with the row in registers. `split` is the day's own; the family
//! (`common::family::norm`) plans the rest from the kernels' names.

use anyhow::Result;
use common::family::norm::{
    self, BLOCK_THREADS, Inputs, Kind, NormDay, NormKernels, Plan, Refused, Rows,
    block_per_row_grid, block_terms, check_sizes, forward_only,
};
use common::gpu::kernel_build::KernelBuild;
use common::gpu::nvrtc::KernelSource;
use common::{Element, LaunchShape};
use cudarc::driver::CudaSlice;

pub const SOURCE: KernelSource = common::kernel_source!("rmsnorm.cu");

/// What the day compiles: `rmsnorm.cu` for the GPU's own architecture, the family's kernels with
/// `split`'s and `block`'s. The loader compiles the same, the compile test checks the list, and
/// `cargo xtask bundle` compiles it ahead of time.
pub fn kernel_builds() -> Vec<KernelBuild> {
    norm::kernel_builds::<Day11>()
}

common::versions! {
    /// Day 11's forward versions, in table order; the backward's are the family's.
    pub enum ForwardVersion {
        /// One thread per row.
        Naive => "naive",
        /// rstd per row by a block each, then an elementwise kernel scales.
        Split => "split",
        /// A block per row, sum then scale in one kernel.
        Block => "block",
        /// The row in registers, read once and written once.
        VecRegs => "vec_regs",
    }
}

common::kernel_args! {
    /// `rmsnorm_rstd_<T>(const T* x, float* rstd, index_t cols, float eps)`
    fn rmsnorm_rstd<T>(x: &CudaSlice<T>, rstd: &mut CudaSlice<f32>, cols: u64, eps: f32);
    /// `rmsnorm_scale_<T>(const T* x, const T* w, const float* rstd, T* y, index_t rows,
    /// index_t cols)`
    fn rmsnorm_scale<T>(
        x: &CudaSlice<T>, w: &CudaSlice<T>, rstd: &CudaSlice<f32>, y: &mut CudaSlice<T>,
        rows: u64, cols: u64,
    );
}

/// `split`: rstd per row by a block each, then an elementwise kernel scales.
fn plan_split<'a, T: Element>(day: &'a NormKernels<Day11>, on: Rows<'a>) -> Result<Plan<'a, T>> {
    let (gpu, rows, cols, eps) = (on.gpu, on.rows, on.cols, on.eps);
    let rstd_kernel = day.get::<T>("rmsnorm_rstd")?;
    let scale = day.get::<T>("rmsnorm_scale")?;
    let rstd_shape = LaunchShape::linear(block_per_row_grid(rows)?, BLOCK_THREADS);
    let scale_shape = LaunchShape {
        grid: (
            cols.div_ceil(BLOCK_THREADS as usize) as u32,
            rows.min(65535) as u32,
            1,
        ),
        block: (BLOCK_THREADS, 1, 1),
        dynamic_shared_bytes: 0,
    };
    let mut rstd = gpu.stream.alloc_zeros::<f32>(rows)?;
    Ok(Plan {
        kernel: rstd_kernel,
        shape: rstd_shape,
        row_terms: block_terms(cols, BLOCK_THREADS),
        col_terms: 0,
        launch: Box::new(move |inputs: &Inputs<T>, out, params| {
            forward_only(params)?;
            check_sizes(inputs, out.len(), rows, cols, rows * cols)?;
            let (x, w, rows64, cols64) = (&inputs.x, &inputs.weight, rows as u64, cols as u64);
            // SAFETY: one block per row; rstd holds one float per row.
            unsafe { rmsnorm_rstd(gpu, rstd_kernel, &rstd_shape, x, &mut rstd, cols64, eps) }?;
            // SAFETY: the grid covers the columns and strides over the rows of the rows x cols
            // buffers checked above.
            unsafe { rmsnorm_scale(gpu, scale, &scale_shape, x, w, &rstd, out, rows64, cols64) }
        }),
    })
}

/// The day for the family's runner: its kernels are [`NormKernels<Day11>`].
pub struct Day11;

impl NormDay for Day11 {
    const DAY: &'static str = "day11";
    const KIND: Kind = Kind::Rms;
    const SOURCE: KernelSource = SOURCE;
    /// `split`'s two kernels and `block`'s.
    const OWN_FUNCTIONS: &'static [&'static str] =
        &["rmsnorm_rstd", "rmsnorm_scale", "rmsnorm_block"];
    const FORWARD_VERSIONS: &'static [&'static str] = &ForwardVersion::NAMES;
    /// `bwd_saved` keeps its rows in registers.
    const SAVED_STAGED_ROWS: usize = 0;

    fn plan_forward<'a, T: Element>(
        day: &'a NormKernels<Self>,
        version: &str,
        on: Rows<'a>,
    ) -> Result<Plan<'a, T>> {
        match ForwardVersion::from_name(version) {
            Some(ForwardVersion::Naive) => day.plan_naive(on),
            Some(ForwardVersion::Split) => plan_split(day, on),
            Some(ForwardVersion::Block) => day.plan_block("rmsnorm_block", on),
            Some(ForwardVersion::VecRegs) => day.plan_registers("block and split", on),
            None => Err(Refused(format!("day11 has no version `{version}`")).into()),
        }
    }
}

common::test_kernel_builds!();
