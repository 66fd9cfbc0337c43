//! `vec_fast` takes `__expf` (error 2 + floor(|1.173 a|) ulp, the CUDA math guide) where `vec`
//! takes `expf` (2 ulp), and in the erf GELU and its gradient a branch-free normal CDF
//! (`FastCdf`: `ex2.approx`, 2 ulp, `rcp.approx`, 1 ulp, and a fitted polynomial) where `vec`
//! takes `erff`. This CPU test replays the kernels' f32 arithmetic with every approximate step
//! pushed to the end of its documented error, in both directions, over the problems' input
//! range (for `FastCdf`, out to where its exponential flushes to 0), and checks the f32
//! tolerance of the reference still holds: per element and in relative L2. f16/bf16 add their
//! rounding to the same f32 part, so they hold when f32 does. The SiLU kernels' sigmoid
//! (`sigmoid_unclamped`, torch's form) is replayed the same way.

use common::{Tolerance, measure::check};
use day13::reference::{
    erfc, gelu_erf, gelu_erf_grad, gelu_tanh, gelu_tanh_grad, silu, silu_backward, tolerance_for,
};

const SQRT_2_OVER_PI: f32 = 0.797_884_6;
const GELU_CUBIC: f32 = 0.044715;
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

/// `FastCdf`'s constants (activations.cu): u = |x| sqrt(log2(e) / 2), t = 1 / (1 + P u),
/// q = Phi(-|x|) = 2^(-u^2) R(t), R of degree 5.
const CDF_U_SCALE: f32 = 0.849_321_8;
const CDF_P: f32 = 0.415_037_04;
const CDF_R: [f32; 6] = [
    0.000_403_088_1,
    0.134_411_78,
    0.178_991_15,
    0.002_679_164_3,
    0.286_475_87,
    -0.102_962_136,
];

/// `ex2.approx.ftz.f32` at its 2 ulp, pushed by `sign`; results under 2^-126 flush to 0.
fn ex2_approx_ftz(v: f32, sign: f64) -> f32 {
    let r = ((v as f64).exp2() * (1.0 + sign * 2.0 * ULP)) as f32;
    if r < f32::MIN_POSITIVE { 0.0 } else { r }
}

/// `rcp.approx.ftz.f32` at its 1 ulp, pushed by `sign` (its argument here is >= 1 or NaN).
fn rcp_approx_ftz(v: f32, sign: f64) -> f32 {
    ((1.0 / v as f64) * (1.0 + sign * ULP)) as f32
}

/// `FastCdf::cdf_and_gauss`: (Phi(x), e^(-x^2/2)), ex2 pushed by `se`, rcp by `sr`.
fn fast_cdf(x: f32, se: f64, sr: f64) -> (f32, f32) {
    let (q, gauss) = fast_tail(x, se, sr, &CDF_R);
    (if x >= 0.0 { 1.0 - q } else { q }, gauss)
}

/// q = Phi(-|x|) and the Gaussian as `FastCdf` computes them, with the polynomial `r`.
fn fast_tail(x: f32, se: f64, sr: f64, r: &[f32; 6]) -> (f32, f32) {
    let u = x.abs() * CDF_U_SCALE;
    let t = rcp_approx_ftz(CDF_P.mul_add(u, 1.0), sr);
    let poly = r[..5].iter().rev().fold(r[5], |acc, &c| acc.mul_add(t, c));
    let gauss = ex2_approx_ftz(u * -u, se);
    (gauss * poly, gauss)
}

/// `GeluErfWith<FastCdf>`.
fn gelu_erf_fast(x: f32, se: f64, sr: f64) -> f32 {
    x * fast_cdf(x, se, sr).0
}

/// `GeluErfBwdWith<FastCdf>`.
fn gelu_erf_bwd_fast(dy: f32, x: f32, se: f64, sr: f64) -> f32 {
    let (cdf, gauss) = fast_cdf(x, se, sr);
    dy * x.mul_add(INV_SQRT_2PI * gauss, cdf)
}

/// Phi(-|x|) in f64, from the reference's erfc.
fn exact_tail(x: f64) -> f64 {
    0.5 * erfc(x.abs() * std::f64::consts::FRAC_1_SQRT_2)
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

/// Every 2^-12 of [-14, 14] (114689 points): past |x| = 13.2, 2^(-u^2) is under 2^-126 and
/// flushes to 0, so this reaches where `FastCdf`'s Phi becomes exactly 0 or 1.
fn cdf_inputs() -> Vec<f32> {
    (-57344..=57344).map(|i| i as f32 / 4096.0).collect()
}

/// The largest share of its allowance `atol + rtol |ref|` that any element uses.
fn worst_share(got: &[f32], want: &[f64], tolerance: Tolerance) -> f64 {
    got.iter()
        .zip(want)
        .map(|(&g, &w)| (g as f64 - w).abs() / (tolerance.atol + tolerance.rtol * w.abs()))
        .fold(0.0, f64::max)
}

/// (ex2 error, rcp error) signs: every corner of the two bounds.
const CDF_SIGNS: [(f64, f64); 4] = [(1.0, 1.0), (1.0, -1.0), (-1.0, 1.0), (-1.0, -1.0)];

#[test]
fn fast_cdf_tail_is_relatively_accurate() {
    // The bound the kernel's comment derives for q = Phi(-|x|), relative, on |x| <= 10 (q >=
    // 7.6e-24; beyond, x q is under 1e-22): the polynomial's 7.2e-6 in f32, ex2's 2 ulp and
    // rcp's 1 ulp (2.3 ulp of R: its slope t R' / R is at most 2.3), the last
    // roundings (q = g R, the casts: 3 ulp in all), and the exponent's: -u^2 carries those of
    // the f32 constant and of u (each doubled by the square) and of u^2, 5 2^-24 of u^2,
    // which ln 2 turns into relative error of g: 1.5e-5 at |x| = 10, 3.2e-6 at |x| = 4.6
    // (past which |gelu| < 1e-5, inside atol).
    let mut worst: f64 = 0.0;
    let mut worst_near: f64 = 0.0;
    for (se, sr) in CDF_SIGNS {
        for &x in cdf_inputs().iter().filter(|x| x.abs() <= 10.0) {
            let (q, _) = fast_tail(x, se, sr, &CDF_R);
            let err = (q as f64 / exact_tail(x as f64) - 1.0).abs();
            let u2 = 0.5 * (x as f64).powi(2) * std::f64::consts::LOG2_E;
            let bound = 7.2e-6 + 8.0 * ULP + u2 * 5.0 * ULP / 2.0 * std::f64::consts::LN_2;
            assert!(err <= bound, "x = {x}: {err:e} > {bound:e}");
            worst = worst.max(err);
            if x.abs() <= 4.6 {
                worst_near = worst_near.max(err);
            }
        }
    }
    eprintln!(
        "FastCdf: worst relative error of Phi(-|x|): {worst_near:.3e} on |x| <= 4.6, \
         {worst:.3e} on |x| <= 10"
    );
}

#[test]
fn fast_cdf_keeps_the_f32_tolerance_at_its_worst() {
    let tolerance = tolerance_for::<f32>(1);
    let xs = cdf_inputs();
    let want_fwd: Vec<f64> = xs.iter().map(|&x| gelu_erf(x as f64)).collect();
    let want_bwd: Vec<f64> = xs.iter().map(|&x| gelu_erf_grad(x as f64)).collect();
    let (mut share_fwd, mut share_bwd): (f64, f64) = (0.0, 0.0);
    // dy = 1 is the hardest gradient: the error scales with |dy|, atol does not.
    for (se, sr) in CDF_SIGNS {
        let what = format!("ex2 error x{se}, rcp error x{sr}");
        let got: Vec<f32> = xs.iter().map(|&x| gelu_erf_fast(x, se, sr)).collect();
        assert_within(&format!("gelu_erf, {what}"), &got, &want_fwd, tolerance);
        share_fwd = share_fwd.max(worst_share(&got, &want_fwd, tolerance));

        let got: Vec<f32> = xs
            .iter()
            .map(|&x| gelu_erf_bwd_fast(1.0, x, se, sr))
            .collect();
        assert_within(&format!("gelu_erf_bwd, {what}"), &got, &want_bwd, tolerance);
        share_bwd = share_bwd.max(worst_share(&got, &want_bwd, tolerance));
    }
    eprintln!(
        "FastCdf: worst element uses {:.1}% (gelu_erf) and {:.1}% (gelu_erf_bwd) of its allowance",
        100.0 * share_fwd,
        100.0 * share_bwd
    );
}

#[test]
fn fast_cdf_meets_erff_at_the_special_values() {
    // What `vec` (erff) gives, and torch: gelu(+inf) = inf, gelu(-inf) = -inf * 0 = NaN, NaN
    // for NaN, gelu(-0) = -0; the gradient Phi + x phi is inf * 0 = NaN at both infinities.
    // Huge finite x: u^2 overflows to inf and 2^-inf = 0, Phi exactly 0 or 1. The infinities
    // are checked by value below, not against the f64 reference, whose erfc(-inf) is NaN.
    let xs = [
        0.0,
        -0.0,
        f32::NAN,
        13.0,
        -13.0,
        20.0,
        -20.0,
        88.0,
        -88.0,
        1e30,
        -1e30,
        f32::MAX,
        -f32::MAX,
        f32::MIN_POSITIVE,
        -f32::MIN_POSITIVE / 16.0,
    ];
    let tolerance = tolerance_for::<f32>(1);
    for (se, sr) in CDF_SIGNS {
        let got: Vec<f32> = xs.iter().map(|&x| gelu_erf_fast(x, se, sr)).collect();
        let want: Vec<f64> = xs.iter().map(|&x| gelu_erf(x as f64)).collect();
        assert_within("gelu_erf special values", &got, &want, tolerance);
        let got: Vec<f32> = xs
            .iter()
            .map(|&x| gelu_erf_bwd_fast(1.0, x, se, sr))
            .collect();
        let want: Vec<f64> = xs.iter().map(|&x| gelu_erf_grad(x as f64)).collect();
        assert_within("gelu_erf_bwd special values", &got, &want, tolerance);

        let at = |x: f32| gelu_erf_fast(x, se, sr);
        assert!(at(-0.0) == 0.0 && at(-0.0).is_sign_negative());
        assert_eq!(at(f32::INFINITY), f32::INFINITY);
        assert!(at(f32::NEG_INFINITY).is_nan() && at(f32::NAN).is_nan());
        assert_eq!(at(f32::MAX), f32::MAX);
        assert_eq!(fast_cdf(20.0, se, sr).0, 1.0);
        assert_eq!(fast_cdf(-20.0, se, sr).0, 0.0);
        for x in [f32::INFINITY, f32::NEG_INFINITY] {
            assert!(gelu_erf_bwd_fast(1.0, x, se, sr).is_nan());
        }
    }
}

#[test]
fn the_cdf_replay_is_sharp_enough_to_fail_a_wrong_polynomial() {
    // R 1e-4 too large (14 times the fit's error) must fail the f32 tolerance: near x = -0.75
    // gelu is -0.17 and the allowance 7e-5 of it.
    let r = CDF_R.map(|c| c * 1.0001);
    let xs = cdf_inputs();
    let got: Vec<f32> = xs
        .iter()
        .map(|&x| {
            let (q, _) = fast_tail(x, 1.0, 1.0, &r);
            x * if x >= 0.0 { 1.0 - q } else { q }
        })
        .collect();
    let want: Vec<f64> = xs.iter().map(|&x| gelu_erf(x as f64)).collect();
    let report = check::compare(&got, &want, &[got.len()], tolerance_for::<f32>(1));
    assert!(!report.passed());
}
