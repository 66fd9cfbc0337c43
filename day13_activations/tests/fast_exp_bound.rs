//! `vec_fast` takes `__expf` (error 2 + floor(|1.173 a|) ulp, the CUDA math guide) where `vec`
//! takes `expf` (2 ulp). This CPU test replays the kernels' f32 arithmetic with every
//! approximate step pushed to the end of its documented error, in both directions, over the
//! problems' input range, and checks the f32 tolerance of the reference still holds: per
//! element and in relative L2. f16/bf16 add their rounding to the same f32 part, so they hold
//! when f32 does. The SiLU kernels' sigmoid (`sigmoid_unclamped`, torch's form) is replayed
//! the same way.

use common::reference::activation::{
    erf, gelu_erf_grad, gelu_tanh, gelu_tanh_grad, silu, silu_backward, tolerance_for,
};
use common::{Tolerance, measure::check};

const SQRT_2_OVER_PI: f32 = 0.797_884_6;
const GELU_CUBIC: f32 = 0.044715;
const INV_SQRT_2: f32 = std::f32::consts::FRAC_1_SQRT_2;
const INV_SQRT_2PI: f32 = 0.398_942_3;
const EXP_ARG_MAX: f32 = 80.0;
/// An ulp is at most 2^-23 of a normal f32.
const ULP: f64 = 1.0 / (1u32 << 23) as f64;

/// e^a as `__expf` may return it: the exact value moved by `sign` times its error bound.
fn fast_exp(a: f32, sign: f64) -> f32 {
    let ulps = 2.0 + (1.173 * a.abs() as f64).floor();
    ((a as f64).exp() * (1.0 + sign * ulps * ULP)) as f32
}

/// `sigmoid_pair<FastExp>`, with `__fdividef`'s 2 ulp pushed by `sign_div`.
fn sigmoid_pair(v: f32, sign_exp: f64, sign_div: f64) -> (f32, f32) {
    let e = fast_exp((-v).min(EXP_ARG_MAX), sign_exp);
    let s = ((1.0 / (1.0 + e) as f64) * (1.0 + sign_div * 2.0 * ULP)) as f32;
    (s, e * s)
}

/// `sigmoid_unclamped<FastExp>`: `1 / (1 + __expf(-x))` with `__fdividef`.
fn sigmoid_unclamped(x: f32, sign_exp: f64, sign_div: f64) -> f32 {
    let e = fast_exp(-x, sign_exp);
    ((1.0 / (1.0 + e) as f64) * (1.0 + sign_div * 2.0 * ULP)) as f32
}

fn silu_fast(x: f32, se: f64, sd: f64) -> f32 {
    x * sigmoid_unclamped(x, se, sd)
}

/// `SiluBwdWith<FastExp>`: `dy s (1 + x (1 - s))` with torch's `1 - s`.
fn silu_bwd_fast(dy: f32, x: f32, se: f64, sd: f64) -> f32 {
    let s = sigmoid_unclamped(x, se, sd);
    dy * s * x.mul_add(1.0 - s, 1.0)
}

fn gelu_tanh_fast(x: f32, se: f64, sd: f64) -> f32 {
    let u = SQRT_2_OVER_PI * (GELU_CUBIC * x).mul_add(x * x, x);
    x * sigmoid_pair(2.0 * u, se, sd).0
}

fn gelu_tanh_bwd_fast(dy: f32, x: f32, se: f64, sd: f64) -> f32 {
    let x2 = x * x;
    let u = SQRT_2_OVER_PI * (GELU_CUBIC * x).mul_add(x2, x);
    let du = SQRT_2_OVER_PI * (3.0 * GELU_CUBIC).mul_add(x2, 1.0);
    let (s, one_minus) = sigmoid_pair(2.0 * u, se, sd);
    dy * (x * s * one_minus).mul_add(2.0 * du, s)
}

/// `GeluErfBwdWith<FastExp>`; `erff` (2 ulp) pushed by `sd`.
fn gelu_erf_bwd_fast(dy: f32, x: f32, se: f64, sd: f64) -> f32 {
    let erf_z = (erf((x * INV_SQRT_2) as f64) * (1.0 + sd * 2.0 * ULP)) as f32;
    let cdf = 0.5 * (1.0 + erf_z);
    let density = INV_SQRT_2PI * fast_exp(-0.5 * x * x, se);
    dy * x.mul_add(density, cdf)
}

/// Inputs as the problems draw them: x over [-6, 6], every 2^-12 (49153 points).
fn inputs() -> Vec<f32> {
    (-24576..=24576).map(|i| i as f32 / 4096.0).collect()
}

fn assert_within(what: &str, got: &[f32], expected: &[f64], tolerance: Tolerance) {
    let report = check::compare(got, expected, &[got.len()], tolerance);
    assert!(report.passed(), "{what}: {report}");
}

#[test]
fn fast_exp_keeps_the_f32_tolerance_at_its_worst() {
    let tolerance = tolerance_for::<f32>(1);
    let xs = inputs();
    let signs = [(1.0, 1.0), (1.0, -1.0), (-1.0, 1.0), (-1.0, -1.0)];
    // dy = 1 is the hardest gradient: the error scales with |dy|, atol does not.
    for (se, sd) in signs {
        let what = format!("exp error x{se}, division error x{sd}");
        let got: Vec<f32> = xs.iter().map(|&x| gelu_tanh_fast(x, se, sd)).collect();
        let want: Vec<f64> = xs.iter().map(|&x| gelu_tanh(x as f64)).collect();
        assert_within(&format!("gelu_tanh, {what}"), &got, &want, tolerance);

        let got: Vec<f32> = xs
            .iter()
            .map(|&x| gelu_tanh_bwd_fast(1.0, x, se, sd))
            .collect();
        let want: Vec<f64> = xs.iter().map(|&x| gelu_tanh_grad(x as f64)).collect();
        assert_within(&format!("gelu_tanh_bwd, {what}"), &got, &want, tolerance);

        let got: Vec<f32> = xs
            .iter()
            .map(|&x| gelu_erf_bwd_fast(1.0, x, se, sd))
            .collect();
        let want: Vec<f64> = xs.iter().map(|&x| gelu_erf_grad(x as f64)).collect();
        assert_within(&format!("gelu_erf_bwd, {what}"), &got, &want, tolerance);

        let got: Vec<f32> = xs.iter().map(|&x| silu_fast(x, se, sd)).collect();
        let want: Vec<f64> = xs.iter().map(|&x| silu(x as f64)).collect();
        assert_within(&format!("silu, {what}"), &got, &want, tolerance);

        let got: Vec<f32> = xs.iter().map(|&x| silu_bwd_fast(1.0, x, se, sd)).collect();
        let want: Vec<f64> = xs.iter().map(|&x| silu_backward(1.0, x as f64)).collect();
        assert_within(&format!("silu_bwd, {what}"), &got, &want, tolerance);
    }
}

#[test]
fn the_replay_is_sharp_enough_to_fail_a_wrong_kernel() {
    // The same replay with the sigmoid's exponent off by one part in 10^4 must fail: the test
    // above would otherwise prove nothing.
    let xs = inputs();
    let got: Vec<f32> = xs
        .iter()
        .map(|&x| {
            let u = SQRT_2_OVER_PI * (GELU_CUBIC * x).mul_add(x * x, x);
            x * sigmoid_pair(2.0 * u * 1.0001, 1.0, 1.0).0
        })
        .collect();
    let want: Vec<f64> = xs.iter().map(|&x| gelu_tanh(x as f64)).collect();
    let report = check::compare(&got, &want, &[got.len()], tolerance_for::<f32>(1));
    assert!(!report.passed());
}
