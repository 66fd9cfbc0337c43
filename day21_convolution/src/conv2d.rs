//! The 2D launchers, NCHW: x `[N][C_in][H][W]`, w `[C_out][C_in][KH][KW]`, y `[N][C_out][H][W]`,
//! filters up to 7 x 7; one image with one filter is `N = C_in = C_out = 1`.

use anyhow::{Result, bail};
use common::dtype::Dtype;
use common::session::Refused;
use common::{Element, Gpu, LaunchShape, sizes};
use cudarc::driver::{CudaSlice, DeviceRepr};

use crate::reference::Conv2dShape;
use crate::{Conv, MAX_FILTER_2D, Plan, check_constant_fits, check_lengths, grid_x, grid_yz, pack};

/// Every 2D kernel's block: 32 x 8 threads (`BLOCK_X`, `BLOCK_Y` in the .cu).
const BLOCK: (usize, usize) = (32, 8);
/// Largest image side: the kernels index within a row or column with 32-bit ints, and a block
/// of vec_regs spans up to 256 columns past its first.
pub const MAX_SIDE: usize = 1 << 30;

/// How a `vec_regs` thread is blocked: output channels and output rows per thread (and one
/// 16-byte pack of columns).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Blocking {
    pub channels: usize,
    pub rows: usize,
}

/// The instances: one output channel x 4 rows (a single image: the rows share their input
/// rows), and 8 output channels x 1 row (NCHW: each loaded input feeds 8 channels).
pub const BLOCKINGS: [Blocking; 2] = [
    Blocking {
        channels: 1,
        rows: 4,
    },
    Blocking {
        channels: 8,
        rows: 1,
    },
];

/// `conv2d_vec_bf16x8_oc8_oy1`.
pub fn vec_function(dtype: Dtype, b: Blocking) -> String {
    format!(
        "conv2d_vec_{dtype}x{}_oc{}_oy{}",
        pack(dtype),
        b.channels,
        b.rows
    )
}

/// The one filter size `vec_regs` has a kernel fixed at compile time for (`conv2d_vec<..., 5,
/// 5>`: every filter loop unrolled, the taps in registers), with the single-channel blocking.
pub const FIXED_FILTER: (usize, usize) = (5, 5);

/// `vec_regs`'s kernel for a filter of `kh x kw` with blocking `b`: the fixed-size one where it
/// exists (`conv2d_vec_f32x4_oc1_oy4_k5x5`), else [`vec_function`].
pub fn vec_kernel_for(dtype: Dtype, b: Blocking, kh: usize, kw: usize) -> String {
    if (kh, kw) == FIXED_FILTER && b == BLOCKINGS[0] {
        format!("{}_k{kh}x{kw}", vec_function(dtype, b))
    } else {
        vec_function(dtype, b)
    }
}

/// The blocking `vec_regs` uses for `out_channels`.
pub fn blocking_for(out_channels: usize) -> Blocking {
    if out_channels == 1 {
        BLOCKINGS[0]
    } else {
        BLOCKINGS[1]
    }
}

/// `Conv2dShape` in the .cu: seven ints, passed by value.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
struct KernelShape {
    n: i32,
    cin: i32,
    cout: i32,
    h: i32,
    w: i32,
    kh: i32,
    kw: i32,
}

// SAFETY: seven i32 fields in C layout, the layout of the .cu's `struct Conv2dShape`.
unsafe impl DeviceRepr for KernelShape {}
common::kernel_arg_by_value!(KernelShape);

common::kernel_args! {
    /// `conv2d_{naive,smem,const}_<T>(const T* x, const T* w, T* y, Conv2dShape s)`
    fn conv2d<T>(x: &CudaSlice<T>, w: &CudaSlice<T>, y: &mut CudaSlice<T>, s: KernelShape);
    /// `conv2d_vec_<T>x<P>_oc<C>_oy<R>[_k<KH>x<KW>](const T* x, T* y, Conv2dShape s)`: the
    /// filter is read from constant memory.
    fn conv2d_vec<T>(x: &CudaSlice<T>, y: &mut CudaSlice<T>, s: KernelShape);
}

impl KernelShape {
    fn of(s: Conv2dShape) -> Result<Self> {
        let int = |v: usize, what: &str| {
            i32::try_from(v).map_err(|_| Refused(format!("{what} {v} exceeds a 32-bit int")))
        };
        Ok(Self {
            n: int(s.batch, "a batch of")?,
            cin: int(s.in_channels, "C_in")?,
            cout: int(s.out_channels, "C_out")?,
            h: int(s.height, "a height of")?,
            w: int(s.width, "a width of")?,
            kh: int(s.kernel_h, "KH")?,
            kw: int(s.kernel_w, "KW")?,
        })
    }
}

impl Conv {
    pub(crate) fn plan_conv2d<'a, T: Element>(
        &'a self,
        gpu: &'a Gpu,
        version: &str,
        s: Conv2dShape,
    ) -> Result<Plan<'a, T>> {
        let sizes = [s.batch, s.in_channels, s.out_channels, s.height, s.width];
        if sizes.contains(&0) || !(1..=MAX_FILTER_2D).contains(&s.kernel_h) {
            bail!("conv2d: {s:?} has an empty axis or a filter outside 1..={MAX_FILTER_2D}");
        }
        if !(1..=MAX_FILTER_2D).contains(&s.kernel_w) {
            bail!(
                "conv2d: a filter {} wide; 1 to {MAX_FILTER_2D} taps",
                s.kernel_w
            );
        }
        // The kernels index the filter with 32-bit ints (main.rs refuses it before the GPU opens).
        let taps = sizes::product(
            "conv2d's filter",
            &[s.out_channels, s.in_channels, s.kernel_h, s.kernel_w],
        )?;
        if taps > i32::MAX as usize {
            bail!("conv2d: a filter of {taps} elements; at most 2^31 - 1");
        }
        if s.height > MAX_SIDE || s.width > MAX_SIDE {
            return Err(Refused(format!(
                "an image of {} x {} has a side over 2^30",
                s.height, s.width
            ))
            .into());
        }
        let dtype = T::DTYPE;
        let (bx, by) = BLOCK;
        let tiles = |cols: usize, rows: usize, channels: usize| -> Result<(u32, u32, u32)> {
            let z = s.batch * s.out_channels.div_ceil(channels);
            Ok((
                grid_x(s.width.div_ceil(cols))?,
                grid_yz(s.height.div_ceil(rows), "rows")?,
                grid_yz(z, "images x output-channel groups")?,
            ))
        };
        let (name, grid, dynamic_shared, constant) = match version {
            "naive" => (format!("conv2d_naive_{dtype}"), tiles(bx, by, 1)?, 0, false),
            "smem_halo" | "const_filter" => {
                let kind = if version == "smem_halo" {
                    "smem"
                } else {
                    "const"
                };
                if kind == "const" {
                    check_constant_fits(version, s.weight_len())?;
                }
                // The block's 32 x 8 inputs and their halo, as f32.
                let shared = (by + s.kernel_h - 1) * (bx + s.kernel_w - 1) * 4;
                let name = format!("conv2d_{kind}_{dtype}");
                (name, tiles(bx, by, 1)?, shared, kind == "const")
            }
            "vec_regs" => {
                check_constant_fits(version, s.weight_len())?;
                let b = blocking_for(s.out_channels);
                // (8 OY + KH - 1) rows of 34 packs of 16 bytes: 32 packs and one each side.
                let shared = (by * b.rows + s.kernel_h - 1) * (bx + 2) * 16;
                let grid = tiles(bx * pack(dtype), by * b.rows, b.channels)?;
                let name = vec_kernel_for(dtype, b, s.kernel_h, s.kernel_w);
                (name, grid, shared, true)
            }
            other => bail!("day21 has no version `{other}`"),
        };
        let kernel = self.kernel(&name)?;
        let shape = LaunchShape {
            grid,
            block: (bx as u32, by as u32, 1),
            dynamic_shared_bytes: dynamic_shared as u32,
        };
        let args = KernelShape::of(s)?;
        let with_filter_argument = version != "vec_regs";
        let lengths = (s.input_len(), s.weight_len(), s.output_len());
        Ok(Plan {
            kernel,
            shape,
            launch: Box::new(move |x, w, y| {
                check_lengths(x, w, y, lengths)?;
                if constant {
                    self.copy_filter_to_constant(gpu, w)?;
                }
                // SAFETY: x, w and y hold the shape's lengths (checked); the grid covers every
                // (column tile, row tile, image x channel group) and the kernels guard the
                // edges; the shared memory is what each kernel's tile needs.
                unsafe {
                    if with_filter_argument {
                        conv2d(gpu, kernel, &shape, x, w, y, args)
                    } else {
                        conv2d_vec(gpu, kernel, &shape, x, y, args)
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
    fn vec_names_and_blockings() {
        assert_eq!(
            vec_function(Dtype::F32, BLOCKINGS[0]),
            "conv2d_vec_f32x4_oc1_oy4"
        );
        assert_eq!(
            vec_function(Dtype::Bf16, BLOCKINGS[1]),
            "conv2d_vec_bf16x8_oc8_oy1"
        );
        assert_eq!(blocking_for(1).channels, 1);
        assert_eq!(blocking_for(3).channels, 8);
    }
}
