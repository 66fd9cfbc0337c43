//! `warp_bitonic`: a warp per row segment keeps a sorted top-K (K = 32, 64 or 128) in shared
//! memory and merges in the elements that beat its K-th (`warp_bitonic.cu`); with several
//! segments per row, a second kernel merges their lists. Refuses k > 128.

use anyhow::Result;
use common::gpu::kernel::KernelSet;
use common::session::Refused;
use common::{Gpu, LaunchShape};
use cudarc::driver::CudaSlice;

use crate::reference::TopkValue;
use crate::{DTYPES, Plan, Segmenting, Shape, check_buffers, grid_x, vector_width};

/// The largest k: a list of 128 ranks and 384 candidates is 4 KB per warp, 32 KB per block.
pub const MAX_K: usize = 128;
const LIST_SIZES: [usize; 3] = [32, 64, 128];
const WARPS_PER_BLOCK: usize = 8;
const THREADS: u32 = 32 * WARPS_PER_BLOCK as u32;
/// One segment per row when the rows alone give every SM its warps, else as many as fill
/// them: 32 warps per SM, half of the 64 an SM can hold. A segment is at least 2048 long:
/// shorter ones would spend more on their list (sorting it, writing it, merging it) than on
/// reading their elements.
pub const SEGMENTING: Segmenting = Segmenting {
    per_sm: 32,
    min_len: 2048,
};

common::kernel_args! {
    /// `topk_warp_<T>_k<K>_v<VEC>(const T* x, T* values, unsigned* indices, u64* scratch,
    /// index_t rows, index_t width, unsigned k, index_t segment_len, index_t segments)`
    fn topk_warp<T>(
        x: &CudaSlice<T>, values: &mut CudaSlice<T>, indices: &mut CudaSlice<u32>,
        scratch: &mut CudaSlice<u64>, rows: u64, width: u64, k: u32, segment_len: u64,
        segments: u64,
    );
    /// `topk_warp_merge_<T>_k<K>(const T* x, T* values, unsigned* indices, const u64* scratch,
    /// index_t rows, index_t width, unsigned k, index_t segments)`
    fn topk_warp_merge<T>(
        x: &CudaSlice<T>, values: &mut CudaSlice<T>, indices: &mut CudaSlice<u32>,
        scratch: &CudaSlice<u64>, rows: u64, width: u64, k: u32, segments: u64,
    );
}

fn first_function(dtype: &str, list: usize, vec: usize) -> String {
    format!("topk_warp_{dtype}_k{list}_v{vec}")
}

fn merge_function(dtype: &str, list: usize) -> String {
    format!("topk_warp_merge_{dtype}_k{list}")
}

pub(crate) fn functions() -> Vec<String> {
    let mut names = Vec::new();
    for (dtype, vec) in DTYPES.iter().zip([4, 8]) {
        for list in LIST_SIZES {
            names.push(first_function(dtype, list, 1));
            names.push(first_function(dtype, list, vec));
            names.push(merge_function(dtype, list));
        }
    }
    names
}

pub(crate) fn plan<'a, T: TopkValue>(
    kernels: &'a KernelSet,
    gpu: &'a Gpu,
    shape: Shape,
) -> Result<Plan<'a, T>> {
    if shape.k > MAX_K {
        return Err(Refused(format!(
            "k {} is above the {MAX_K} a warp's list holds; radix_select takes it",
            shape.k
        ))
        .into());
    }
    let list = shape.padded_k().max(LIST_SIZES[0]);
    let vec = vector_width::<T>(shape.width);
    let (segment_len, segments) = SEGMENTING.split(shape, vec, gpu.info.sms as usize);
    let first = kernels.get(&first_function(T::NAME, list, vec))?;
    let merge = kernels.get(&merge_function(T::NAME, list))?;
    let warps = shape.rows * segments;
    let first_shape = LaunchShape::linear(grid_x(warps.div_ceil(WARPS_PER_BLOCK))?, THREADS);
    let merge_shape = LaunchShape::linear(grid_x(shape.rows.div_ceil(WARPS_PER_BLOCK))?, THREADS);
    // Each segment's sorted list, when there are several; one element for a single segment,
    // which the kernel does not touch, so that the argument is still a buffer.
    let scratch_len = if segments > 1 { warps * list } else { 1 };
    // SAFETY: every (row, segment) list is written by the first kernel before the merge
    // kernel, later on the same stream, reads it.
    let mut scratch: CudaSlice<u64> = unsafe { gpu.stream.alloc(scratch_len) }?;
    Ok(Plan {
        kernel: first,
        shape: first_shape,
        launch: Box::new(move |x, values, indices| {
            check_buffers(x, values, indices, shape)?;
            let (rows, width, k) = (shape.rows as u64, shape.width as u64, shape.k as u32);
            let (segment_len, segments) = (segment_len as u64, segments as u64);
            // SAFETY: x holds rows * width, values and indices rows * k (checked), scratch
            // rows * segments * K when segments > 1; VEC divides width and segment_len, so
            // 16-byte loads stay inside aligned rows.
            unsafe {
                topk_warp(
                    gpu,
                    first,
                    &first_shape,
                    x,
                    values,
                    indices,
                    &mut scratch,
                    rows,
                    width,
                    k,
                    segment_len,
                    segments,
                )
            }?;
            if segments > 1 {
                // SAFETY: one warp per row over its segments * K ranks of scratch, written by
                // the first kernel before this one, later on the same stream.
                unsafe {
                    topk_warp_merge(
                        gpu,
                        merge,
                        &merge_shape,
                        x,
                        values,
                        indices,
                        &scratch,
                        rows,
                        width,
                        k,
                        segments,
                    )
                }?;
            }
            Ok(())
        }),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn few_rows_are_split_many_rows_are_not() {
        let sms = 132;
        let one = SEGMENTING.split(Shape::new(4096, 32768, 64).unwrap(), 4, sms);
        assert_eq!(one, (32768 / 2, 2));
        let vocab = SEGMENTING.split(Shape::new(64, 128_256, 50).unwrap(), 8, sms);
        assert_eq!(vocab.1, 63);
        assert!(vocab.0.is_multiple_of(8));
        assert_eq!(
            SEGMENTING.split(Shape::new(8192, 1000, 7).unwrap(), 4, sms),
            (2048, 1)
        );
    }
}
