//! Per-tensor INT8 quantization, its inverse, and the INT8 matmul with zero points.
//!
//! Unlike the other references this one does not compute in f64: a quantized value is an
//! integer, and the kernel's integer is right only if it rounds the same f32 quotient the same
//! way. So the reference repeats the kernel's f32 arithmetic operation by operation (IEEE
//! division, correctly rounded on both sides; round half to even, `rintf` /
//! `__float2int_rn` on the GPU, [`f32::round_ties_even`] here) and the check is exact.
//!
//! - symmetric (int8, `[-127, 127]`): `amax = max|x|`, `scale = amax / 127`,
//!   `q = clamp(rint(x / scale), -127, 127)`. -128 is never written, so the i8 poison stays
//!   unambiguous.
//! - asymmetric (uint8, `[0, 255]`, as PyTorch's `quint8` min-max observer): the range is
//!   first widened to hold 0 (`lo = min(min x, 0)`, `hi = max(max x, 0)`) so that 0 is
//!   exact, `scale = (hi - lo) / 255`, `zero_point = clamp(rint(-lo / scale), 0, 255)`,
//!   `q = clamp(rint(x / scale) + zero_point, 0, 255)`.
//! - dequantize: `x' = (q - zero_point) * scale`, one f32 product of an exact integer.
//!
//! A scale that comes out 0 (an all-zero tensor, or a range so small that the division
//! underflows) is replaced by 1, so that every q is 0 instead of NaN.

use crate::element::Element;

/// A per-tensor scale and zero point (0 for symmetric).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct QuantParams {
    pub scale: f32,
    pub zero_point: i32,
}

/// The integer range of a quantized element.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QRange {
    pub min: i32,
    pub max: i32,
}

/// Symmetric int8 leaves out -128, so that `-q` is always representable (and the i8 poison
/// is never a result).
pub const SYM_I8: QRange = QRange {
    min: -127,
    max: 127,
};
pub const ASYM_U8: QRange = QRange { min: 0, max: 255 };

/// Smallest and largest value, as the GPU's `fminf`/`fmaxf` tree finds them (the order does
/// not matter for min and max).
pub fn min_max(x: &[f32]) -> (f32, f32) {
    x.iter()
        .fold((f32::INFINITY, f32::NEG_INFINITY), |(lo, hi), &v| {
            (lo.min(v), hi.max(v))
        })
}

fn nonzero(scale: f32) -> f32 {
    if scale == 0.0 { 1.0 } else { scale }
}

/// Symmetric parameters from the range: `scale = max(hi, -lo) / 127` in f32.
pub fn sym_params(lo: f32, hi: f32) -> QuantParams {
    let amax = hi.max(-lo);
    QuantParams {
        scale: nonzero(amax / 127.0),
        zero_point: 0,
    }
}

/// Asymmetric parameters from the range, widened to hold 0.
pub fn asym_params(lo: f32, hi: f32) -> QuantParams {
    let (lo, hi) = (lo.min(0.0), hi.max(0.0));
    let scale = nonzero((hi - lo) / 255.0);
    let zero_point = ((-lo / scale).round_ties_even() as i32).clamp(0, 255);
    QuantParams { scale, zero_point }
}

/// One value: `clamp(rint(x / scale) + zero_point, range)`.
pub fn quantize_one(x: f32, p: QuantParams, range: QRange) -> i32 {
    ((x / p.scale).round_ties_even() as i32 + p.zero_point).clamp(range.min, range.max)
}

/// Symmetric int8 quantization of the whole tensor: its parameters and values.
pub fn quantize_sym(x: &[f32]) -> (QuantParams, Vec<i8>) {
    let (lo, hi) = min_max(x);
    let p = sym_params(lo, hi);
    (p, quantize_all(x, p, SYM_I8, |q| q as i8))
}

/// Asymmetric uint8 quantization of the whole tensor: its parameters and values.
pub fn quantize_asym(x: &[f32]) -> (QuantParams, Vec<u8>) {
    let (lo, hi) = min_max(x);
    let p = asym_params(lo, hi);
    (p, quantize_all(x, p, ASYM_U8, |q| q as u8))
}

/// Every value of `x` quantized with `p` into `range`, stored by `store` (which only narrows:
/// the value is already in the range).
fn quantize_all<Q>(x: &[f32], p: QuantParams, range: QRange, store: impl Fn(i32) -> Q) -> Vec<Q> {
    x.iter()
        .map(|&v| store(quantize_one(v, p, range)))
        .collect()
}

/// `(q - zero_point) * scale` in f32, for i8 or u8 storage.
pub fn dequantize<T: Element>(q: &[T], p: QuantParams) -> Vec<f32> {
    q.iter()
        .map(|&v| (v.to_f64() as i32 - p.zero_point) as f32 * p.scale)
        .collect()
}

/// Integer values as the f64 a check compares with (exact).
pub fn as_f64<T: Element>(values: &[T]) -> Vec<f64> {
    values.iter().map(|v| v.to_f64()).collect()
}

/// The largest inner dimension for which every INT8 matmul output fits in an i32:
/// `|a - za| * |b - zb| <= 255 * 255`, and `k * 65025 <= i32::MAX`.
pub const INT8_MATMUL_MAX_K: usize = (i32::MAX as usize) / (255 * 255);

/// One output of the INT8 matmul: `sum_l (a[i][l] - za) (b_t[j][l] - zb)`, with `a` row-major
/// m x k and `b_t` row-major n x k (B stored transposed, so both operands run along k).
pub fn int8_matmul_one(
    a: &[i8],
    b_t: &[i8],
    za: i32,
    zb: i32,
    k: usize,
    i: usize,
    j: usize,
) -> i64 {
    let (a_row, b_row) = (&a[i * k..(i + 1) * k], &b_t[j * k..(j + 1) * k]);
    a_row
        .iter()
        .zip(b_row)
        .map(|(&x, &y)| i64::from(i32::from(x) - za) * i64::from(i32::from(y) - zb))
        .sum()
}

/// The INT8 matmul, exact in i64: every output (row-major, m x n), or those at the flat
/// indices `at`.
#[allow(clippy::too_many_arguments)]
pub fn int8_matmul(
    a: &[i8],
    b_t: &[i8],
    za: i32,
    zb: i32,
    m: usize,
    n: usize,
    k: usize,
    at: Option<&[usize]>,
) -> Vec<i64> {
    assert_eq!(a.len(), m * k, "int8_matmul: A is not m x k");
    assert_eq!(b_t.len(), n * k, "int8_matmul: B^T is not n x k");
    let all: Vec<usize>;
    let at = match at {
        Some(at) => at,
        None => {
            all = (0..m * n).collect();
            &all
        }
    };
    at.iter()
        .map(|&flat| {
            assert!(flat < m * n, "index {flat} is outside a {m} x {n} output");
            int8_matmul_one(a, b_t, za, zb, k, flat / n, flat % n)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn symmetric_maps_amax_to_127_and_rounds_half_to_even() {
        // amax = 127 gives scale 1 exactly: x / scale = x.
        let x = [127.0f32, -127.0, 0.5, 1.5, 2.5, -0.5, -2.5, 3.49];
        let (p, q) = quantize_sym(&x);
        assert_eq!(
            p,
            QuantParams {
                scale: 1.0,
                zero_point: 0
            }
        );
        assert_eq!(q, vec![127, -127, 0, 2, 2, 0, -2, 3]);
    }

    #[test]
    fn symmetric_takes_amax_from_the_negative_side_and_never_writes_minus_128() {
        let x = [-2.0f32, 1.0, 0.25];
        let (p, q) = quantize_sym(&x);
        assert_eq!(p.scale, 2.0f32 / 127.0);
        assert_eq!(q[0], -127);
        assert_eq!(q[1], (1.0f32 / p.scale).round_ties_even() as i8);
        assert!(q.iter().all(|&v| v != i8::MIN));
    }

    #[test]
    fn asymmetric_widens_the_range_to_zero_and_maps_it_to_0_and_255() {
        // All positive: lo widens to 0, so the zero point is 0 and max maps to 255.
        let (p, q) = quantize_asym(&[1.0f32, 2.0, 4.0]);
        assert_eq!(p.zero_point, 0);
        assert_eq!(p.scale, 4.0f32 / 255.0);
        assert_eq!(q[2], 255);
        // A range of exactly 255 gives scale 1; the zero point is rint(127.5) = 128 (half to
        // even), so 127.5 lands on 256 and is clamped to 255.
        let (p, q) = quantize_asym(&[-127.5f32, 127.5, 0.0, 126.5]);
        assert_eq!(
            p,
            QuantParams {
                scale: 1.0,
                zero_point: 128
            }
        );
        assert_eq!(q, vec![0, 255, 128, 254]);
        // Rounding that is not exact: 1 / (2 / 255) is 127.49999 in f32, so zp is 127.
        assert_eq!(asym_params(-1.0, 1.0).zero_point, 127);
    }

    #[test]
    fn zero_is_exact_in_both_schemes() {
        let x = [-3.7f32, 0.0, 11.2, 5.0];
        let (ps, qs) = quantize_sym(&x);
        let (pa, qa) = quantize_asym(&x);
        assert_eq!(dequantize(&qs[1..2], ps), vec![0.0]);
        assert_eq!(dequantize(&qa[1..2], pa), vec![0.0]);
    }

    #[test]
    fn an_all_zero_tensor_gets_scale_one_and_zeros() {
        let (p, q) = quantize_sym(&[0.0f32; 5]);
        assert_eq!((p.scale, q), (1.0, vec![0; 5]));
        let (p, q) = quantize_asym(&[0.0f32; 3]);
        assert_eq!((p.scale, p.zero_point, q), (1.0, 0, vec![0; 3]));
    }

    #[test]
    fn round_trip_error_is_at_most_half_a_step() {
        let x: Vec<f32> = crate::measure::inputs::uniform(10_000, -3.0, 5.0, 4);
        let (ps, qs) = quantize_sym(&x);
        let (pa, qa) = quantize_asym(&x);
        for (xs, p, back) in [(&x, ps, dequantize(&qs, ps)), (&x, pa, dequantize(&qa, pa))] {
            for (v, b) in xs.iter().zip(&back) {
                assert!(
                    (v - b).abs() <= 0.5001 * p.scale,
                    "{v} -> {b}, scale {}",
                    p.scale
                );
            }
        }
    }

    #[test]
    fn int8_matmul_matches_the_expanded_sum_and_a_small_example() {
        // A = [[1, 2], [3, 4]], B = [[5, 6], [7, 8]] so B^T = [[5, 7], [6, 8]].
        let a = [1i8, 2, 3, 4];
        let b_t = [5i8, 7, 6, 8];
        assert_eq!(
            int8_matmul(&a, &b_t, 0, 0, 2, 2, 2, None),
            vec![19, 22, 43, 50]
        );
        // With zero points: (1-1)(5-2) + (2-1)(7-2) = 5.
        assert_eq!(int8_matmul_one(&a, &b_t, 1, 2, 2, 0, 0), 5);
        // The worst case fits in i32 up to the refused k.
        let k = INT8_MATMUL_MAX_K;
        assert!((k as i64) * 255 * 255 <= i64::from(i32::MAX));
        assert!(((k + 1) as i64) * 255 * 255 > i64::from(i32::MAX));
        let worst = int8_matmul_one(&[127; 3], &[-128; 3], -128, 127, 3, 0, 0);
        assert_eq!(worst, 3 * 255 * -255);
    }
}
