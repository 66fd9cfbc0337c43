//! `sort_row`, the baseline: one block per row sorts the best K so far together with the row's
//! next 4096 - K elements, chunk after chunk (`sort_row.cu`). Takes every shape.

use anyhow::Result;
use common::Gpu;
use common::LaunchShape;
use common::gpu::kernel::KernelSet;
use cudarc::driver::CudaSlice;

use crate::reference::TopkValue;
use crate::{DTYPES, Plan, Shape, check_buffers, grid_x};

const THREADS: u32 = 1024;

common::kernel_args! {
    /// `topk_sort_row_<T>(const T* x, T* values, unsigned* indices, index_t width, unsigned k,
    /// unsigned K)`
    fn topk_sort_row<T>(
        x: &CudaSlice<T>, values: &mut CudaSlice<T>, indices: &mut CudaSlice<u32>, width: u64,
        k: u32, padded_k: u32,
    );
}

fn function(dtype: &str) -> String {
    format!("topk_sort_row_{dtype}")
}

pub(crate) fn functions() -> Vec<String> {
    DTYPES.iter().map(|d| function(d)).collect()
}

pub(crate) fn plan<'a, T: TopkValue>(
    kernels: &'a KernelSet,
    gpu: &'a Gpu,
    shape: Shape,
) -> Result<Plan<'a, T>> {
    let kernel = kernels.get(&function(T::NAME))?;
    let launch_shape = LaunchShape::linear(grid_x(shape.rows)?, THREADS);
    Ok(Plan {
        kernel,
        shape: launch_shape,
        launch: Box::new(move |x, values, indices| {
            check_buffers(x, values, indices, shape)?;
            let (width, k, padded) = (shape.width as u64, shape.k as u32, shape.padded_k() as u32);
            // SAFETY: x holds rows * width and values, indices rows * k (checked); one block
            // per row, K a power of two in k..=1024 leaves 3072 or more slots of the 4096 for
            // each chunk.
            unsafe {
                topk_sort_row(
                    gpu,
                    kernel,
                    &launch_shape,
                    x,
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
