//! `warp_bitonic`: a warp per row segment keeps a sorted top-K (K = 32, 64 or 128) in shared
//! memory and merges in the elements that beat its K-th (`warp_bitonic.cu`); with several
//! segments per row, a second kernel merges their lists. Refuses k > 128.

use anyhow::Result;
use common::gpu::kernel::KernelSet;
use common::reference::topk::TopkValue;
use common::session::Refused;
use common::{Gpu, LaunchShape};
use cudarc::driver::{CudaSlice, PushKernelArg};

use crate::{DTYPES, Plan, Shape, check_buffers, grid_x, segments, vector_width};

/// The largest k: a list of 128 ranks and 384 candidates is 4 KB per warp, 32 KB per block.
pub const MAX_K: usize = 128;
const LIST_SIZES: [usize; 3] = [32, 64, 128];
const WARPS_PER_BLOCK: usize = 8;
const THREADS: u32 = 32 * WARPS_PER_BLOCK as u32;
/// A segment is at least this long: shorter ones would spend more on their list (sorting it,
/// writing it, merging it) than on reading their elements.
const MIN_SEGMENT: usize = 2048;
/// Warps per SM to aim for when rows are few: half of the 64 an SM can hold.
const WARPS_PER_SM: usize = 32;

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

/// (segment length, segments per row): one segment when the rows alone give every SM its
/// warps, else as many as fill them, each at least [`MIN_SEGMENT`] long.
pub fn segmentation(shape: Shape, vec: usize, sms: usize) -> (usize, usize) {
    let parts = (sms * WARPS_PER_SM).div_ceil(shape.rows);
    segments(shape.width, vec, parts, MIN_SEGMENT)
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
    let (segment_len, segments) = segmentation(shape, vec, gpu.info.sms as usize);
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
            let mut launch = gpu.stream.launch_builder(&first.func);
            launch
                .arg(x)
                .arg(&mut *values)
                .arg(&mut *indices)
                .arg(&mut scratch)
                .arg(&rows)
                .arg(&width)
                .arg(&k)
                .arg(&segment_len)
                .arg(&segments);
            // SAFETY: matches topk_warp_<T>_k<K>_v<VEC>(x, values, indices, scratch, rows,
            // width, k, segment_len, segments): x of rows * width, values and indices of
            // rows * k (checked), scratch of rows * segments * K when segments > 1; VEC divides
            // width and segment_len, so 16-byte loads stay inside aligned rows.
            unsafe { launch.launch(first.config(&first_shape)?) }?;
            if segments > 1 {
                let mut launch = gpu.stream.launch_builder(&merge.func);
                launch
                    .arg(x)
                    .arg(values)
                    .arg(indices)
                    .arg(&scratch)
                    .arg(&rows)
                    .arg(&width)
                    .arg(&k)
                    .arg(&segments);
                // SAFETY: matches topk_warp_merge_<T>_k<K>(x, values, indices, scratch, rows,
                // width, k, segments), one warp per row over its segments * K ranks.
                unsafe { launch.launch(merge.config(&merge_shape)?) }?;
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
        let one = segmentation(Shape::new(4096, 32768, 64).unwrap(), 4, sms);
        assert_eq!(one, (32768 / 2, 2));
        let vocab = segmentation(Shape::new(64, 128_256, 50).unwrap(), 8, sms);
        assert_eq!(vocab.1, 63);
        assert!(vocab.0.is_multiple_of(8));
        assert_eq!(
            segmentation(Shape::new(8192, 1000, 7).unwrap(), 4, sms),
            (2048, 1)
        );
    }
}
