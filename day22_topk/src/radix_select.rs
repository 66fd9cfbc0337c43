//! `radix_select`: the k-th largest rank found 11 bits at a time with histograms over row
//! segments (one block each), then the k elements at or above it gathered and sorted
//! (`radix_select.cu`). Takes every shape; launches 2 kernels per digit and 2 at the end.

use anyhow::Result;
use common::gpu::kernel::KernelSet;
use common::session::Refused;
use common::{Gpu, LaunchShape};
use cudarc::driver::CudaSlice;

use crate::reference::TopkValue;
use crate::{DTYPES, Plan, Segmenting, Shape, check_buffers, grid_x, vector_width};

/// Bits per digit and bins per histogram (`RADIX_BITS`, `RADIX` in the .cu).
const RADIX_BITS: u32 = 11;
const RADIX: usize = 1 << RADIX_BITS;
/// u32 per row of the counts buffer: the histogram, above, done, taken, padding.
const COUNTS_PER_ROW: usize = RADIX + 4;
/// Column bits of a rank (`COLUMN_BITS`).
const COLUMN_BITS: u32 = 20;
const THREADS: u32 = 512;
const CHOOSE_THREADS: u32 = 256;
/// Enough blocks to fill every SM when rows are few: 4 per SM (4 of 512 threads fill an SM's
/// 2048). A segment is at least 8192 long, so that its histogram's atomics (up to 2048 into
/// global memory) stay small next to its loads.
pub const SEGMENTING: Segmenting = Segmenting {
    per_sm: 4,
    min_len: 8192,
};

common::kernel_args! {
    /// `topk_radix_hist_<T>_v<VEC>(const T* x, const u64* prefix_mask, unsigned* counts,
    /// index_t width, index_t segment_len, unsigned shift)`
    fn topk_radix_hist<T>(
        x: &CudaSlice<T>, prefix_mask: &CudaSlice<u64>, counts: &mut CudaSlice<u32>, width: u64,
        segment_len: u64, shift: u32,
    );
    /// `topk_radix_choose(u64* prefix_mask, unsigned* counts, unsigned k, unsigned shift)`
    fn topk_radix_choose(
        prefix_mask: &mut CudaSlice<u64>, counts: &mut CudaSlice<u32>, k: u32, shift: u32,
    );
    /// `topk_radix_gather_<T>_v<VEC>(const T* x, const u64* prefix_mask, unsigned* counts,
    /// u64* selected, index_t width, unsigned k, index_t segment_len)`
    fn topk_radix_gather<T>(
        x: &CudaSlice<T>, prefix_mask: &CudaSlice<u64>, counts: &mut CudaSlice<u32>,
        selected: &mut CudaSlice<u64>, width: u64, k: u32, segment_len: u64,
    );
    /// `topk_radix_sort_<T>(const T* x, const u64* selected, T* values, unsigned* indices,
    /// index_t width, unsigned k, unsigned K)`
    fn topk_radix_sort<T>(
        x: &CudaSlice<T>, selected: &CudaSlice<u64>, values: &mut CudaSlice<T>,
        indices: &mut CudaSlice<u32>, width: u64, k: u32, padded_k: u32,
    );
}

fn hist_function(dtype: &str, vec: usize) -> String {
    format!("topk_radix_hist_{dtype}_v{vec}")
}

fn gather_function(dtype: &str, vec: usize) -> String {
    format!("topk_radix_gather_{dtype}_v{vec}")
}

fn sort_function(dtype: &str) -> String {
    format!("topk_radix_sort_{dtype}")
}

pub(crate) fn functions() -> Vec<String> {
    let mut names = vec!["topk_radix_choose".to_string()];
    for (dtype, vec) in DTYPES.iter().zip([4, 8]) {
        for v in [1, vec] {
            names.push(hist_function(dtype, v));
            names.push(gather_function(dtype, v));
        }
        names.push(sort_function(dtype));
    }
    names
}

/// The shift of each pass's digit, most significant first: 11-bit digits from the top of a
/// rank of `key_bits + 20` bits, the last one ending at bit 0 (overlapping the one before).
pub fn digit_shifts(key_bits: u32) -> Vec<u32> {
    let rank_bits = key_bits + COLUMN_BITS;
    let passes = rank_bits.div_ceil(RADIX_BITS);
    (1..=passes)
        .map(|p| rank_bits.saturating_sub(p * RADIX_BITS))
        .collect()
}

pub(crate) fn plan<'a, T: TopkValue>(
    kernels: &'a KernelSet,
    gpu: &'a Gpu,
    shape: Shape,
) -> Result<Plan<'a, T>> {
    let vec = vector_width::<T>(shape.width);
    let (segment_len, segments) = SEGMENTING.split(shape, vec, gpu.info.sms as usize);
    if segments > 65535 {
        return Err(Refused(format!("{segments} segments per row exceed the grid's y")).into());
    }
    let hist = kernels.get(&hist_function(T::NAME, vec))?;
    let choose = kernels.get("topk_radix_choose")?;
    let gather = kernels.get(&gather_function(T::NAME, vec))?;
    let sort = kernels.get(&sort_function(T::NAME))?;
    let rows = grid_x(shape.rows)?;
    let pass_shape = LaunchShape {
        grid: (rows, segments as u32, 1),
        block: (THREADS, 1, 1),
        dynamic_shared_bytes: 0,
    };
    let choose_shape = LaunchShape::linear(rows, CHOOSE_THREADS);
    let sort_shape = LaunchShape::linear(rows, THREADS);
    let scratch_bytes = shape.rows as u64 * (16 + 4 * COUNTS_PER_ROW as u64 + 8 * shape.k as u64);
    gpu.check_fits("radix_select's histograms", scratch_bytes)
        .map_err(|e| Refused(e.to_string()))?;
    let mut prefix_mask = gpu.stream.alloc_zeros::<u64>(2 * shape.rows)?;
    let mut counts = gpu.stream.alloc_zeros::<u32>(COUNTS_PER_ROW * shape.rows)?;
    // SAFETY: the gather writes exactly k ranks per row before the sort, later on the same
    // stream, reads them.
    let mut selected: CudaSlice<u64> = unsafe { gpu.stream.alloc(shape.outputs()) }?;
    let shifts = digit_shifts(T::KEY_BITS);
    Ok(Plan {
        kernel: hist,
        shape: pass_shape,
        launch: Box::new(move |x, values, indices| {
            check_buffers(x, values, indices, shape)?;
            let (width, k, padded) = (shape.width as u64, shape.k as u32, shape.padded_k() as u32);
            let segment_len = segment_len as u64;
            gpu.stream.memset_zeros(&mut prefix_mask)?;
            gpu.stream.memset_zeros(&mut counts)?;
            let (pm, counts) = (&mut prefix_mask, &mut counts);
            for &shift in &shifts {
                // SAFETY: x holds rows * width (checked), prefix_mask 2 per row, counts
                // COUNTS_PER_ROW per row; the grid (rows, segments) covers the rows.
                unsafe {
                    topk_radix_hist(
                        gpu,
                        hist,
                        &pass_shape,
                        x,
                        pm,
                        counts,
                        width,
                        segment_len,
                        shift,
                    )
                }?;
                // SAFETY: one block per row of prefix_mask and counts.
                unsafe { topk_radix_choose(gpu, choose, &choose_shape, pm, counts, k, shift) }?;
            }
            // SAFETY: as the histogram's; selected holds k per row and the kernel writes no
            // slot past k.
            unsafe {
                topk_radix_gather(
                    gpu,
                    gather,
                    &pass_shape,
                    x,
                    pm,
                    counts,
                    &mut selected,
                    width,
                    k,
                    segment_len,
                )
            }?;
            // SAFETY: one block per row, K a power of two <= 1024 (the kernel's shared array);
            // values and indices hold rows * k (checked).
            unsafe {
                topk_radix_sort(
                    gpu,
                    sort,
                    &sort_shape,
                    x,
                    &selected,
                    values,
                    indices,
                    width,
                    k,
                    padded,
                )
            }
        }),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digits_cover_every_bit_of_the_rank() {
        // f32: 52-bit ranks in five digits, the last overlapping; bf16: 36 bits in four.
        assert_eq!(digit_shifts(32), [41, 30, 19, 8, 0]);
        assert_eq!(digit_shifts(16), [25, 14, 3, 0]);
    }

    #[test]
    fn long_rows_are_split_over_blocks() {
        let (len, segments) = SEGMENTING.split(Shape::new(16, 1 << 20, 1024).unwrap(), 4, 132);
        assert_eq!(segments, 33);
        assert!(len.is_multiple_of(4) && len * segments >= 1 << 20);
        assert_eq!(
            SEGMENTING
                .split(Shape::new(4096, 32768, 64).unwrap(), 4, 132)
                .1,
            1
        );
    }
}
