//! One problem of the day: an op on a shape in one storage type. Its inputs (random from a
//! seed, never zeros), its f64 reference and check, its least traffic, FLOPs and key; the same
//! for `main` and the GPU tests.

use anyhow::Result;
use common::dtype::Dtype;
use common::{Element, Gpu, measure::inputs};
use cudarc::driver::CudaSlice;

use crate::reference::{self, Conv2dShape, ConvCheck, ConvReference};

common::versions! {
    /// The day's operations; the names are `--op`'s, and those of keys.
    #[derive(clap::ValueEnum)]
    #[value(rename_all = "snake_case")]
    pub enum Op {
        /// One signal, one filter of 1 to 31 taps.
        Conv1d => "conv1d",
        /// One image (H x W), one filter of up to 7 x 7.
        Conv2d => "conv2d",
        /// NCHW images, C_out x C_in filters of up to 7 x 7.
        Conv2dNchw => "conv2d_nchw",
    }
}

impl Op {
    /// The storage type of the op's default problem.
    pub fn default_dtype(self) -> Dtype {
        match self {
            Op::Conv1d | Op::Conv2d => Dtype::F32,
            Op::Conv2dNchw => Dtype::Bf16,
        }
    }

    /// The op's default shape.
    pub fn default_shape(self) -> Shape {
        match self {
            // 256 MiB of f32 in and out: a memory-bound stream.
            Op::Conv1d => Shape::Conv1d {
                n: 1 << 26,
                width: 7,
            },
            Op::Conv2d => Shape::Conv2d(Conv2dShape {
                batch: 1,
                in_channels: 1,
                out_channels: 1,
                height: 8192,
                width: 8192,
                kernel_h: 5,
                kernel_w: 5,
            }),
            // An image stem: few input channels, memory-bound-ish.
            Op::Conv2dNchw => Shape::Conv2d(Conv2dShape {
                batch: 16,
                in_channels: 3,
                out_channels: 16,
                height: 512,
                width: 512,
                kernel_h: 3,
                kernel_w: 3,
            }),
        }
    }
}

/// The sizes of a problem.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// `n` inputs and outputs, a filter of `width` taps.
    Conv1d {
        n: usize,
        width: usize,
    },
    Conv2d(Conv2dShape),
}

impl Shape {
    pub fn input_len(&self) -> usize {
        match self {
            Shape::Conv1d { n, .. } => *n,
            Shape::Conv2d(s) => s.input_len(),
        }
    }

    pub fn weight_len(&self) -> usize {
        match self {
            Shape::Conv1d { width, .. } => *width,
            Shape::Conv2d(s) => s.weight_len(),
        }
    }

    pub fn output_len(&self) -> usize {
        match self {
            Shape::Conv1d { n, .. } => *n,
            Shape::Conv2d(s) => s.output_len(),
        }
    }

    /// Products summed into one output (the length of every kernel's chain of FMAs).
    pub fn terms(&self) -> usize {
        match self {
            Shape::Conv1d { width, .. } => *width,
            Shape::Conv2d(s) => s.terms(),
        }
    }

    /// The output's shape, for mismatch indices and saved arrays.
    pub fn output_dims(&self) -> Vec<usize> {
        match self {
            Shape::Conv1d { n, .. } => vec![*n],
            Shape::Conv2d(s) => vec![s.batch, s.out_channels, s.height, s.width],
        }
    }

    pub fn input_dims(&self) -> Vec<usize> {
        match self {
            Shape::Conv1d { n, .. } => vec![*n],
            Shape::Conv2d(s) => vec![s.batch, s.in_channels, s.height, s.width],
        }
    }

    pub fn weight_dims(&self) -> Vec<usize> {
        match self {
            Shape::Conv1d { width, .. } => vec![*width],
            Shape::Conv2d(s) => vec![s.out_channels, s.in_channels, s.kernel_h, s.kernel_w],
        }
    }

    /// Least traffic of one run, in elements: x read once, w once, y written once.
    pub fn elements_moved(&self) -> u64 {
        (self.input_len() + self.weight_len() + self.output_len()) as u64
    }

    /// Floating-point operations of one run: 2 per multiply-add, counting only the products
    /// that are inside the input (the zeros of the padding are not work). On the default
    /// problems the border is a fraction of a percent.
    pub fn flops(&self) -> u64 {
        let inside = |len: usize, k: usize| -> u64 {
            let (before, after) = reference::same_padding(k);
            // Taps that fall inside, summed over every output position: len * k less the
            // taps hanging off each edge.
            let off = |pad: usize| {
                (1..=pad.min(len))
                    .map(|d| (pad + 1 - d) as u64)
                    .sum::<u64>()
            };
            (len * k) as u64 - off(before) - off(after)
        };
        match self {
            Shape::Conv1d { n, width } => 2 * inside(*n, *width),
            Shape::Conv2d(s) => {
                let per_pair = inside(s.height, s.kernel_h) * inside(s.width, s.kernel_w);
                2 * per_pair * (s.batch * s.in_channels * s.out_channels) as u64
            }
        }
    }
}

/// The key peers and reports share: `conv1d/f32/67108864/k7`, `conv2d/f32/8192x8192/5x5`,
/// `conv2d_nchw/bf16/16x3x512x512/16x3x3x3` (input NCHW, then weights C_out x C_in x KH x KW).
pub fn key(op: Op, dtype: Dtype, shape: &Shape) -> String {
    let dims = |d: &[usize]| {
        d.iter()
            .map(|v| v.to_string())
            .collect::<Vec<_>>()
            .join("x")
    };
    match (op, shape) {
        (_, Shape::Conv1d { n, width }) => format!("{}/{dtype}/{n}/k{width}", op.name()),
        (Op::Conv2dNchw, s) => format!(
            "{}/{dtype}/{}/{}",
            op.name(),
            dims(&s.input_dims()),
            dims(&s.weight_dims())
        ),
        (_, Shape::Conv2d(s)) => format!(
            "{}/{dtype}/{}x{}/{}x{}",
            op.name(),
            s.height,
            s.width,
            s.kernel_h,
            s.kernel_w
        ),
    }
}

/// The problem in words, for the table's heading.
pub fn description(op: Op, dtype: Dtype, shape: &Shape) -> String {
    let gflop = shape.flops() as f64 / 1e9;
    match (op, shape) {
        (_, Shape::Conv1d { n, width }) => {
            format!("n = {n}, filter width {width}, {dtype} ({gflop:.2} GFLOP)")
        }
        (Op::Conv2dNchw, Shape::Conv2d(s)) => format!(
            "N {} x C_in {} x {} x {} -> C_out {}, {} x {} filters, {dtype} ({gflop:.2} GFLOP)",
            s.batch, s.in_channels, s.height, s.width, s.out_channels, s.kernel_h, s.kernel_w
        ),
        (_, Shape::Conv2d(s)) => format!(
            "{} x {} image, {} x {} filter, {dtype} ({gflop:.2} GFLOP)",
            s.height, s.width, s.kernel_h, s.kernel_w
        ),
    }
}

/// The inputs on the host.
pub struct HostInputs<T> {
    pub shape: Shape,
    pub x: Vec<T>,
    pub w: Vec<T>,
}

impl<T: Element> HostInputs<T> {
    /// x uniform in [-1, 1), w uniform in [-1, 1) (from the next seed).
    pub fn random(shape: Shape, seed: u64) -> Self {
        Self {
            shape,
            x: inputs::uniform(shape.input_len(), -1.0, 1.0, seed),
            w: inputs::uniform(shape.weight_len(), -1.0, 1.0, seed.wrapping_add(1)),
        }
    }

    pub fn reference(&self) -> ConvReference {
        match self.shape {
            Shape::Conv1d { .. } => reference::conv1d(&self.x, &self.w),
            Shape::Conv2d(s) => reference::conv2d_nchw(&self.x, &self.w, s),
        }
    }

    /// The check of every version: f32 accumulation of `terms` products, stored as T.
    pub fn check(&self, reference: &ConvReference) -> ConvCheck {
        reference::tolerance(T::DTYPE, self.shape.terms(), reference)
    }

    pub fn upload(&self, gpu: &Gpu) -> Result<(CudaSlice<T>, CudaSlice<T>)> {
        Ok((gpu.upload(&self.x)?, gpu.upload(&self.w)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_name_op_dtype_and_shape() {
        let k = |op: Op| key(op, op.default_dtype(), &op.default_shape());
        assert_eq!(k(Op::Conv1d), "conv1d/f32/67108864/k7");
        assert_eq!(k(Op::Conv2d), "conv2d/f32/8192x8192/5x5");
        assert_eq!(k(Op::Conv2dNchw), "conv2d_nchw/bf16/16x3x512x512/16x3x3x3");
    }

    #[test]
    fn flops_count_the_products_inside_the_input() {
        // n = 4, width 3: 3 + 3 + 3 + 3 taps less one off each end.
        assert_eq!(Shape::Conv1d { n: 4, width: 3 }.flops(), 2 * 10);
        // Width 4 (left 1, right 2): off the left 1, off the right 2 + 1.
        assert_eq!(Shape::Conv1d { n: 4, width: 4 }.flops(), 2 * (16 - 1 - 3));
        // A filter wider than the signal: only the products inside count (n = 1: one).
        assert_eq!(Shape::Conv1d { n: 1, width: 7 }.flops(), 2);
        let s = Shape::Conv2d(Conv2dShape {
            batch: 2,
            in_channels: 3,
            out_channels: 5,
            height: 1,
            width: 1,
            kernel_h: 3,
            kernel_w: 3,
        });
        assert_eq!(s.flops(), 2 * 2 * 3 * 5);
        assert_eq!(s.elements_moved(), 6 + 5 * 3 * 9 + 10);
    }

    #[test]
    fn the_flop_count_matches_the_reference_term_count() {
        // Every product inside the input adds |x w| > 0 to its output's magnitude: count them.
        let shape = Shape::Conv1d { n: 10, width: 6 };
        let h = HostInputs::<f32>::random(shape, 1);
        let r = h.reference();
        assert!(h.x.iter().chain(&h.w).all(|v| *v != 0.0));
        let mut products = 0u64;
        let (left, _) = reference::same_padding(6);
        for i in 0..10usize {
            for j in 0..6usize {
                products += u64::from((i + j).checked_sub(left).is_some_and(|k| k < 10));
            }
        }
        assert_eq!(shape.flops(), 2 * products);
        assert_eq!(r.values.len(), 10);
    }
}
