//! Row normalizations and their gradients: RMSNorm and LayerNorm over the last dimension.
//!
//! RMSNorm:   `y = x * rstd * w`,                `rstd = 1 / sqrt(mean(x^2) + eps)`
//! LayerNorm: `y = (x - mean) * rstd * w + b`,   `rstd = 1 / sqrt(mean((x - mean)^2) + eps)`
//!
//! (the biased variance, as torch uses). With `xhat` the normalized row and `g = w * dy` the
//! upstream gradient seen through the weight, the gradients of `L = sum(y * dy)` are
//!
//! RMSNorm:   `dx = rstd * (g - xhat * mean(g * xhat))`
//! LayerNorm: `dx = rstd * (g - mean(g) - xhat * mean(g * xhat))`
//! both:      `dw[c] = sum over rows of dy * xhat`,  LayerNorm: `db[c] = sum over rows of dy`
//!
//! Everything here is f64 from the stored values the kernels read; the unit tests check the
//! gradients against finite differences of the forward.
//!
//! ## Tolerances
//!
//! A kernel computes in f32. Its error in a sum of `n` terms added one after another is at most
//! about `n * 2^-24` times the sum of the terms' magnitudes (recursive summation; a tree adds
//! its depth instead of its width). Each version says how many terms its longest chain has:
//! `row_terms` for the reductions along a row (each thread's sequential share plus the tree),
//! `col_terms` for the column sums of the weight gradients (rows per block, then the chain of
//! the final reduction). Then, per output:
//!
//! - RMSNorm forward: every step is a product or a sum of positive terms, so the error is
//!   relative: `(row_terms + 8) * 2^-24` (the 8 covers rsqrt's 2 ulp and the multiplies).
//! - LayerNorm forward: the mean is a sum of mixed signs, its error is absolute, up to
//!   `row_terms * 2^-24 * max|x|`, and reaches `y` multiplied by `rstd * |w|`; adding `b` to
//!   `xhat * w` can cancel. So an absolute term `(row_terms + 8) * 2^-24 * scale`, where
//!   [`Forward::error_scale`] bounds those magnitudes from the data.
//! - dx: `g - xhat * c` cancels by design (the gradient is orthogonal to `x` for RMSNorm, sums
//!   to zero for LayerNorm), so the error is absolute, `(row_terms + 8) * 2^-24` times
//!   dx's [`Gradient::scale`] (`rstd` times the magnitudes that meet in the subtraction).
//! - dweight, dbias: column sums of `rows` terms of both signs: absolute error up to
//!   `(col_terms + row_terms + 16) * 2^-24` times the largest column sum of magnitudes
//!   (`row_terms` because each term carries its row's `rstd` error).
//!
//! Outputs stored as f16/bf16 add their rounding (half an ulp: 2^-11, 2^-8 relative) as in
//! [`super::softmax::tolerance_for`]. On average errors are far below these bounds, so the
//! relative L2 error must stay under 1e-5 (f32), 1e-3 (f16), 5e-3 (bf16) whatever the bound.

use crate::dtype::Dtype;
use crate::element::Element;
use crate::measure::check::Tolerance;

/// Which normalization.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Rms,
    Layer,
}

const UNIT_ROUNDOFF: f64 = 1.0 / 16_777_216.0; // 2^-24

/// Half an ulp of `T` relative, the absolute floor where `T` turns subnormal, and the bound on
/// the relative L2 error of outputs stored as `T`.
fn storage_rounding<T: Element>() -> (f64, f64, f64) {
    match T::DTYPE {
        Dtype::F32 => (0.0, 1e-12, 1e-5),
        Dtype::F16 => (2f64.powi(-11), 2f64.powi(-24), 1e-3),
        Dtype::Bf16 => (2f64.powi(-8), 1e-12, 5e-3),
        integer => panic!("normalization outputs are floats, not {integer}"),
    }
}

/// An output computed in f32 with chains of `terms` sequential additions, whose absolute
/// error is measured against `scale`, stored as `T`.
fn tolerance<T: Element>(terms: usize, scale: f64) -> Tolerance {
    let (half_ulp, atol_floor, max_rel_l2) = storage_rounding::<T>();
    let gamma = (terms as f64 + 8.0) * UNIT_ROUNDOFF;
    Tolerance::new(atol_floor + gamma * scale, gamma.max(1e-5) + half_ulp)
        .with_max_rel_l2(max_rel_l2)
}

/// The forward's tolerance (see the module's notes): `row_terms` is the longest chain of f32
/// additions in the row statistics.
pub fn forward_tolerance<T: Element>(forward: &Forward, row_terms: usize) -> Tolerance {
    tolerance::<T>(row_terms, forward.error_scale)
}

/// The tolerances of dx, dweight and dbias (see the module's notes).
pub fn backward_tolerances<T: Element>(
    grads: &Gradients,
    row_terms: usize,
    col_terms: usize,
) -> [Tolerance; 3] {
    [
        tolerance::<T>(row_terms, grads.dx.scale),
        tolerance::<T>(col_terms + row_terms + 8, grads.dweight.scale),
        tolerance::<T>(col_terms + 8, grads.dbias.scale),
    ]
}

/// A forward pass: the output, and the magnitude its absolute errors scale with (0 for
/// RMSNorm, whose errors are all relative).
#[derive(Debug, Clone)]
pub struct Forward {
    pub y: Vec<f64>,
    pub error_scale: f64,
}

/// A backward pass: the three gradients (`dbias` empty for RMSNorm).
#[derive(Debug, Clone)]
pub struct Gradients {
    pub dx: Gradient,
    pub dweight: Gradient,
    pub dbias: Gradient,
}

/// One gradient, and the magnitude its absolute errors scale with.
#[derive(Debug, Clone)]
pub struct Gradient {
    pub values: Vec<f64>,
    pub scale: f64,
}

impl Gradients {
    /// dx, dweight and dbias back to back, the layout of the backward kernels' output.
    pub fn concatenated(&self) -> Vec<f64> {
        [
            &self.dx.values[..],
            &self.dweight.values,
            &self.dbias.values,
        ]
        .concat()
    }
}

fn to_f64<T: Element>(v: &[T]) -> Vec<f64> {
    v.iter().map(|e| e.to_f64()).collect()
}

/// Mean (0 for RMSNorm) and rstd of one row.
fn row_stats(kind: Kind, row: &[f64], eps: f64) -> (f64, f64) {
    let n = row.len() as f64;
    let mean = match kind {
        Kind::Rms => 0.0,
        Kind::Layer => row.iter().sum::<f64>() / n,
    };
    let second_moment = row.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / n;
    (mean, 1.0 / (second_moment + eps).sqrt())
}

fn max_abs(v: &[f64]) -> f64 {
    v.iter().fold(0.0, |m, x| m.max(x.abs()))
}

fn check_lengths(x: usize, w: usize, rows: usize, cols: usize) {
    assert_eq!(x, rows * cols, "normalization: x is not rows x cols");
    assert_eq!(w, cols, "normalization: the weight is not cols long");
}

/// The forward of `kind` on f64 values; `b` is ignored by RMSNorm.
pub fn forward_f64(
    kind: Kind,
    x: &[f64],
    w: &[f64],
    b: &[f64],
    rows: usize,
    cols: usize,
    eps: f64,
) -> Forward {
    check_lengths(x.len(), w.len(), rows, cols);
    let (w_max, b_max) = (
        max_abs(w),
        if kind == Kind::Layer { max_abs(b) } else { 0.0 },
    );
    let mut y = Vec::with_capacity(x.len());
    let mut error_scale: f64 = 0.0;
    for row in x.chunks_exact(cols.max(1)).take(rows) {
        let (mean, rstd) = row_stats(kind, row, eps);
        for (c, v) in row.iter().enumerate() {
            let shift = if kind == Kind::Layer { b[c] } else { 0.0 };
            y.push((v - mean) * rstd * w[c] + shift);
        }
        if kind == Kind::Layer {
            error_scale = error_scale.max(2.0 * rstd * max_abs(row) * w_max + b_max);
        }
    }
    Forward { y, error_scale }
}

/// The gradients of `kind` on f64 values, for the upstream gradient `dy`.
pub fn backward_f64(
    kind: Kind,
    x: &[f64],
    w: &[f64],
    dy: &[f64],
    rows: usize,
    cols: usize,
    eps: f64,
) -> Gradients {
    check_lengths(x.len(), w.len(), rows, cols);
    assert_eq!(dy.len(), x.len(), "normalization: dy is not rows x cols");
    let n = cols as f64;
    let mut dx = Vec::with_capacity(x.len());
    let mut dweight = vec![0.0; cols];
    let mut dbias = vec![0.0; if kind == Kind::Layer { cols } else { 0 }];
    // Per column, the sums of magnitudes that the f32 column sums accumulate.
    let mut dweight_magnitude = vec![0.0f64; cols];
    let mut dbias_magnitude = vec![0.0f64; cols];
    let mut dx_scale: f64 = 0.0;
    for (row, dy_row) in x
        .chunks_exact(cols.max(1))
        .zip(dy.chunks_exact(cols.max(1)))
    {
        let (mean, rstd) = row_stats(kind, row, eps);
        let xhat: Vec<f64> = row.iter().map(|v| (v - mean) * rstd).collect();
        let g: Vec<f64> = dy_row.iter().zip(w).map(|(d, w)| d * w).collect();
        let mean_g = match kind {
            Kind::Rms => 0.0,
            Kind::Layer => g.iter().sum::<f64>() / n,
        };
        let mean_g_xhat = g.iter().zip(&xhat).map(|(g, h)| g * h).sum::<f64>() / n;
        // LayerNorm's xhat carries the mean's error, rstd * row_terms * u * max|x|.
        let xhat_error = match kind {
            Kind::Rms => 0.0,
            Kind::Layer => rstd * max_abs(row),
        };
        for c in 0..cols {
            dx.push(rstd * (g[c] - mean_g - xhat[c] * mean_g_xhat));
            dweight[c] += dy_row[c] * xhat[c];
            dweight_magnitude[c] += dy_row[c].abs() * (xhat[c].abs() + xhat_error);
            if kind == Kind::Layer {
                dbias[c] += dy_row[c];
                dbias_magnitude[c] += dy_row[c].abs();
            }
        }
        let (g_max, xhat_max) = (max_abs(&g), max_abs(&xhat));
        let g_xhat_max = g
            .iter()
            .zip(&xhat)
            .fold(0.0f64, |m, (g, h)| m.max((g * h).abs()));
        let mean_error = match kind {
            Kind::Rms => 0.0,
            Kind::Layer => g_max + rstd * max_abs(row) * g_xhat_max,
        };
        dx_scale = dx_scale.max(rstd * (g_max + 3.0 * xhat_max * g_xhat_max + mean_error));
    }
    Gradients {
        dx: Gradient {
            values: dx,
            scale: dx_scale,
        },
        dweight: Gradient {
            values: dweight,
            scale: max_abs(&dweight_magnitude),
        },
        dbias: Gradient {
            values: dbias,
            scale: max_abs(&dbias_magnitude),
        },
    }
}

/// RMSNorm of each row of `x` (`rows x cols`), scaled by `w`.
pub fn rms_norm<T: Element>(x: &[T], w: &[T], rows: usize, cols: usize, eps: f64) -> Forward {
    forward_f64(Kind::Rms, &to_f64(x), &to_f64(w), &[], rows, cols, eps)
}

/// LayerNorm of each row of `x` (`rows x cols`), scaled by `w`, shifted by `b`.
pub fn layer_norm<T: Element>(
    x: &[T],
    w: &[T],
    b: &[T],
    rows: usize,
    cols: usize,
    eps: f64,
) -> Forward {
    assert_eq!(b.len(), cols, "layer_norm: the bias is not cols long");
    let (x, w, b) = (to_f64(x), to_f64(w), to_f64(b));
    forward_f64(Kind::Layer, &x, &w, &b, rows, cols, eps)
}

/// The gradients of `kind` for stored inputs.
pub fn backward<T: Element>(
    kind: Kind,
    x: &[T],
    w: &[T],
    dy: &[T],
    rows: usize,
    cols: usize,
    eps: f64,
) -> Gradients {
    backward_f64(kind, &to_f64(x), &to_f64(w), &to_f64(dy), rows, cols, eps)
}

#[cfg(test)]
mod tests {
    use super::*;
    use approx::assert_relative_eq;

    fn wave(n: usize, phase: f64, offset: f64) -> Vec<f64> {
        (0..n)
            .map(|i| (i as f64 * 0.73 + phase).sin() * 1.7 + offset)
            .collect()
    }

    #[test]
    fn rms_norm_known_values() {
        let out = rms_norm(&[1.0f32, 2.0, 3.0], &[1.0f32, 1.0, 2.0], 1, 3, 0.0);
        let rms = (14.0f64 / 3.0).sqrt();
        assert_relative_eq!(out.y[0], 1.0 / rms, max_relative = 1e-15);
        assert_relative_eq!(out.y[2], 6.0 / rms, max_relative = 1e-15);
        assert_relative_eq!(out.y[1], 0.925_820_099_772_551_5, max_relative = 1e-15);
        assert_eq!(out.error_scale, 0.0);
    }

    #[test]
    fn layer_norm_known_values() {
        let out = layer_norm(&[1.0f32, 2.0, 3.0], &[1.0f32; 3], &[0.5f32; 3], 1, 3, 0.0);
        let s = 1.5f64.sqrt(); // 1 / sqrt(2/3)
        assert_relative_eq!(out.y[0], 0.5 - s, max_relative = 1e-15);
        assert_relative_eq!(out.y[1], 0.5, max_relative = 1e-15);
        assert_relative_eq!(out.y[2], 0.5 + s, max_relative = 1e-15);
    }

    #[test]
    fn eps_keeps_a_constant_row_finite() {
        let out = layer_norm(&[4.0f32; 5], &[1.0f32; 5], &[0.25f32; 5], 1, 5, 1e-5);
        assert!(out.y.iter().all(|&v| v == 0.25));
        let out = rms_norm(&[0.0f32; 3], &[1.0f32; 3], 1, 3, 1e-6);
        assert!(out.y.iter().all(|&v| v == 0.0));
    }

    #[test]
    fn rows_are_independent() {
        let x: Vec<f32> = wave(12, 0.3, 0.5).iter().map(|&v| v as f32).collect();
        let w: Vec<f32> = vec![1.5, 0.5, 1.0, 2.0];
        let all = rms_norm(&x, &w, 3, 4, 1e-6);
        for r in 0..3 {
            let alone = rms_norm(&x[r * 4..r * 4 + 4], &w, 1, 4, 1e-6);
            assert_eq!(&all.y[r * 4..r * 4 + 4], &alone.y[..]);
        }
    }

    #[test]
    fn layer_norm_ignores_a_shift_and_rms_norm_a_scale() {
        let x = wave(16, 0.1, 0.0);
        let w = wave(8, 2.0, 1.5);
        let b = wave(8, 4.0, 0.0);
        let shifted: Vec<f64> = x.iter().map(|v| v + 3.0).collect();
        let scaled: Vec<f64> = x.iter().map(|v| v * 7.0).collect();
        let (a, s) = (
            forward_f64(Kind::Layer, &x, &w, &b, 2, 8, 0.0),
            forward_f64(Kind::Layer, &shifted, &w, &b, 2, 8, 0.0),
        );
        for (p, q) in a.y.iter().zip(&s.y) {
            assert_relative_eq!(*p, *q, epsilon = 1e-12);
        }
        let (a, s) = (
            forward_f64(Kind::Rms, &x, &w, &[], 2, 8, 0.0),
            forward_f64(Kind::Rms, &scaled, &w, &[], 2, 8, 0.0),
        );
        for (p, q) in a.y.iter().zip(&s.y) {
            assert_relative_eq!(*p, *q, epsilon = 1e-12);
        }
    }

    /// `L = sum(forward(x, w, b) * dy)`, the loss whose gradients `backward_f64` returns.
    fn loss(kind: Kind, x: &[f64], w: &[f64], b: &[f64], dy: &[f64], cols: usize) -> f64 {
        let rows = x.len() / cols;
        let y = forward_f64(kind, x, w, b, rows, cols, 1e-5).y;
        y.iter().zip(dy).map(|(y, d)| y * d).sum()
    }

    /// Central differences of `loss` in each element of `v` (which `set` writes back).
    fn numeric_gradient(v: &[f64], mut loss_at: impl FnMut(&[f64]) -> f64) -> Vec<f64> {
        let h = 1e-6;
        (0..v.len())
            .map(|i| {
                let mut p = v.to_vec();
                p[i] += h;
                let up = loss_at(&p);
                p[i] -= 2.0 * h;
                (up - loss_at(&p)) / (2.0 * h)
            })
            .collect()
    }

    fn assert_close(analytic: &[f64], numeric: &[f64], what: &str) {
        assert_eq!(analytic.len(), numeric.len(), "{what}: lengths");
        for (i, (a, n)) in analytic.iter().zip(numeric).enumerate() {
            assert!(
                (a - n).abs() <= 1e-6 + 1e-6 * n.abs(),
                "{what}[{i}]: analytic {a}, finite differences {n}"
            );
        }
    }

    fn gradients_match_finite_differences(kind: Kind) {
        let (rows, cols) = (3, 7);
        let x = wave(rows * cols, 0.2, 0.8);
        let w = wave(cols, 1.1, 1.0);
        let b = wave(cols, 2.3, 0.0);
        let dy = wave(rows * cols, 3.7, 0.1);
        let grads = backward_f64(kind, &x, &w, &dy, rows, cols, 1e-5);
        let dx = numeric_gradient(&x, |x| loss(kind, x, &w, &b, &dy, cols));
        assert_close(&grads.dx.values, &dx, "dx");
        let dw = numeric_gradient(&w, |w| loss(kind, &x, w, &b, &dy, cols));
        assert_close(&grads.dweight.values, &dw, "dweight");
        if kind == Kind::Layer {
            let db = numeric_gradient(&b, |b| loss(kind, &x, &w, b, &dy, cols));
            assert_close(&grads.dbias.values, &db, "dbias");
        } else {
            assert!(grads.dbias.values.is_empty());
        }
    }

    #[test]
    fn rms_norm_gradients_match_finite_differences() {
        gradients_match_finite_differences(Kind::Rms);
    }

    #[test]
    fn layer_norm_gradients_match_finite_differences() {
        gradients_match_finite_differences(Kind::Layer);
    }

    #[test]
    fn dx_is_orthogonal_to_what_the_norm_ignores() {
        let (rows, cols) = (2, 9);
        let x = wave(rows * cols, 0.4, 0.6);
        let w = wave(cols, 1.9, 1.0);
        let dy = wave(rows * cols, 2.9, 0.0);
        // LayerNorm ignores a shift of the row: each row of dx sums to zero.
        let grads = backward_f64(Kind::Layer, &x, &w, &dy, rows, cols, 1e-5);
        for row in grads.dx.values.chunks(cols) {
            assert!(row.iter().sum::<f64>().abs() < 1e-12);
        }
        // RMSNorm (eps = 0) ignores a scale of the row: dx . x = 0 per row.
        let grads = backward_f64(Kind::Rms, &x, &w, &dy, rows, cols, 0.0);
        for (dx, x) in grads.dx.values.chunks(cols).zip(x.chunks(cols)) {
            let dot: f64 = dx.iter().zip(x).map(|(a, b)| a * b).sum();
            assert!(dot.abs() < 1e-12, "{dot}");
        }
    }

    #[test]
    fn concatenated_gradients_are_dx_then_dweight_then_dbias() {
        let grads = backward::<f32>(
            Kind::Layer,
            &[1.0, 2.0, 4.0, 3.0],
            &[1.0, 1.0],
            &[1.0; 4],
            2,
            2,
            0.0,
        );
        let all = grads.concatenated();
        assert_eq!(all.len(), 4 + 2 + 2);
        assert_eq!(&all[4..6], &grads.dweight.values[..]);
        assert_eq!(&all[6..], &[2.0, 2.0]);
    }

    #[test]
    fn tolerances_grow_with_chains_and_storage() {
        let fwd = Forward {
            y: vec![],
            error_scale: 0.0,
        };
        let t = forward_tolerance::<f32>(&fwd, 32);
        assert_eq!(t.rtol, 1e-5);
        assert_eq!(t.max_rel_l2, 1e-5);
        assert_relative_eq!(
            forward_tolerance::<f32>(&fwd, 4096).rtol,
            4104.0 * UNIT_ROUNDOFF
        );
        assert_relative_eq!(
            forward_tolerance::<half::bf16>(&fwd, 32).rtol,
            1e-5 + 1.0 / 256.0
        );
        let scaled = |scale| Gradient {
            values: vec![],
            scale,
        };
        let grads = Gradients {
            dx: scaled(2.0),
            dweight: scaled(1000.0),
            dbias: scaled(10.0),
        };
        let [dx, dw, db] = backward_tolerances::<f32>(&grads, 40, 100);
        assert_relative_eq!(dx.atol, 1e-12 + 48.0 * UNIT_ROUNDOFF * 2.0);
        assert_relative_eq!(dw.atol, 1e-12 + 156.0 * UNIT_ROUNDOFF * 1000.0);
        assert_relative_eq!(db.atol, 1e-12 + 116.0 * UNIT_ROUNDOFF * 10.0);
    }
}
