//! Convolution with "same" output size, as PyTorch's `F.conv1d` / `F.conv2d` with
//! `padding="same"`, stride 1, no bias: a cross-correlation (the filter is not flipped),
//!
//! - 1D: `y[i] = sum_j x[i + j - left] w[j]`,
//! - 2D, NCHW: `y[n][co][oy][ox] = sum_ci sum_ky sum_kx x[n][ci][oy + ky - top][ox + kx - left]
//!   w[co][ci][ky][kx]`,
//!
//! where an index outside the input adds nothing (torch pads with zeros). For a filter of `k`
//! taps along an axis, `before = (k - 1) / 2` zeros go before and `k - 1 - before` after
//! ([`same_padding`]): for an even `k` one more after than before, exactly torch's rule.
//!
//! Tolerance ([`tolerance`]): a kernel sums the `k` products of an output (`k = K` in 1D,
//! `C_in KH KW` in 2D) in f32, one fused multiply-add after another, so its sum `s'` is within
//! `gamma_k M` of the exact `s`, `M = sum |x w|` over the terms, `gamma_k = k u / (1 - k u)`,
//! `u = 2^-24` (Higham, "Accuracy and Stability of Numerical Algorithms", 3.1). It then stores
//! `s'` in the output type, one more rounding of at most `u_out |s'|` (`u_out = 0` for f32,
//! `2^-8` for bf16). Together: `|y - s| <= u_out |s| + (1 + u_out) gamma_k M`, checked per
//! element (`M` differs per element: an output at the border has fewer terms). The relative L2
//! error is bounded by what random-sign roundings give: their sum grows like `sqrt(k)`, not
//! `k`, so `||y - s|| / ||s|| <= u_out + min(k, 4 sqrt(k)) u ||M|| / ||s||` (each rounding at
//! most `u M`; 4 standard deviations of a sum of `k` of them is `4 sqrt(k / 3) u M`, rounded up).
//!
//! The references read the same stored values the kernels read and compute in f64 on every
//! host core.

use common::dtype::Dtype;
use common::element::Element;
use common::measure::check::{self, CheckReport, Tolerance};
use common::reference::attention::in_parallel_pairs;

/// `(before, after)`: the zeros "same" padding puts on each side of an axis for a filter of
/// `k` taps (torch's rule: the extra one of an even `k` goes after).
pub fn same_padding(k: usize) -> (usize, usize) {
    assert!(k >= 1, "a filter has at least one tap");
    let before = (k - 1) / 2;
    (before, k - 1 - before)
}

/// The exact outputs and, per output, `sum |x w|` over its terms (what the error bound scales
/// with).
#[derive(Debug, Clone)]
pub struct ConvReference {
    pub values: Vec<f64>,
    pub magnitudes: Vec<f64>,
}

/// 1D "same" convolution of `x` with the filter `w`.
pub fn conv1d<T: Element>(x: &[T], w: &[T]) -> ConvReference {
    let xs: Vec<f64> = x.iter().map(|v| v.to_f64()).collect();
    let ws: Vec<f64> = w.iter().map(|v| v.to_f64()).collect();
    let (left, _) = same_padding(ws.len());
    let n = xs.len();
    // The work items are runs of 4096 outputs (not one item per output: 2^26 of them would
    // be a 512 MiB list).
    const RUN: usize = 4096;
    let starts: Vec<usize> = (0..n).step_by(RUN).collect();
    let (values, magnitudes) = in_parallel_pairs(&starts, |chunk| {
        chunk
            .iter()
            .flat_map(|&start| start..(start + RUN).min(n))
            .map(|i| {
                let (mut sum, mut mag) = (0.0, 0.0);
                for (j, w) in ws.iter().enumerate() {
                    if let Some(k) = (i + j).checked_sub(left).filter(|&k| k < n) {
                        let p = xs[k] * w;
                        sum += p;
                        mag += p.abs();
                    }
                }
                (sum, mag)
            })
            .unzip()
    });
    ConvReference { values, magnitudes }
}

/// The sizes of an NCHW convolution: input `[batch][in_channels][height][width]`, weights
/// `[out_channels][in_channels][kernel_h][kernel_w]`, output `[batch][out_channels][height]
/// [width]`. One image with one filter is `batch = in_channels = out_channels = 1`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Conv2dShape {
    pub batch: usize,
    pub in_channels: usize,
    pub out_channels: usize,
    pub height: usize,
    pub width: usize,
    pub kernel_h: usize,
    pub kernel_w: usize,
}

impl Conv2dShape {
    pub fn input_len(&self) -> usize {
        self.batch * self.in_channels * self.height * self.width
    }

    pub fn weight_len(&self) -> usize {
        self.out_channels * self.in_channels * self.kernel_h * self.kernel_w
    }

    pub fn output_len(&self) -> usize {
        self.batch * self.out_channels * self.height * self.width
    }

    /// Products summed into one output: `C_in KH KW`.
    pub fn terms(&self) -> usize {
        self.in_channels * self.kernel_h * self.kernel_w
    }
}

/// 2D "same" convolution, NCHW, stride 1, no bias.
pub fn conv2d_nchw<T: Element>(x: &[T], w: &[T], s: Conv2dShape) -> ConvReference {
    assert_eq!(x.len(), s.input_len(), "conv2d: x is not N x C_in x H x W");
    assert_eq!(
        w.len(),
        s.weight_len(),
        "conv2d: w is not C_out x C_in x KH x KW"
    );
    let xs: Vec<f64> = x.iter().map(|v| v.to_f64()).collect();
    let ws: Vec<f64> = w.iter().map(|v| v.to_f64()).collect();
    let (top, _) = same_padding(s.kernel_h);
    let (left, _) = same_padding(s.kernel_w);
    let (h, wd) = (s.height, s.width);
    // One item per output row (n, co, oy), in output order.
    let rows: Vec<usize> = (0..s.batch * s.out_channels * h).collect();
    let (values, magnitudes) = in_parallel_pairs(&rows, |chunk| {
        let mut sums = Vec::with_capacity(chunk.len() * wd);
        let mut mags = Vec::with_capacity(chunk.len() * wd);
        for &row in chunk {
            let (oy, plane) = (row % h, row / h);
            let (co, n) = (plane % s.out_channels, plane / s.out_channels);
            for ox in 0..wd {
                let (mut sum, mut mag) = (0.0, 0.0);
                for ci in 0..s.in_channels {
                    let xp = &xs[(n * s.in_channels + ci) * h * wd..][..h * wd];
                    let wp = &ws[(co * s.in_channels + ci) * s.kernel_h * s.kernel_w..];
                    for ky in 0..s.kernel_h {
                        let Some(iy) = (oy + ky).checked_sub(top).filter(|&r| r < h) else {
                            continue;
                        };
                        for kx in 0..s.kernel_w {
                            if let Some(ix) = (ox + kx).checked_sub(left).filter(|&c| c < wd) {
                                let p = xp[iy * wd + ix] * wp[ky * s.kernel_w + kx];
                                sum += p;
                                mag += p.abs();
                            }
                        }
                    }
                }
                sums.push(sum);
                mags.push(mag);
            }
        }
        (sums, mags)
    });
    ConvReference { values, magnitudes }
}

/// How a kernel's output is compared with a [`ConvReference`]: the per-element bound of the
/// module docs, as a relative part (`tolerance.rtol = u_out`) and an absolute part per element
/// (`slack`, `(1 + u_out) gamma_k M`).
#[derive(Debug, Clone)]
pub struct ConvCheck {
    pub tolerance: Tolerance,
    pub slack: Vec<f64>,
}

impl ConvCheck {
    pub fn compare<T: Element>(&self, got: &[T], expected: &[f64], shape: &[usize]) -> CheckReport {
        check::compare_with_slack(got, expected, &self.slack, shape, self.tolerance)
    }
}

/// Unit roundoff of storing an f32 sum as `out`.
fn output_roundoff(out: Dtype) -> f64 {
    match out {
        Dtype::F32 => 0.0,
        Dtype::Bf16 => 2f64.powi(-8),
        Dtype::F16 => 2f64.powi(-11),
        other => panic!("conv has no {other} output"),
    }
}

/// The bounds of the module docs for outputs of `terms` products summed in f32 and stored as
/// `out`.
pub fn tolerance(out: Dtype, terms: usize, reference: &ConvReference) -> ConvCheck {
    let u = 2f64.powi(-24);
    let u_out = output_roundoff(out);
    let k = terms as f64;
    let gamma = k * u / (1.0 - k * u);
    let slack: Vec<f64> = reference
        .magnitudes
        .iter()
        .map(|m| (1.0 + u_out) * gamma * m)
        .collect();
    let norm = |v: &[f64]| v.iter().map(|e| e * e).sum::<f64>().sqrt();
    let (mag_norm, ref_norm) = (norm(&reference.magnitudes), norm(&reference.values));
    let growth = k.min(4.0 * k.sqrt());
    let max_rel_l2 = if ref_norm > 0.0 {
        u_out + growth * u * mag_norm / ref_norm
    } else {
        // An all-zero reference: the L2 "relative" error is then the absolute one.
        growth * u * mag_norm
    };
    ConvCheck {
        // The floor: an output whose terms are all zero must be exactly zero.
        tolerance: Tolerance::new(1e-30, u_out).with_max_rel_l2(max_rel_l2),
        slack,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use approx::assert_relative_eq;

    #[test]
    fn same_padding_is_torchs_rule() {
        assert_eq!(same_padding(1), (0, 0));
        assert_eq!(same_padding(2), (0, 1));
        assert_eq!(same_padding(3), (1, 1));
        assert_eq!(same_padding(4), (1, 2));
        assert_eq!(same_padding(7), (3, 3));
        assert_eq!(same_padding(31), (15, 15));
    }

    #[test]
    fn conv1d_known_values_odd_and_even_widths() {
        let x = [1.0f32, 2.0, 3.0, 4.0];
        // Width 3: y[i] = x[i-1] w0 + x[i] w1 + x[i+1] w2.
        let r = conv1d(&x, &[1.0f32, 10.0, 100.0]);
        assert_eq!(r.values, vec![210.0, 321.0, 432.0, 43.0]);
        assert_eq!(r.magnitudes, r.values);
        // Width 2 (torch: left 0, right 1): y[i] = x[i] w0 + x[i+1] w1.
        let r = conv1d(&x, &[1.0f32, -10.0]);
        assert_eq!(r.values, vec![-19.0, -28.0, -37.0, 4.0]);
        assert_eq!(r.magnitudes, vec![21.0, 32.0, 43.0, 4.0]);
        // Width 4 (left 1, right 2).
        let r = conv1d(&x, &[1.0f32, 10.0, 100.0, 1000.0]);
        assert_eq!(r.values, vec![3210.0, 4321.0, 432.0, 43.0]);
    }

    #[test]
    fn a_one_tap_filter_scales_and_a_delta_shifts() {
        let x: Vec<f32> = (0..9).map(|i| (i as f32 * 0.7).sin()).collect();
        let r = conv1d(&x, &[-2.0f32]);
        for (y, x) in r.values.iter().zip(&x) {
            assert_eq!(*y, -2.0 * f64::from(*x));
        }
        // A 5-tap delta at the last tap reads x[i + 2].
        let r = conv1d(&x, &[0.0f32, 0.0, 0.0, 0.0, 1.0]);
        let shifted: Vec<f64> = x[2..].iter().map(|v| f64::from(*v)).collect();
        assert_eq!(r.values[..7], shifted[..]);
        assert_eq!(r.values[7..], [0.0, 0.0]);
    }

    #[test]
    fn conv1d_over_several_runs_of_outputs_keeps_their_order() {
        // 10000 outputs are three runs of 4096 (the last one short), spread over threads.
        let x: Vec<f32> = (0..10_000).map(|i| i as f32).collect();
        let r = conv1d(&x, &[1.0f32, 0.0, -1.0]);
        assert_eq!(r.values.len(), 10_000);
        assert_eq!(r.values[0], -1.0);
        // x[i - 1] - x[i + 1] = -2 inside.
        assert!(r.values[1..9_999].iter().all(|&v| v == -2.0));
        assert_eq!(r.values[9_999], 9_998.0);
    }

    #[test]
    fn conv2d_single_channel_known_values() {
        let s = Conv2dShape {
            batch: 1,
            in_channels: 1,
            out_channels: 1,
            height: 2,
            width: 3,
            kernel_h: 2,
            kernel_w: 2,
        };
        // 2 x 2 filter: top 0, left 0, so y[r][c] = x[r][c] + 10 x[r][c+1] + 100 x[r+1][c] +
        // 1000 x[r+1][c+1], zeros past the bottom and right edges.
        let x = [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0];
        let r = conv2d_nchw(&x, &[1.0f32, 10.0, 100.0, 1000.0], s);
        assert_eq!(r.values, vec![5421.0, 6532.0, 603.0, 54.0, 65.0, 6.0]);
    }

    #[test]
    fn conv2d_of_a_row_filter_is_conv1d_per_row_and_channels_add() {
        let (h, w) = (3, 11);
        let x: Vec<f32> = (0..2 * h * w)
            .map(|i| ((i * 37 % 17) as f32) - 8.5)
            .collect();
        let f = [0.5f32, -1.25, 2.0, 0.75];
        let one = Conv2dShape {
            batch: 2,
            in_channels: 1,
            out_channels: 1,
            height: h,
            width: w,
            kernel_h: 1,
            kernel_w: 4,
        };
        let r = conv2d_nchw(&x, &f, one);
        for row in 0..2 * h {
            let expect = conv1d(&x[row * w..][..w], &f);
            assert_eq!(r.values[row * w..][..w], expect.values[..]);
        }
        // The two images as two input channels of one, into two output channels: out 0 takes
        // f on channel 0 and 2f on channel 1; out 1 takes -f on channel 0 only.
        let two = Conv2dShape {
            batch: 1,
            in_channels: 2,
            out_channels: 2,
            ..one
        };
        let scaled = |a: f32| f.map(|v| v * a);
        let weights: Vec<f32> = [scaled(1.0), scaled(2.0), scaled(-1.0), scaled(0.0)].concat();
        let r2 = conv2d_nchw(&x, &weights, two);
        let plane = h * w;
        for i in 0..plane {
            assert_relative_eq!(r2.values[i], r.values[i] + 2.0 * r.values[plane + i]);
            assert_relative_eq!(r2.values[plane + i], -r.values[i]);
        }
    }

    #[test]
    fn tolerance_follows_the_terms_and_the_output_type() {
        let r = ConvReference {
            values: vec![1.003, -2.0],
            magnitudes: vec![4.0, 8.0],
        };
        let f32_check = tolerance(Dtype::F32, 7, &r);
        let gamma = 7.0 * 2f64.powi(-24) / (1.0 - 7.0 * 2f64.powi(-24));
        assert_eq!(f32_check.tolerance.rtol, 0.0);
        assert_relative_eq!(f32_check.slack[1], 8.0 * gamma);
        let bf16_check = tolerance(Dtype::Bf16, 7, &r);
        assert_eq!(bf16_check.tolerance.rtol, 2f64.powi(-8));
        assert!(bf16_check.tolerance.max_rel_l2 > 2f64.powi(-8));
        // 1.003 lies between the bf16 neighbours 1 and 1.0078125: the nearer one passes (one
        // rounding), the farther one does not.
        let near = [half::bf16::from_f64(1.0), half::bf16::from_f64(-2.0)];
        assert!(bf16_check.compare(&near, &r.values, &[2]).passed());
        let far = [half::bf16::from_f64(1.0078125), half::bf16::from_f64(-2.0)];
        assert!(!bf16_check.compare(&far, &r.values, &[2]).passed());
    }
}
