//! `sort_row`, the baseline: one block per row sorts the best K so far together with the row's
//! next 4096 - K elements, chunk after chunk (`sort_row.cu`). Takes every shape.

use anyhow::Result;
use common::Gpu;
use common::LaunchShape;
use common::gpu::kernel::KernelSet;
use common::reference::topk::TopkValue;
use cudarc::driver::PushKernelArg;

use crate::{DTYPES, Plan, Shape, check_buffers, grid_x};

const THREADS: u32 = 1024;

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
            let mut launch = gpu.stream.launch_builder(&kernel.func);
            launch
                .arg(x)
                .arg(values)
                .arg(indices)
                .arg(&width)
                .arg(&k)
                .arg(&padded);
            // SAFETY: matches topk_sort_row_<T>(x, values, indices, width, k, K) with x of
            // rows * width and values, indices of rows * k (checked); one block per row, K a
            // power of two in k..=1024 leaves 3072 or more slots of the 4096 for each chunk.
            unsafe { launch.launch(kernel.config(&launch_shape)?) }?;
            Ok(())
        }),
    })
}
