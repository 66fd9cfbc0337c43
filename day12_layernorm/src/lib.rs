//! Day 12: LayerNorm forward and backward. The launchers for `layernorm.cu`: one thread per
//! row with Welford statistics, a block per row merging per-thread Welford summaries, and the
//! row in registers with two-pass statistics; backward as a block per row plus a two-stage
//! column sum for dw and db, and fused with the row in registers.

use anyhow::Result;
use common::dtype::Dtype;
use common::family::norm::{
    Inputs, Kind, NormDay, Pass, Plan, Refused, Shape, backward_len, backward_tiers,
    block_per_row_grid, block_terms, bwd_regs_function, check_sizes, column_terms,
    forward_register_plan, forward_tiers, fused_backward_launch, launch_column_sums, load_suffix,
    pipe_function, saved_backward_launch, saved_function, saved_tiers,
};
use common::gpu::kernel::KernelSet;
use common::gpu::kernel_build::KernelBuild;
use common::gpu::nvrtc::KernelSource;
use common::{Element, Gpu, Kernel, LaunchShape};
use cudarc::driver::PushKernelArg;

pub use common::family::norm::{MAX_BACKWARD_REGISTER_ROW, MAX_REGISTER_ROW};

pub const SOURCE: KernelSource = KernelSource {
    file_name: "layernorm.cu",
    code: include_str!("layernorm.cu"),
};

/// What the day compiles: every kernel, for the GPU's own architecture. The loader compiles the
/// same, the compile test checks this list, and `cargo xtask bundle` compiles it ahead of time for
/// the GPU host's kernel cache.
pub fn kernel_builds() -> Vec<KernelBuild> {
    vec![KernelBuild::device(SOURCE, all_functions())]
}

const DTYPES: &[Dtype] = &[Dtype::F32, Dtype::F16, Dtype::Bf16];

/// Rows of x and dy `bwd_saved` keeps in shared memory per row group (`SAVED_STAGES` in
/// layernorm.cu): the one it works on and two on their way.
const SAVED_STAGES: usize = 3;

/// Threads per block of the block-per-row and elementwise kernels.
const BLOCK_THREADS: u32 = 256;
/// Threads per block of `naive` (one per row).
const NAIVE_THREADS: u32 = 128;
/// Rows per block in the first stage of `bwd_split`'s column sum.
const CHUNK_ROWS: usize = 64;

fn regs_function(dtype: Dtype, group: usize, ept: usize, suffix: &str) -> String {
    format!("layernorm_regs_{dtype}_g{group}_e{ept}_{suffix}")
}

fn all_functions() -> Vec<String> {
    let mut names = Vec::new();
    for &dtype in DTYPES {
        for kind in [
            "layernorm_naive",
            "layernorm_welford_block",
            "layernorm_bwd_dx_block",
            "layernorm_bwd_partials",
            "column_sums",
        ] {
            names.push(format!("{kind}_{dtype}"));
        }
        for suffix in ["v", "s"] {
            for (group, ept) in forward_tiers(dtype) {
                names.push(regs_function(dtype, group, ept, suffix));
            }
            for (group, ept) in backward_tiers(dtype) {
                names.push(bwd_regs_function("layernorm", dtype, group, ept, suffix));
            }
        }
        for (group, ept) in backward_tiers(dtype) {
            names.push(pipe_function("layernorm", dtype, group, ept));
        }
        for (group, ept) in saved_tiers(dtype) {
            names.push(saved_function("layernorm", dtype, group, ept));
        }
    }
    names
}

pub struct Day12 {
    kernels: KernelSet,
    sms: usize,
}

impl Day12 {
    fn kernel<T: Element>(&self, kind: &str) -> Result<&Kernel> {
        self.kernels.get(&format!("{kind}_{}", T::DTYPE))
    }

    /// `naive`: one thread per row, Welford.
    fn plan_naive<'a, T: Element>(
        &'a self,
        gpu: &'a Gpu,
        rows: usize,
        cols: usize,
        eps: f32,
    ) -> Result<Plan<'a, T>> {
        let kernel = self.kernel::<T>("layernorm_naive")?;
        let blocks = u32::try_from(rows.div_ceil(NAIVE_THREADS as usize))
            .map_err(|_| Refused(format!("{rows} rows need too many blocks")))?;
        let shape = LaunchShape::linear(blocks, NAIVE_THREADS);
        Ok(Plan {
            kernel,
            shape,
            row_terms: cols,
            col_terms: 0,
            launch: Box::new(move |inputs: &Inputs<T>, out| {
                check_sizes(inputs, out.len(), rows, cols, rows * cols)?;
                let bias = inputs.bias()?;
                let (rows, cols) = (rows as u64, cols as u64);
                let mut launch = gpu.stream.launch_builder(&kernel.func);
                launch
                    .arg(&inputs.x)
                    .arg(&inputs.weight)
                    .arg(bias)
                    .arg(out)
                    .arg(&rows)
                    .arg(&cols)
                    .arg(&eps);
                // SAFETY: layernorm_naive_<T>(const T* x, const T* w, const T* b, T* y, rows,
                // cols, eps) on buffers of the sizes checked above; threads past the last row
                // return.
                unsafe { launch.launch(kernel.config(&shape)?) }?;
                Ok(())
            }),
        })
    }

    /// `welford_block`: a block per row, per-thread Welford merged across the block.
    fn plan_welford_block<'a, T: Element>(
        &'a self,
        gpu: &'a Gpu,
        rows: usize,
        cols: usize,
        eps: f32,
    ) -> Result<Plan<'a, T>> {
        let kernel = self.kernel::<T>("layernorm_welford_block")?;
        let shape = LaunchShape::linear(block_per_row_grid(rows)?, BLOCK_THREADS);
        Ok(Plan {
            kernel,
            shape,
            row_terms: block_terms(cols, BLOCK_THREADS),
            col_terms: 0,
            launch: Box::new(move |inputs: &Inputs<T>, out| {
                check_sizes(inputs, out.len(), rows, cols, rows * cols)?;
                let bias = inputs.bias()?;
                let cols = cols as u64;
                let mut launch = gpu.stream.launch_builder(&kernel.func);
                launch
                    .arg(&inputs.x)
                    .arg(&inputs.weight)
                    .arg(bias)
                    .arg(out)
                    .arg(&cols)
                    .arg(&eps);
                // SAFETY: layernorm_welford_block_<T>(const T* x, const T* w, const T* b, T* y,
                // cols, eps), one block per row of a rows x cols buffer.
                unsafe { launch.launch(kernel.config(&shape)?) }?;
                Ok(())
            }),
        })
    }

    /// `vec_regs`: the row in registers, read once and written once.
    fn plan_regs<'a, T: Element>(
        &'a self,
        gpu: &'a Gpu,
        rows: usize,
        cols: usize,
        eps: f32,
    ) -> Result<Plan<'a, T>> {
        let ((group, ept), shape) =
            forward_register_plan(T::DTYPE, rows, cols, "naive and welford_block")?;
        let name = regs_function(T::DTYPE, group, ept, load_suffix(T::DTYPE, cols));
        let kernel = self.kernels.get(&name)?;
        Ok(Plan {
            kernel,
            shape,
            row_terms: ept + 10,
            col_terms: 0,
            launch: Box::new(move |inputs: &Inputs<T>, out| {
                check_sizes(inputs, out.len(), rows, cols, rows * cols)?;
                let bias = inputs.bias()?;
                let (rows, cols) = (rows as u64, cols as u64);
                let mut launch = gpu.stream.launch_builder(&kernel.func);
                launch
                    .arg(&inputs.x)
                    .arg(&inputs.weight)
                    .arg(bias)
                    .arg(out)
                    .arg(&rows)
                    .arg(&cols)
                    .arg(&eps);
                // SAFETY: layernorm_regs_<T>_g<G>_e<E>_<v|s>(const T* x, const T* w, const T*
                // b, T* y, rows, cols, eps); the tier holds the row (G * E >= cols) and `_v`
                // is chosen only when every row starts on a 16-byte boundary.
                unsafe { launch.launch(kernel.config(&shape)?) }?;
                Ok(())
            }),
        })
    }

    /// `bwd_split`: dx by a block per row (saving mean and rstd), then dw and db as two-stage
    /// column sums that read x and dy again.
    fn plan_bwd_split<'a, T: Element>(
        &'a self,
        gpu: &'a Gpu,
        rows: usize,
        cols: usize,
        eps: f32,
    ) -> Result<Plan<'a, T>> {
        let dx_kernel = self.kernel::<T>("layernorm_bwd_dx_block")?;
        let partials_kernel = self.kernel::<T>("layernorm_bwd_partials")?;
        let sums = self.kernel::<T>("column_sums")?;
        let chunks = rows.div_ceil(CHUNK_ROWS);
        if chunks > 65535 {
            return Err(Refused(format!(
                "{rows} rows need more than 65535 chunks of {CHUNK_ROWS}"
            ))
            .into());
        }
        let dx_shape = LaunchShape::linear(block_per_row_grid(rows)?, BLOCK_THREADS);
        let partials_shape = LaunchShape {
            grid: (
                cols.div_ceil(BLOCK_THREADS as usize) as u32,
                chunks as u32,
                1,
            ),
            block: (BLOCK_THREADS, 1, 1),
            dynamic_shared_bytes: 0,
        };
        // (mean, rstd) per row, as float2.
        let mut stats = gpu.stream.alloc_zeros::<f32>(2 * rows)?;
        // dw's partial rows, then db's: one column_sums launch adds both.
        let mut partials = gpu.stream.alloc_zeros::<f32>(2 * chunks * cols)?;
        Ok(Plan {
            kernel: dx_kernel,
            shape: dx_shape,
            row_terms: block_terms(cols, BLOCK_THREADS),
            col_terms: column_terms(CHUNK_ROWS.min(rows), chunks),
            launch: Box::new(move |inputs: &Inputs<T>, out| {
                let len = backward_len(Kind::Layer, rows, cols);
                check_sizes(inputs, out.len(), rows, cols, len)?;
                let dy = inputs.dy()?;
                let (mut dx, mut grads) = out.split_at_mut(rows * cols);
                let half = partials.len() / 2;
                let (mut partials_w, mut partials_b) = partials.split_at_mut(half);
                let (rows64, cols64, chunk64) = (rows as u64, cols as u64, CHUNK_ROWS as u64);
                let mut first = gpu.stream.launch_builder(&dx_kernel.func);
                first
                    .arg(&inputs.x)
                    .arg(&inputs.weight)
                    .arg(dy)
                    .arg(&mut dx)
                    .arg(&mut stats)
                    .arg(&cols64)
                    .arg(&eps);
                // SAFETY: layernorm_bwd_dx_block_<T>(const T* x, const T* w, const T* dy, T* dx,
                // float2* stats, cols, eps), one block per row; dx is rows x cols, stats holds
                // 2 x rows floats (cudaMalloc aligns it for float2).
                unsafe { first.launch(dx_kernel.config(&dx_shape)?) }?;
                let mut second = gpu.stream.launch_builder(&partials_kernel.func);
                second
                    .arg(&inputs.x)
                    .arg(dy)
                    .arg(&stats)
                    .arg(&mut partials_w)
                    .arg(&mut partials_b)
                    .arg(&rows64)
                    .arg(&cols64)
                    .arg(&chunk64);
                // SAFETY: layernorm_bwd_partials_<T>(const T* x, const T* dy, const float2*
                // stats, float* partials_w, float* partials_b, rows, cols, chunk_rows); each
                // partials array holds chunks x cols.
                unsafe { second.launch(partials_kernel.config(&partials_shape)?) }?;
                launch_column_sums(gpu, sums, &partials, &mut grads, 2, chunks, cols)
            }),
        })
    }

    /// `bwd_vec_regs` (`pipelined` false): rows in registers, dx and the block's weight-gradient
    /// partials in one kernel, then `column_sums`; `bwd_vec_pipe` (`pipelined` true): the same
    /// with the next rows' x and dy staged in shared memory while a row is worked on.
    fn plan_bwd_fused<'a, T: Element>(
        &'a self,
        gpu: &'a Gpu,
        pipelined: bool,
        rows: usize,
        cols: usize,
        eps: f32,
    ) -> Result<Plan<'a, T>> {
        let (kernel, shape, ept) = fused_backward_launch(
            &self.kernels,
            "layernorm",
            pipelined,
            T::DTYPE,
            rows,
            cols,
            self.sms,
        )?;
        let blocks = shape.grid.0 as usize;
        self.plan_bwd_rows(gpu, kernel, shape, ept, blocks, rows, cols, Some(eps))
    }

    /// `bwd_saved`: the forward's saved mean and rstd read instead of recomputed, one
    /// reduction (of two sums) and one barrier per row, the next rows' x and dy staged in
    /// shared memory while this one is reduced; then `column_sums` for dw and db.
    fn plan_bwd_saved<'a, T: Element>(
        &'a self,
        gpu: &'a Gpu,
        rows: usize,
        cols: usize,
    ) -> Result<Plan<'a, T>> {
        let (kernel, shape, ept, groups) = saved_backward_launch(
            &self.kernels,
            "layernorm",
            T::DTYPE,
            rows,
            cols,
            self.sms,
            SAVED_STAGES,
        )?;
        self.plan_bwd_rows(gpu, kernel, shape, ept, groups, rows, cols, None)
    }

    /// The plan of a fused backward kernel whose row groups loop over rows, one dw and one db
    /// partial row per row group (`groups` of them), then one `column_sums` launch for both.
    /// `eps`: the recomputing kernels' (`bwd_vec_regs`, `bwd_vec_pipe`: the last argument);
    /// None for `bwd_saved`, which reads the saved mean and rstd after dy instead.
    #[allow(clippy::too_many_arguments)]
    fn plan_bwd_rows<'a, T: Element>(
        &'a self,
        gpu: &'a Gpu,
        kernel: &'a Kernel,
        shape: LaunchShape,
        ept: usize,
        groups: usize,
        rows: usize,
        cols: usize,
        eps: Option<f32>,
    ) -> Result<Plan<'a, T>> {
        let sums = self.kernel::<T>("column_sums")?;
        // dw's partial rows, then db's: one column_sums launch adds both.
        let mut partials = gpu.stream.alloc_zeros::<f32>(2 * groups * cols)?;
        Ok(Plan {
            kernel,
            shape,
            // Recomputing, two block sums per row (the mean's, then the rest's); from the
            // saved statistics, one.
            row_terms: ept + if eps.is_some() { 20 } else { 10 },
            col_terms: column_terms(rows.div_ceil(groups), groups),
            launch: Box::new(move |inputs: &Inputs<T>, out| {
                let len = backward_len(Kind::Layer, rows, cols);
                check_sizes(inputs, out.len(), rows, cols, len)?;
                let dy = inputs.dy()?;
                let saved = match eps {
                    Some(_) => None,
                    None => Some(inputs.saved_stats()?),
                };
                if let Some(saved) = saved.filter(|s| s.len() != 2 * rows) {
                    anyhow::bail!(
                        "bwd_saved: {} saved statistics for {rows} rows",
                        saved.len()
                    );
                }
                let (mut dx, mut grads) = out.split_at_mut(rows * cols);
                let half = partials.len() / 2;
                let (mut partials_w, mut partials_b) = partials.split_at_mut(half);
                let (rows64, cols64) = (rows as u64, cols as u64);
                let mut launch = gpu.stream.launch_builder(&kernel.func);
                launch.arg(&inputs.x).arg(&inputs.weight).arg(dy);
                if let Some(saved) = saved {
                    launch.arg(saved);
                }
                launch
                    .arg(&mut dx)
                    .arg(&mut partials_w)
                    .arg(&mut partials_b)
                    .arg(&rows64)
                    .arg(&cols64);
                if let Some(eps) = eps.as_ref() {
                    launch.arg(eps);
                }
                // SAFETY: layernorm_bwd_{regs,pipe}_<T>_g<G>_e<E>[_<v|s>](const T* x, const T*
                // w, const T* dy, T* dx, float* partials_w, float* partials_b, rows, cols,
                // eps) or layernorm_bwd_saved_<T>_g<G>_e<E>(const T* x, const T* w, const T*
                // dy, const float* saved_stats, T* dx, float* partials_w, float* partials_b,
                // rows, cols), the arguments pushed above by `eps`; the tier holds the row,
                // 16-byte loads (`_v`, every pipe and saved kernel) only for 16-byte aligned
                // rows, a pipe or saved kernel's shared memory is its staged rows (its shape
                // says so), saved_stats holds the means then the rstds (checked above), each
                // partials array has a row per row group.
                unsafe { launch.launch(kernel.config(&shape)?) }?;
                launch_column_sums(gpu, sums, &partials, &mut grads, 2, groups, cols)
            }),
        })
    }
}

impl NormDay for Day12 {
    const DAY: &'static str = "day12";
    const TITLE: &'static str = "LayerNorm";
    const KIND: Kind = Kind::Layer;
    const FORWARD_VERSIONS: &'static [&'static str] = &["naive", "welford_block", "vec_regs"];
    const BACKWARD_VERSIONS: &'static [&'static str] =
        &["bwd_split", "bwd_vec_regs", "bwd_vec_pipe", "bwd_saved"];
    const DEFAULT_PROBLEMS: &'static [Shape] = &[
        Shape::new(Pass::Forward, 16384, 4096, Dtype::Bf16),
        Shape::new(Pass::Backward, 16384, 4096, Dtype::Bf16),
    ];
    const DEFAULT_EPS: f64 = 1e-5;

    fn load(gpu: &Gpu) -> Result<Self> {
        Ok(Self {
            kernels: KernelSet::load(gpu, &SOURCE, all_functions())?,
            sms: gpu.info.sms as usize,
        })
    }

    fn plan<'a, T: Element>(
        &'a self,
        gpu: &'a Gpu,
        version: &str,
        rows: usize,
        cols: usize,
        eps: f32,
    ) -> Result<Plan<'a, T>> {
        match version {
            "naive" => self.plan_naive(gpu, rows, cols, eps),
            "welford_block" => self.plan_welford_block(gpu, rows, cols, eps),
            "vec_regs" => self.plan_regs(gpu, rows, cols, eps),
            "bwd_split" => self.plan_bwd_split(gpu, rows, cols, eps),
            "bwd_vec_regs" => self.plan_bwd_fused(gpu, false, rows, cols, eps),
            "bwd_vec_pipe" => self.plan_bwd_fused(gpu, true, rows, cols, eps),
            "bwd_saved" => self.plan_bwd_saved(gpu, rows, cols),
            other => Err(Refused(format!("day12 has no version `{other}`")).into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kernel_compiles_for_sm90_without_spilling() {
        common::testing::assert_builds_compile_without_spills(&kernel_builds());
    }
}
