//! Element-wise activations and their gradients, and the fused bias + dropout mask + scale +
//! residual add of a transformer block's output.
//!
//! - GELU, tanh form (`F.gelu(x, approximate="tanh")`): `gelu(x) = x/2 (1 + tanh(u))`,
//!   `u = sqrt(2/pi) (x + 0.044715 x^3)`. Since `(1 + tanh(u)) / 2 = sigmoid(2u)`, this is also
//!   `x sigmoid(2u)`, the form the kernels use (no cancellation in `1 + tanh` for x < 0).
//!   Gradient: `sigmoid(2u) + x sigmoid(2u) (1 - sigmoid(2u)) 2u'`, `u' = sqrt(2/pi) (1 + 3
//!   0.044715 x^2)`.
//! - GELU, exact (`F.gelu(x)`): `gelu(x) = x Phi(x) = x/2 (1 + erf(x / sqrt 2))`. Gradient:
//!   `Phi(x) + x phi(x)`, `phi(x) = exp(-x^2/2) / sqrt(2 pi)`.
//! - SwiGLU's gate (`F.silu(g) * x`): `out = silu(g) x = g sigmoid(g) x`. Gradients, for an
//!   upstream `dout`: `dg = dout x sigmoid(g) (1 + g (1 - sigmoid(g)))`, `dx = dout silu(g)`.
//! - Bias-dropout-add (the challenge's "fused bias, mask, scale and add"): for a `rows x cols`
//!   `x`, a bias of `cols`, a keep mask of 0/1 bytes and a residual,
//!   `out[r][c] = residual[r][c] + (x[r][c] + bias[c]) * (mask[r][c] != 0 ? scale : 0)`,
//!   `scale = 1 / (1 - p)` for a dropout probability `p`: the `bias_dropout_add` of
//!   Megatron-style transformer blocks, done in one pass instead of four.
//!
//! - The piecewise-linear activations, as torch's CUDA kernels define them, including the points
//!   where the derivative does not exist and what NaN does (a comparison with NaN is false, so
//!   which way it is written decides where a NaN goes):
//!   - ReLU (`F.relu`, torch's `clamp_min(x, 0)`): `x <= 0 ? 0 : x`; NaN stays NaN.
//!     Backward (`aten.threshold_backward(dy, x, 0)`): `x <= 0 ? 0 : dy`: 0 at x = 0 and
//!     x = -0.0, and `dy` where x is NaN (the comparison is false).
//!   - Leaky ReLU (`F.leaky_relu`, slope 0.01 by default): `x > 0 ? x : x slope`. Backward
//!     (`aten.leaky_relu_backward`): `x > 0 ? dy : dy slope`: `dy slope` at x = 0 and where x is
//!     NaN.
//!   - HardTanh (`F.hardtanh`, torch's `clamp(x, min_val, max_val)`, -1 and 1 by default):
//!     NaN stays NaN, infinities go to the bounds. Backward (`aten.hardtanh_backward`):
//!     `x <= min_val || x >= max_val ? 0 : dy`: 0 at both bounds (the open interval), `dy`
//!     where x is NaN.
//! - SiLU (`F.silu`): `silu(x) = x sigmoid(x)`. Backward (`aten.silu_backward`): `dy s (1 + x
//!   (1 - s))`, `s = sigmoid(x)`; torch's f32 evaluation makes it NaN at x = +-inf (`inf * 0`),
//!   and so does this f64 one.
//!
//! The backward passes take `dy` and return the product, not a derivative to multiply by: a
//! derivative of 0 times a NaN or infinite `dy` would be NaN, where torch's select gives 0.
//!
//! f64 has no `erf` in std; [`erf`] below is accurate to ~1e-16 (checked against tabulated
//! values), far below any f32 kernel's error.

use common::dtype::Dtype;
use common::element::Element;
use common::measure::check::Tolerance;

const SQRT_2_OVER_PI: f64 = 0.797_884_560_802_865_4;
const GELU_CUBIC: f64 = 0.044_715;

fn sigmoid(v: f64) -> f64 {
    if v >= 0.0 {
        1.0 / (1.0 + (-v).exp())
    } else {
        let e = v.exp();
        e / (1.0 + e)
    }
}

fn tanh_inner(x: f64) -> f64 {
    SQRT_2_OVER_PI * (x + GELU_CUBIC * x * x * x)
}

pub fn gelu_tanh(x: f64) -> f64 {
    x * sigmoid(2.0 * tanh_inner(x))
}

pub fn gelu_tanh_grad(x: f64) -> f64 {
    let s = sigmoid(2.0 * tanh_inner(x));
    let du = SQRT_2_OVER_PI * (1.0 + 3.0 * GELU_CUBIC * x * x);
    s + x * s * (1.0 - s) * 2.0 * du
}

/// The standard normal CDF.
fn phi_cdf(x: f64) -> f64 {
    0.5 * erfc(-x / std::f64::consts::SQRT_2)
}

pub fn gelu_erf(x: f64) -> f64 {
    x * phi_cdf(x)
}

pub fn gelu_erf_grad(x: f64) -> f64 {
    let density = (-0.5 * x * x).exp() / (2.0 * std::f64::consts::PI).sqrt();
    phi_cdf(x) + x * density
}

pub fn silu(g: f64) -> f64 {
    g * sigmoid(g)
}

pub fn swiglu(g: f64, x: f64) -> f64 {
    silu(g) * x
}

/// `(dg, dx)` of `swiglu(g, x)` for an upstream gradient `dout`.
pub fn swiglu_grad(g: f64, x: f64, dout: f64) -> (f64, f64) {
    let s = sigmoid(g);
    (dout * x * s * (1.0 + g * (1.0 - s)), dout * silu(g))
}

/// `F.relu`: NaN stays NaN (`NaN <= 0` is false); -0.0 gives +0.
pub fn relu(x: f64) -> f64 {
    if x <= 0.0 { 0.0 } else { x }
}

/// `aten.threshold_backward(dy, x, 0)`, what autograd runs for `F.relu`: `dy` only where x > 0
/// or x is NaN; 0 at x = 0 (torch's choice at the kink), whatever `dy` is.
pub fn relu_backward(dy: f64, x: f64) -> f64 {
    if x <= 0.0 { 0.0 } else { dy }
}

/// `F.leaky_relu(x, negative_slope)`.
pub fn leaky_relu(x: f64, negative_slope: f64) -> f64 {
    if x > 0.0 { x } else { x * negative_slope }
}

/// `aten.leaky_relu_backward(dy, x, negative_slope, false)`: the slope at x = 0 and for NaN.
pub fn leaky_relu_backward(dy: f64, x: f64, negative_slope: f64) -> f64 {
    if x > 0.0 { dy } else { dy * negative_slope }
}

/// `F.hardtanh(x, min_val, max_val)` (torch's `clamp`): NaN stays NaN.
pub fn hardtanh(x: f64, min_val: f64, max_val: f64) -> f64 {
    if x < min_val {
        min_val
    } else if x > max_val {
        max_val
    } else {
        x
    }
}

/// `aten.hardtanh_backward(dy, x, min_val, max_val)`: `dy` on the open interval and for NaN,
/// 0 at the bounds and outside.
pub fn hardtanh_backward(dy: f64, x: f64, min_val: f64, max_val: f64) -> f64 {
    if x <= min_val || x >= max_val {
        0.0
    } else {
        dy
    }
}

/// `aten.silu_backward(dy, x)`: `dy s (1 + x (1 - s))`, with `1 - s` taken as `sigmoid(-x)`
/// so that it keeps its digits where s is near 1.
pub fn silu_backward(dy: f64, x: f64) -> f64 {
    dy * sigmoid(x) * (1.0 + x * sigmoid(-x))
}

/// `v` as a kernel that computes in f32 and stores `T` returns it: rounded to f32, then to `T`
/// (both to nearest even, as the GPU's `cvt.rn`). For the piecewise-linear ops this is the
/// whole error: their f32 result is an input, a bound, 0, or one product of two f32 values,
/// which f64 holds exactly, so rounding it to f32 here is the kernel's own rounding.
pub fn round_as_stored<T: Element>(v: f64) -> f64 {
    T::from_f64(v as f32 as f64).to_f64()
}

/// The tolerance of the piecewise-linear ops (ReLU, leaky ReLU, HardTanh and their backward
/// passes), whose reference goes through [`round_as_stored`]: none. The kernel and the
/// rounded reference make the same roundings, so every element must match exactly (NaN where
/// the reference is NaN, the same infinity; -0.0 and +0.0 compare equal).
pub const fn exact_tolerance() -> Tolerance {
    Tolerance::new(0.0, 0.0)
}

/// `erf` in f64: a Taylor series for |x| < 2.5 (terms alternate and shrink fast enough that
/// 60 of them leave ~1e-16), the continued fraction of `erfc` beyond (Lentz's method).
pub fn erf(x: f64) -> f64 {
    if x.abs() < 2.5 {
        // erf(x) = 2/sqrt(pi) * sum_k (-1)^k x^(2k+1) / (k! (2k+1))
        let x2 = x * x;
        let mut term = x; // (-1)^k x^(2k+1) / k!
        let mut sum = x;
        for k in 1..80 {
            term *= -x2 / k as f64;
            let add = term / (2 * k + 1) as f64;
            sum += add;
            if add.abs() < 1e-17 * sum.abs() {
                break;
            }
        }
        sum * 2.0 / std::f64::consts::PI.sqrt()
    } else {
        x.signum() * (1.0 - erfc_continued_fraction(x.abs()))
    }
}

/// `1 - erf(x)`, without the cancellation for large positive x.
pub fn erfc(x: f64) -> f64 {
    if x >= 2.5 {
        erfc_continued_fraction(x)
    } else {
        1.0 - erf(x)
    }
}

/// erfc(x) for x >= 2.5: `exp(-x^2)/sqrt(pi) * 1/(x + (1/2)/(x + 1/(x + (3/2)/(x + ...))))`.
fn erfc_continued_fraction(x: f64) -> f64 {
    let tiny = 1e-300;
    // Modified Lentz for b0 + a1/(b1 + a2/(b2 + ...)) with b_k = x, a_k = k/2.
    let mut f = x;
    let mut c = x;
    let mut d = 0.0;
    for k in 1..200 {
        let a = k as f64 / 2.0;
        d = x + a * d;
        d = if d == 0.0 { tiny } else { 1.0 / d };
        c = x + a / c;
        if c == 0.0 {
            c = tiny;
        }
        let delta = c * d;
        f *= delta;
        if (delta - 1.0).abs() < 1e-16 {
            break;
        }
    }
    (-x * x).exp() / std::f64::consts::PI.sqrt() / f
}

/// `out = residual + (x + bias[col]) * (mask != 0 ? scale : 0)` over a `rows x cols` matrix.
pub fn bias_dropout_add<T: Element>(
    x: &[T],
    bias: &[T],
    mask: &[u8],
    residual: &[T],
    scale: f32,
    cols: usize,
) -> Vec<f64> {
    assert!(
        cols > 0 && bias.len() == cols,
        "bias must have `cols` elements"
    );
    assert!(x.len() == mask.len() && x.len() == residual.len() && x.len().is_multiple_of(cols));
    let scale = scale as f64;
    x.iter()
        .zip(mask)
        .zip(residual)
        .enumerate()
        .map(|(i, ((x, &m), r))| {
            let keep = if m != 0 { scale } else { 0.0 };
            r.to_f64() + (x.to_f64() + bias[i % cols].to_f64()) * keep
        })
        .collect()
}

/// Tolerance of an activation computed in f32 and stored as `T`, rounded to `T` `roundings`
/// times on the way (1 for a fused kernel; 2 when an intermediate is stored as `T`, as the
/// unfused SwiGLU does).
///
/// f32 part: each output is a few f32 operations (`expf` 2 ulp, `__fdividef` 2 ulp, `erff`
/// 2 ulp, a handful of roundings): about 8 ulp = 5e-7 relative. Two effects add to it:
/// - conditioning: `exp(-2u)` turns the rounding of its argument into a relative error of
///   |2u| ulp; for inputs within [-6, 6], |2u| <= 25, another 25 ulp = 1.5e-6. rtol = 1e-5
///   bounds both with room.
/// - cancellation: a gradient crosses zero (GELU's at x = -0.75, SwiGLU's dg and SiLU's at
///   -1.28) and `1 + erf(z)` in the exact GELU (computed as torch does) cancels for x < 0;
///   there the error is 8 ulp of the largest term, not of the result. The terms stay under 8
///   for inputs in [-6, 6] and gradients in [-1, 1]: 8 * 8 * 2^-24 = 3.8e-6, so atol = 1e-5
///   (outputs smaller than that, like gelu(-6) = -6e-9, are checked absolutely). SiLU's
///   backward takes `1 - s` as torch does: exact for s >= 1/2 (Sterbenz's lemma), so only the
///   few ulp of `s` carry into it, times |x| <= 6: under 1e-6 of a gradient near 1.
///
/// Stored as f16/bf16, each rounding adds half an ulp: 2^-11 (f16) or 2^-8 (bf16) relative,
/// and f16's subnormal spacing (2^-24) absolutely. On average rounding errors are about 0.6
/// of their bound, which sets the relative L2 limit (f32: the per-element rtol).
pub fn tolerance_for<T: Element>(roundings: usize) -> Tolerance {
    let f32_tol = Tolerance::new(1e-5, 1e-5);
    let (half_ulp, atol, max_rel_l2) = match T::DTYPE {
        Dtype::F32 => return f32_tol,
        Dtype::F16 => (2f64.powi(-11), 2f64.powi(-24), 1e-3),
        Dtype::Bf16 => (2f64.powi(-8), 0.0, 5e-3),
        integer => panic!("activations are floats, not {integer}"),
    };
    let r = roundings as f64;
    Tolerance::new(f32_tol.atol + r * atol, f32_tol.rtol + r * half_ulp)
        .with_max_rel_l2(r * max_rel_l2)
}

#[cfg(test)]
mod tests {
    use super::*;
    use approx::assert_relative_eq;

    #[test]
    fn erf_matches_tabulated_values() {
        // Abramowitz & Stegun, table 7.1, and erf(-x) = -erf(x).
        let table = [
            (0.0, 0.0),
            (0.1, 0.112_462_916_018_284_9),
            (0.5, 0.520_499_877_813_046_5),
            (1.0, 0.842_700_792_949_714_9),
            (2.0, 0.995_322_265_018_952_7),
            (2.4999, 0.999_592_830_099_666_6),
            (3.0, 0.999_977_909_503_001_4),
        ];
        for (x, e) in table {
            assert_relative_eq!(erf(x), e, max_relative = 1e-14, epsilon = 1e-300);
            assert_relative_eq!(erf(-x), -e, max_relative = 1e-14, epsilon = 1e-300);
        }
        // erfc(5) = 1.5374597944280349e-12: the continued fraction keeps it relative.
        assert_relative_eq!(erfc(5.0), 1.537_459_794_428_035e-12, max_relative = 1e-13);
        // The series and the fraction agree where they meet.
        assert_relative_eq!(erf(2.5 - 1e-12), erf(2.5), max_relative = 1e-13);
    }

    #[test]
    fn gelu_known_values() {
        // torch.nn.functional.gelu in float64.
        assert_relative_eq!(gelu_erf(1.0), 0.841_344_746_068_542_9, max_relative = 1e-14);
        assert_relative_eq!(
            gelu_erf(-1.0),
            -0.158_655_253_931_457_05,
            max_relative = 1e-13
        );
        assert_relative_eq!(
            gelu_tanh(1.0),
            0.841_191_990_608_276_8,
            max_relative = 1e-14
        );
        assert_relative_eq!(
            gelu_tanh(-1.0),
            -0.158_808_009_391_723_26,
            max_relative = 1e-13
        );
        assert_eq!(gelu_tanh(0.0), 0.0);
        assert_eq!(gelu_erf(0.0), 0.0);
        // Far out, GELU is x for large x and 0 for very negative x.
        assert_relative_eq!(gelu_tanh(10.0), 10.0, max_relative = 1e-15);
        assert!(gelu_tanh(-10.0).abs() < 1e-30 && gelu_erf(-10.0).abs() < 1e-20);
    }

    #[test]
    fn the_tanh_form_is_the_sigmoid_form() {
        for i in -60..=60 {
            let x = i as f64 / 10.0;
            let tanh_form = 0.5 * x * (1.0 + tanh_inner(x).tanh());
            assert_relative_eq!(
                gelu_tanh(x),
                tanh_form,
                max_relative = 1e-9,
                epsilon = 1e-12
            );
        }
    }

    #[test]
    fn swiglu_known_values() {
        // silu(1) = 1 / (1 + e^-1)
        assert_relative_eq!(silu(1.0), 0.731_058_578_630_004_9, max_relative = 1e-15);
        assert_relative_eq!(swiglu(1.0, 3.0), 3.0 * 0.731_058_578_630_004_9);
        assert_eq!(swiglu(0.0, 5.0), 0.0);
        assert!(
            silu(-800.0) == 0.0 && silu(800.0) == 800.0,
            "no overflow to NaN"
        );
    }

    /// Central differences: error O(h^2) with h = 1e-5 is ~1e-10, rounding ~1e-11.
    fn finite_difference(f: impl Fn(f64) -> f64, x: f64) -> f64 {
        let h = 1e-5;
        (f(x + h) - f(x - h)) / (2.0 * h)
    }

    #[test]
    fn gradients_match_finite_differences() {
        for i in -80..=80 {
            let x = i as f64 / 10.0 + 0.0123;
            let tol = 1e-8;
            assert_relative_eq!(
                gelu_tanh_grad(x),
                finite_difference(gelu_tanh, x),
                epsilon = tol,
                max_relative = tol
            );
            assert_relative_eq!(
                gelu_erf_grad(x),
                finite_difference(gelu_erf, x),
                epsilon = tol,
                max_relative = tol
            );
            for &other in &[-3.0, 0.7, 2.5] {
                let dout = 0.37;
                let (dg, dx) = swiglu_grad(x, other, dout);
                let fd_g = dout * finite_difference(|g| swiglu(g, other), x);
                let fd_x = dout * finite_difference(|v| swiglu(x, v), other);
                assert_relative_eq!(dg, fd_g, epsilon = tol, max_relative = tol);
                assert_relative_eq!(dx, fd_x, epsilon = tol, max_relative = tol);
            }
        }
    }

    #[test]
    fn rectifier_gradients_match_finite_differences_away_from_the_kinks() {
        for i in -80..=80 {
            let x = i as f64 / 10.0 + 0.0123;
            let dy = -0.61;
            let tol = 1e-8;
            let (slope, lo, hi) = (0.2, -1.5, 2.5);
            let pairs = [
                (relu_backward(dy, x), dy * finite_difference(relu, x)),
                (
                    leaky_relu_backward(dy, x, slope),
                    dy * finite_difference(|v| leaky_relu(v, slope), x),
                ),
                (
                    hardtanh_backward(dy, x, lo, hi),
                    dy * finite_difference(|v| hardtanh(v, lo, hi), x),
                ),
                (silu_backward(dy, x), dy * finite_difference(silu, x)),
            ];
            for (got, fd) in pairs {
                assert_relative_eq!(got, fd, epsilon = tol, max_relative = tol);
            }
        }
    }

    #[test]
    fn rectifiers_choose_as_torch_at_the_kinks_and_for_nan() {
        let (nan, inf) = (f64::NAN, f64::INFINITY);
        assert_eq!((relu(2.5), relu(-2.5), relu(0.0)), (2.5, 0.0, 0.0));
        assert!(relu(-0.0) == 0.0 && relu(-0.0).is_sign_positive());
        assert!(relu(nan).is_nan());
        assert_eq!((relu(inf), relu(-inf)), (inf, 0.0));
        // threshold_backward: 0 at the kink whatever dy is, dy where x is NaN.
        assert_eq!(relu_backward(0.7, 0.0), 0.0);
        assert_eq!(relu_backward(0.7, -0.0), 0.0);
        assert_eq!(relu_backward(0.7, 1e-30), 0.7);
        assert_eq!(relu_backward(0.7, nan), 0.7);
        assert_eq!(relu_backward(nan, -1.0), 0.0);
        assert_eq!(relu_backward(inf, -1.0), 0.0);
        assert!(relu_backward(nan, 1.0).is_nan());

        let s = 0.01;
        assert_eq!((leaky_relu(3.0, s), leaky_relu(-3.0, s)), (3.0, -3.0 * s));
        assert_eq!(leaky_relu(-inf, s), -inf);
        assert!(leaky_relu(nan, s).is_nan());
        assert_eq!(leaky_relu_backward(0.5, 0.0, s), 0.5 * s);
        assert_eq!(leaky_relu_backward(0.5, -0.0, s), 0.5 * s);
        assert_eq!(leaky_relu_backward(0.5, nan, s), 0.5 * s);
        assert_eq!(leaky_relu_backward(0.5, 2.0, s), 0.5);

        let h = |x| hardtanh(x, -1.0, 1.0);
        assert_eq!(
            (h(-3.0), h(3.0), h(0.25), h(-inf), h(inf)),
            (-1.0, 1.0, 0.25, -1.0, 1.0)
        );
        assert!(h(nan).is_nan());
        let hb = |x| hardtanh_backward(0.5, x, -1.0, 1.0);
        assert_eq!((hb(-1.0), hb(1.0), hb(-1.5), hb(inf)), (0.0, 0.0, 0.0, 0.0));
        assert_eq!(
            (hb(0.999), hb(-0.999), hb(-0.0), hb(nan)),
            (0.5, 0.5, 0.5, 0.5)
        );
        // min_val == max_val (torch allows it): the bound everywhere, no gradient anywhere.
        assert_eq!(
            (hardtanh(5.0, 0.25, 0.25), hardtanh(-5.0, 0.25, 0.25)),
            (0.25, 0.25)
        );
        assert_eq!(hardtanh_backward(0.5, 0.25, 0.25, 0.25), 0.0);
    }

    #[test]
    fn silu_is_nan_where_torch_is() {
        let (nan, inf) = (f64::NAN, f64::INFINITY);
        // x / (1 + exp(-x)) in torch: inf / 1 and -inf / inf.
        assert_eq!(silu(inf), inf);
        assert!(silu(-inf).is_nan() && silu(nan).is_nan());
        // s (1 + x (1 - s)): inf * 0 at +inf, 0 * -inf at -inf.
        assert!(silu_backward(1.0, inf).is_nan() && silu_backward(1.0, -inf).is_nan());
        assert!(silu_backward(nan, 1.0).is_nan() && silu_backward(1.0, nan).is_nan());
        assert_eq!(silu_backward(0.3, 0.0), 0.15);
        // Far out the gradient is 1 (x > 0) or 0 (x < 0), without a NaN.
        assert_eq!(silu_backward(1.0, 800.0), 1.0);
        assert_eq!(silu_backward(1.0, -800.0), 0.0);
    }

    #[test]
    fn storage_rounding_goes_through_f32_as_the_kernel_does() {
        use half::{bf16, f16};
        let product = 3.0 * (0.01f32 as f64);
        assert_eq!(round_as_stored::<f32>(product), (3.0f32 * 0.01f32) as f64);
        // 1 + 2^-8 + 2^-30 rounds to 1 + 2^-8 in f32, a tie in bf16 that goes to the even 1.0
        // (rounded once, straight to bf16, it would be 1 + 2^-7: the kernel rounds twice).
        let v = 1.0 + 2f64.powi(-8) + 2f64.powi(-30);
        assert_eq!(round_as_stored::<bf16>(v), 1.0);
        assert_eq!(
            round_as_stored::<bf16>(v + 2f64.powi(-20)),
            1.0 + 2f64.powi(-7)
        );
        assert_eq!(round_as_stored::<f16>(-0.3), f16::from_f32(-0.3).to_f64());
        assert!(round_as_stored::<bf16>(f64::NAN).is_nan());
        assert_eq!(round_as_stored::<f16>(f64::NEG_INFINITY), f64::NEG_INFINITY);
        assert_eq!(exact_tolerance(), Tolerance::new(0.0, 0.0));
    }

    #[test]
    fn bias_dropout_add_broadcasts_the_bias_and_drops_masked_elements() {
        let x = [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0];
        let bias = [0.5f32, -1.0, 0.25];
        let mask = [1u8, 0, 1, 1, 1, 0];
        let residual = [10.0f32; 6];
        let out = bias_dropout_add(&x, &bias, &mask, &residual, 2.0, 3);
        assert_eq!(out, vec![13.0, 10.0, 16.5, 19.0, 18.0, 10.0]);
    }

    #[test]
    fn half_tolerances_add_their_roundings() {
        use half::{bf16, f16};
        assert_eq!(tolerance_for::<f32>(2), Tolerance::new(1e-5, 1e-5));
        assert_relative_eq!(tolerance_for::<bf16>(1).rtol, 1e-5 + 1.0 / 256.0);
        assert_relative_eq!(tolerance_for::<bf16>(2).rtol, 1e-5 + 2.0 / 256.0);
        assert_relative_eq!(tolerance_for::<f16>(1).rtol, 1e-5 + 1.0 / 2048.0);
    }
}
