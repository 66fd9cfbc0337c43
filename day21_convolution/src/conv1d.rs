//! The 1D launchers: `y[i] = sum_j x[i + j - left] w[j]` over one signal of `n` elements and
//! a filter of `width` taps (1 to 31).

use anyhow::{Result, bail};
use common::dtype::Dtype;
use common::{Element, Gpu, LaunchShape};
use cudarc::driver::CudaSlice;

use crate::{Conv, MAX_WIDTH_1D, Plan, check_lengths, grid_x, pack};

/// Threads per block of every 1D kernel (`TILE_1D` in the .cu).
const THREADS: usize = 256;
/// Outputs per `vec_regs` thread (`VEC_1D`).
const VEC_OUTPUTS: usize = 8;
common::kernel_args! {
    /// `conv1d_{naive,smem,const}_<T>(const T* x, const T* w, T* y, index_t n, int width)`
    fn conv1d<T>(x: &CudaSlice<T>, w: &CudaSlice<T>, y: &mut CudaSlice<T>, n: u64, width: i32);
    /// `conv1d_vec_<T>x<P>_w<B>(const T* x, T* y, index_t n, int width)`: the filter is read
    /// from constant memory.
    fn conv1d_vec<T>(x: &CudaSlice<T>, y: &mut CudaSlice<T>, n: u64, width: i32);
}

/// The widest filter of each `vec_regs` instance: a filter runs in the narrowest that holds
/// it (its window and unrolled tap loop are sized for that width).
pub const WIDTH_BUCKETS: [usize; 4] = [3, 7, 15, 31];

/// The `vec_regs` kernel for filters of up to `bucket` taps: `conv1d_vec_f32x4_w7`.
pub fn vec_function(dtype: Dtype, bucket: usize) -> String {
    format!("conv1d_vec_{dtype}x{}_w{bucket}", pack(dtype))
}

/// The narrowest instance that holds `width` taps.
pub fn width_bucket(width: usize) -> Option<usize> {
    WIDTH_BUCKETS.into_iter().find(|&b| b >= width)
}

impl Conv {
    pub(crate) fn plan_conv1d<'a, T: Element>(
        &'a self,
        gpu: &'a Gpu,
        version: &str,
        n: usize,
        width: usize,
    ) -> Result<Plan<'a, T>> {
        if n == 0 || width == 0 || width > MAX_WIDTH_1D {
            bail!(
                "conv1d: a length of {n} and a width of {width}; the length must be at least 1, the width 1 to {MAX_WIDTH_1D}"
            );
        }
        let dtype = T::DTYPE;
        let (name, outputs_per_block, dynamic_shared, constant) = match version {
            "naive" => (format!("conv1d_naive_{dtype}"), THREADS, 0, false),
            "smem_halo" | "const_filter" => {
                let kind = if version == "smem_halo" {
                    "smem"
                } else {
                    "const"
                };
                // The block's 256 inputs and the width - 1 of its halo, as f32.
                let shared = (THREADS + width - 1) * 4;
                (
                    format!("conv1d_{kind}_{dtype}"),
                    THREADS,
                    shared,
                    kind == "const",
                )
            }
            "vec_regs" => {
                let bucket = width_bucket(width).expect("width checked above");
                (vec_function(dtype, bucket), THREADS * VEC_OUTPUTS, 0, true)
            }
            other => bail!("day21 has no version `{other}`"),
        };
        let kernel = self.kernel(&name)?;
        let shape = LaunchShape {
            grid: (grid_x(n.div_ceil(outputs_per_block))?, 1, 1),
            block: (THREADS as u32, 1, 1),
            dynamic_shared_bytes: dynamic_shared as u32,
        };
        let with_filter_argument = version != "vec_regs";
        Ok(Plan {
            kernel,
            shape,
            launch: Box::new(move |x, w, y| {
                check_lengths(x, w, y, (n, width, n))?;
                if constant {
                    self.copy_filter_to_constant(gpu, w)?;
                }
                let (n, width) = (n as u64, width as i32);
                // SAFETY: x and y hold n elements and w width (checked), width <= the
                // instance's bucket; the grid covers n and every kernel guards i >= n; the
                // tile kernels get (256 + width - 1) floats of shared memory.
                unsafe {
                    if with_filter_argument {
                        conv1d(gpu, kernel, &shape, x, w, y, n, width)
                    } else {
                        conv1d_vec(gpu, kernel, &shape, x, y, n, width)
                    }
                }
            }),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_filter_runs_in_the_narrowest_instance_that_holds_it() {
        assert_eq!(width_bucket(1), Some(3));
        assert_eq!(width_bucket(3), Some(3));
        assert_eq!(width_bucket(4), Some(7));
        assert_eq!(width_bucket(7), Some(7));
        assert_eq!(width_bucket(16), Some(31));
        assert_eq!(width_bucket(31), Some(31));
        assert_eq!(width_bucket(32), None);
        assert_eq!(vec_function(Dtype::Bf16, 7), "conv1d_vec_bf16x8_w7");
    }
}
