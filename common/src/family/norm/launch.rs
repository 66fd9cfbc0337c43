//! What the normalization days' launchers share: size checks, the register tiers, grids and
//! the column sums of the backward.

use super::*;
use crate::gpu::kernel::KernelSet;
use cudarc::driver::CudaViewMut;

/// The forward's register tiers are day 5's (threads per row, elements per thread).
pub use crate::family::tiers::{
    MAX_REGISTER_ROW, load_suffix, pack, register_tiers as forward_tiers, tier_for,
};

/// Refuses a forward launch given a buffer for the parameters' gradients: a forward writes y
/// alone.
pub fn forward_only<T>(params: Option<&mut CudaSlice<T>>) -> Result<()> {
    if params.is_some() {
        anyhow::bail!("normalization: a forward writes y alone, not parameters' gradients");
    }
    Ok(())
}

/// Checks the sizes of a launch: non-empty, x (and dy) `rows x cols`, the parameters `cols`,
/// the output `out_expected` elements (`rows x cols`, or [`backward_len`]).
pub fn check_sizes<T>(
    inputs: &Inputs<T>,
    out_len: usize,
    rows: usize,
    cols: usize,
    out_expected: usize,
) -> Result<()> {
    if rows == 0 || cols == 0 {
        anyhow::bail!("normalization: {rows} x {cols} is empty; rows and columns must be >= 1");
    }
    let n = rows
        .checked_mul(cols)
        .ok_or_else(|| anyhow::anyhow!("normalization: {rows} x {cols} overflows"))?;
    let bad_dy = inputs.dy.as_ref().is_some_and(|dy| dy.len() != n);
    let bad_bias = inputs.bias.as_ref().is_some_and(|b| b.len() != cols);
    if inputs.x.len() != n || inputs.weight.len() != cols || bad_dy || bad_bias {
        anyhow::bail!("normalization: the inputs do not hold {rows} x {cols}");
    }
    if out_len != out_expected {
        anyhow::bail!(
            "normalization: an output of {out_len} elements, not {out_expected}, for {rows} x {cols}"
        );
    }
    Ok(())
}

/// Threads per block of the block-per-row and elementwise kernels.
pub const BLOCK_THREADS: u32 = 256;
/// Threads per block of `naive` (one per row).
pub const NAIVE_THREADS: u32 = 128;
/// Rows per block in the first stage of `bwd_split`'s column sums.
pub const CHUNK_ROWS: usize = 64;

/// The backward register tiers: x, dy, the weight and the weight gradients' accumulators all
/// live in registers, and blocks are sized for 1024 threads per SM (64 registers each), so a
/// thread holds 8 elements (16 spilled). Past the warp tier the block doubles from tier to
/// tier, so a 16-bit row leaves at most half of its block idle (a 512-column row of bf16
/// takes 64 threads, not 256 with three quarters of them idle).
pub fn backward_tiers(dtype: Dtype) -> [(usize, usize); 6] {
    [
        (32, pack(dtype)),
        (64, 8),
        (128, 8),
        (256, 8),
        (512, 8),
        (1024, 8),
    ]
}

/// The widest row the backward register kernels take.
pub const MAX_BACKWARD_REGISTER_ROW: usize = 1024 * 8;

/// A grid of one block per row must fit the grid's 2^31 - 1 blocks.
pub fn block_per_row_grid(rows: usize) -> Result<u32> {
    u32::try_from(rows)
        .ok()
        .filter(|&r| r <= i32::MAX as u32)
        .ok_or_else(|| Refused(format!("{rows} rows exceed the grid's 2^31 - 1 blocks")).into())
}

/// Terms of a block-per-row sum over blocks of `threads`: each thread's strided share, then
/// the tree (10 levels at most).
pub fn block_terms(cols: usize, threads: u32) -> usize {
    cols.div_ceil(threads as usize) + 10
}

/// The forward register tier for rows of `cols` and its launch shape (a warp per row and 8
/// rows per block for the warp tiers, a block per row otherwise), or a refusal naming the
/// versions that take longer rows.
pub fn forward_register_plan(
    dtype: Dtype,
    rows: usize,
    cols: usize,
    longer_rows: &str,
) -> Result<((usize, usize), LaunchShape)> {
    let Some((group, ept)) = tier_for(&forward_tiers(dtype), cols) else {
        return Err(Refused(format!(
            "rows of {cols} exceed the {MAX_REGISTER_ROW} elements kept in registers \
             ({longer_rows} take them)"
        ))
        .into());
    };
    let shape = if group == 32 {
        LaunchShape::linear(block_per_row_grid(rows.div_ceil(8))?, 256)
    } else {
        LaunchShape::linear(block_per_row_grid(rows)?, group as u32)
    };
    Ok(((group, ept), shape))
}

/// The backward register tier for rows of `cols`, or a refusal naming the version that takes
/// longer rows.
pub fn backward_register_tier(
    dtype: Dtype,
    cols: usize,
    longer_rows: &str,
) -> Result<(usize, usize)> {
    tier_for(&backward_tiers(dtype), cols).ok_or_else(|| {
        Refused(format!(
            "rows of {cols} exceed the {MAX_BACKWARD_REGISTER_ROW} elements the backward keeps \
             in registers ({longer_rows} takes them)"
        ))
        .into()
    })
}

/// Blocks for a kernel whose blocks loop over rows: as many as the GPU holds at once (so each
/// SM keeps its blocks for the whole run), at most one per row.
pub fn resident_blocks(kernel: &Kernel, threads: u32, sms: usize, rows: usize) -> Result<usize> {
    resident_blocks_with_shared(kernel, threads, 0, sms, rows)
}

/// [`resident_blocks`] for blocks that also take `shared_bytes` of dynamic shared memory.
pub fn resident_blocks_with_shared(
    kernel: &Kernel,
    threads: u32,
    shared_bytes: u32,
    sms: usize,
    rows: usize,
) -> Result<usize> {
    let per_sm = kernel.blocks_per_sm(threads, shared_bytes)? as usize;
    Ok((per_sm.max(1) * sms).min(rows).max(1))
}

/// Rows of x and dy a `bwd_vec_pipe` block has in shared memory at once, as
/// `norm_pipe_stages<T>()` in `norm.cuh`: 5 for 16-bit types, 2 for f32.
pub fn pipe_stages(dtype: Dtype) -> usize {
    if dtype.size() == 2 { 5 } else { 2 }
}

/// The dynamic shared memory of a `bwd_vec_pipe` block of the backward tier (group, ept):
/// every stage holds a row of x and one of dy, `group x ept` elements each.
pub fn pipe_shared_bytes(dtype: Dtype, group: usize, ept: usize) -> u32 {
    (pipe_stages(dtype) * 2 * group * ept * dtype.size()) as u32
}

/// The `vec_regs` kernel of a tier: `<op>_regs_<dtype>_g<group>_e<ept>_<v|s>`.
pub fn regs_function(op: &str, dtype: Dtype, group: usize, ept: usize, suffix: &str) -> String {
    format!("{op}_regs_{dtype}_g{group}_e{ept}_{suffix}")
}

/// The `bwd_vec_pipe` kernel of a tier: `<op>_bwd_pipe_<dtype>_g<group>_e<ept>`.
pub fn pipe_function(op: &str, dtype: Dtype, group: usize, ept: usize) -> String {
    format!("{op}_bwd_pipe_{dtype}_g{group}_e{ept}")
}

/// The `bwd_vec_regs` kernel of a tier: `<op>_bwd_regs_<dtype>_g<group>_e<ept>_<v|s>`.
pub fn bwd_regs_function(op: &str, dtype: Dtype, group: usize, ept: usize, suffix: &str) -> String {
    format!("{op}_bwd_regs_{dtype}_g{group}_e{ept}_{suffix}")
}

/// A fused backward kernel whose blocks loop over rows, as the GPU holds them at once, and its
/// tier's elements per thread: `bwd_vec_regs` (`pipe` false) or `bwd_vec_pipe` (true), of the
/// day whose kernels are named `<op>_...`.
pub fn fused_backward_launch<'a>(
    kernels: &'a KernelSet,
    op: &str,
    pipe: bool,
    dtype: Dtype,
    rows: usize,
    cols: usize,
    sms: usize,
) -> Result<(&'a Kernel, LaunchShape, usize)> {
    let ((group, ept), name, shared) = if pipe {
        let tier = pipe_tier(dtype, cols)?;
        let shared = pipe_shared_bytes(dtype, tier.0, tier.1);
        (tier, pipe_function(op, dtype, tier.0, tier.1), shared)
    } else {
        let tier = backward_register_tier(dtype, cols, "bwd_split")?;
        let suffix = load_suffix(dtype, cols);
        (
            tier,
            bwd_regs_function(op, dtype, tier.0, tier.1, suffix),
            0,
        )
    };
    let kernel = kernels.get(&name)?;
    let blocks = resident_blocks_with_shared(kernel, group as u32, shared, sms, rows)?;
    let shape = LaunchShape {
        grid: (blocks as u32, 1, 1),
        block: (group as u32, 1, 1),
        dynamic_shared_bytes: shared,
    };
    Ok((kernel, shape, ept))
}

/// The tier of `bwd_vec_pipe` for rows of `cols`, or a refusal: its copies move whole 16-byte
/// packs, so rows must be too (`bwd_vec_regs` takes the others), and the row must fit a tier.
pub fn pipe_tier(dtype: Dtype, cols: usize) -> Result<(usize, usize)> {
    if !cols.is_multiple_of(pack(dtype)) {
        return Err(Refused(format!(
            "rows of {cols} are not whole 16-byte packs of {} (bwd_vec_regs takes them)",
            pack(dtype)
        ))
        .into());
    }
    backward_register_tier(dtype, cols, "bwd_split")
}

/// The tiers of `bwd_saved` (threads per row, elements per thread), as `NORM_BWD_SAVED_TIERS`
/// instantiates them: a warp per row (8 rows per block of 256) up to 16 elements a thread,
/// then blocks of 128 and 256 threads with 32 each. Its threads keep x and dy packed, so 32
/// elements fit where the recomputing backward keeps 8.
pub fn saved_tiers(dtype: Dtype) -> [(usize, usize); 4] {
    [(32, pack(dtype)), (32, 16), (128, 32), (256, 32)]
}

/// The widest row `bwd_saved` takes.
pub const MAX_SAVED_ROW: usize = 256 * 32;

/// The `bwd_saved` kernel of a tier: `<op>_bwd_saved_<dtype>_g<group>_e<ept>`.
pub fn saved_function(op: &str, dtype: Dtype, group: usize, ept: usize) -> String {
    format!("{op}_bwd_saved_{dtype}_g{group}_e{ept}")
}

/// Rows a `bwd_saved` block works on at once, as `saved_rows_per_block` in `norm.cuh`: 8 in
/// the warp-per-row tiers, else 1.
pub fn saved_rows_per_block(group: usize) -> usize {
    if group == 32 { 8 } else { 1 }
}

/// A `bwd_saved` kernel for rows of `cols`, its launch (blocks as the GPU holds them at once,
/// at most one row group each), its tier's elements per thread and its row groups (one dw
/// partial row each), or a refusal: rows of whole 16-byte packs up to [`MAX_SAVED_ROW`].
/// `staged_rows`: rows of x and dy each row group keeps in dynamic shared memory (0 when the
/// kernel keeps them in registers).
pub fn saved_backward_launch<'a>(
    kernels: &'a KernelSet,
    op: &str,
    dtype: Dtype,
    rows: usize,
    cols: usize,
    sms: usize,
    staged_rows: usize,
) -> Result<(&'a Kernel, LaunchShape, usize, usize)> {
    if !cols.is_multiple_of(pack(dtype)) {
        return Err(Refused(format!(
            "rows of {cols} are not whole 16-byte packs of {} (bwd_vec_regs takes them)",
            pack(dtype)
        ))
        .into());
    }
    let (group, ept) = tier_for(&saved_tiers(dtype), cols).ok_or_else(|| {
        Refused(format!(
            "rows of {cols} exceed the {MAX_SAVED_ROW} elements bwd_saved keeps in registers \
             (bwd_split takes them)"
        ))
    })?;
    let per_block = saved_rows_per_block(group);
    let threads = (group * per_block) as u32;
    let kernel = kernels.get(&saved_function(op, dtype, group, ept))?;
    let shared = (staged_rows * 2 * group * ept * dtype.size() * per_block) as u32;
    let blocks =
        resident_blocks_with_shared(kernel, threads, shared, sms, rows.div_ceil(per_block))?;
    let shape = LaunchShape {
        grid: (blocks as u32, 1, 1),
        block: (threads, 1, 1),
        dynamic_shared_bytes: shared,
    };
    Ok((kernel, shape, ept, blocks * per_block))
}

/// Threads per column in `column_sums`, as `COLUMN_SLICES` in `norm.cuh` defines it.
pub const COLUMN_SLICES: usize = 32;

/// The launch shape of `column_sums_<T>` over `arrays` column sums: 32 columns per block,
/// [`COLUMN_SLICES`] threads per column, one grid row per array.
pub fn column_sums_shape(cols: usize, arrays: usize) -> LaunchShape {
    LaunchShape {
        grid: (cols.div_ceil(32) as u32, arrays as u32, 1),
        block: (32, COLUMN_SLICES as u32, 1),
        dynamic_shared_bytes: 0,
    }
}

/// The longest chain of additions in a two-stage column sum: `rows_per_chunk` in the first
/// stage, then `chunks / 32 + 32` in `column_sums`.
pub fn column_terms(rows_per_chunk: usize, chunks: usize) -> usize {
    rows_per_chunk + chunks.div_ceil(COLUMN_SLICES) + COLUMN_SLICES
}

crate::kernel_args! {
    /// `column_sums_<T>(const float* partials, T* out, index_t chunks, index_t cols)`
    fn column_sums<T>(partials: &CudaSlice<f32>, out: &mut CudaViewMut<'_, T>, chunks: u64, cols: u64);
}

/// Enqueues `column_sums_<T>(partials, out, chunks, cols)` over `arrays` column sums:
/// `out[a * cols + c]` = the sum of column `c` of array `a`'s `chunks x cols` partial sums
/// (stored one array after the other), in a fixed order.
pub fn launch_column_sums<T: Element>(
    gpu: &Gpu,
    kernel: &Kernel,
    partials: &CudaSlice<f32>,
    out: &mut CudaViewMut<'_, T>,
    arrays: usize,
    chunks: usize,
    cols: usize,
) -> Result<()> {
    if partials.len() < arrays * chunks * cols || out.len() != arrays * cols {
        anyhow::bail!("column_sums: buffers do not hold {arrays} x {chunks} x {cols} partials");
    }
    let shape = column_sums_shape(cols, arrays);
    // SAFETY: grid.y = arrays, with partials holding arrays x chunks x cols floats and out
    // arrays x cols elements, checked above.
    unsafe {
        column_sums(
            gpu,
            kernel,
            &shape,
            partials,
            out,
            chunks as u64,
            cols as u64,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::family::tiers::assert_tiers_grow_to;

    #[test]
    fn backward_tiers_grow_and_end_at_the_register_limit() {
        // The forward's are `family::tiers`' (tested there).
        assert_tiers_grow_to(backward_tiers, MAX_BACKWARD_REGISTER_ROW);
        // The default problem's tiers: 128 threads x 32 forward, 512 x 8 backward.
        assert_eq!(tier_for(&forward_tiers(Dtype::Bf16), 4096), Some((128, 32)));
        assert_eq!(tier_for(&backward_tiers(Dtype::Bf16), 4096), Some((512, 8)));
        // The small GPT's width: two warps, every thread busy.
        assert_eq!(tier_for(&backward_tiers(Dtype::Bf16), 512), Some((64, 8)));
        assert!(forward_register_plan(Dtype::F32, 4, MAX_REGISTER_ROW + 1, "x").is_err());
        assert!(backward_register_tier(Dtype::F32, MAX_BACKWARD_REGISTER_ROW + 1, "x").is_err());
    }

    #[test]
    fn saved_tiers_grow_to_their_limit_in_whole_packs() {
        assert_tiers_grow_to(saved_tiers, MAX_SAVED_ROW);
        for dtype in [Dtype::F32, Dtype::F16, Dtype::Bf16] {
            assert!(saved_tiers(dtype).iter().all(|(_, e)| e % pack(dtype) == 0));
        }
        // The default problem: 128 threads x 32 elements, one row per block.
        assert_eq!(tier_for(&saved_tiers(Dtype::Bf16), 4096), Some((128, 32)));
        assert_eq!(saved_rows_per_block(32), 8);
    }

    #[test]
    fn pipelined_backward_fits_one_sm_and_takes_only_whole_packs() {
        // The widest tier at 1024 threads per SM: its buffers must fit 227 KB of shared memory
        // beside day 12's 32 KB of parked weights.
        for dtype in [Dtype::F32, Dtype::F16, Dtype::Bf16] {
            for (group, ept) in backward_tiers(dtype) {
                let per_sm = pipe_shared_bytes(dtype, group, ept) as usize * (1024 / group);
                assert!(
                    per_sm + 32 * 1024 <= 227 * 1024,
                    "{dtype} g{group}: {per_sm}"
                );
            }
        }
        assert_eq!(pipe_shared_bytes(Dtype::Bf16, 512, 8), 5 * 2 * 512 * 8 * 2);
        assert!(pipe_tier(Dtype::Bf16, 4096).is_ok());
        assert!(pipe_tier(Dtype::Bf16, 4097).is_err());
        assert!(pipe_tier(Dtype::F32, 6).is_err());
        assert_eq!(pipe_tier(Dtype::F32, 8).unwrap(), (32, 4));
    }
}
