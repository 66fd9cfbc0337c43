//! Row-wise softmax: `out[r][c] = exp(x[r][c] - max_r) / sum_c' exp(x[r][c'] - max_r)`.
//!
//! Subtracting the row maximum changes nothing mathematically (the factor `exp(-max)` cancels)
//! but keeps every exponent <= 0, so nothing overflows. `-inf` entries give 0.
//!
//! A row that is entirely `-inf` has no defined softmax (0/0). This workspace defines it as
//! all zeros, the convention attention kernels use for fully masked rows, and every softmax
//! kernel must produce exactly that (PyTorch gives NaN there).

use rayon::prelude::*;

use crate::dtype::Dtype;
use crate::element::Element;
use crate::measure::check::Tolerance;

/// The tolerance for an f32 softmax whose longest chain of sequential f32 additions (in the
/// row sum) has `sequential_terms` terms.
///
/// Adding n positive terms one after another in f32 has a relative error of up to about
/// (n - 1) * 2^-24 (the textbook bound for recursive summation), and it is reached in
/// practice: once one large term (the row maximum gives exp(0) = 1) is in the running sum,
/// every later term under half an ulp of it (6e-8) is lost. Each output also carries the
/// error of `expf` (2 ulp) and of the final scaling. The per-element bound is therefore
/// `(n + 4) * 2^-24` relative (at least 1e-5); on average the errors are far smaller, so the
/// relative L2 error must stay under 1e-5 whatever n is.
pub fn tolerance_f32(sequential_terms: usize) -> Tolerance {
    let unit_roundoff = 2f64.powi(-24);
    let rtol = ((sequential_terms as f64 + 4.0) * unit_roundoff).max(1e-5);
    Tolerance::new(1e-12, rtol).with_max_rel_l2(1e-5)
}

/// The tolerance for a softmax computed in f32 and stored as `T`: [`tolerance_f32`] plus the
/// rounding of each output to `T` (half an ulp: 2^-11 relative for f16, 2^-8 for bf16; f16
/// outputs under 2^-14 are subnormal, with absolute spacing 2^-24). Averaged over many
/// elements that rounding is about 0.6 of its bound, which sets the relative L2 limit.
pub fn tolerance_for<T: Element>(sequential_terms: usize) -> Tolerance {
    let f32_tolerance = tolerance_f32(sequential_terms);
    let (half_ulp, atol, max_rel_l2) = match T::DTYPE {
        Dtype::F32 => return f32_tolerance,
        Dtype::F16 => (2f64.powi(-11), 2f64.powi(-24), 1e-3),
        Dtype::Bf16 => (2f64.powi(-8), 1e-12, 5e-3),
        integer => panic!("softmax outputs are floats, not {integer}"),
    };
    Tolerance::new(atol, f32_tolerance.rtol + half_ulp).with_max_rel_l2(max_rel_l2)
}

/// Softmax of each row of a row-major `rows x cols` matrix.
pub fn softmax_rows<T: Element>(x: &[T], rows: usize, cols: usize) -> Vec<f64> {
    assert_eq!(
        x.len(),
        rows * cols,
        "softmax_rows: data is not rows x cols"
    );
    let mut out = vec![0.0f64; x.len()];
    // Rows on every core: the GPU tests' shapes reach millions of elements.
    out.par_chunks_mut(cols.max(1))
        .zip(x.par_chunks(cols.max(1)))
        .for_each(|(out, row)| {
            for (o, v) in out.iter_mut().zip(row) {
                *o = v.to_f64();
            }
            let max = out.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            if max == f64::NEG_INFINITY {
                out.fill(0.0);
                return;
            }
            let mut sum = 0.0;
            for o in out.iter_mut() {
                *o = (*o - max).exp();
                sum += *o;
            }
            for o in out.iter_mut() {
                *o /= sum;
            }
        });
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use approx::assert_relative_eq;

    #[test]
    fn known_values() {
        let out = softmax_rows(&[1.0f32, 2.0, 3.0], 1, 3);
        let e = [1.0f64.exp(), 2.0f64.exp(), 3.0f64.exp()];
        let sum: f64 = e.iter().sum();
        for (o, v) in out.iter().zip(e) {
            assert_relative_eq!(*o, v / sum, max_relative = 1e-15);
        }
        assert_relative_eq!(out[2], 0.665_240_955_774_821_2, max_relative = 1e-15);
    }

    #[test]
    fn each_row_sums_to_one_and_rows_are_independent() {
        let x: Vec<f32> = (0..12).map(|i| (i as f32 * 0.7).sin() * 5.0).collect();
        let out = softmax_rows(&x, 3, 4);
        for (r, row) in out.chunks(4).enumerate() {
            assert_relative_eq!(row.iter().sum::<f64>(), 1.0, max_relative = 1e-14);
            let alone = softmax_rows(&x[r * 4..r * 4 + 4], 1, 4);
            assert_eq!(row, &alone[..]);
        }
    }

    #[test]
    fn invariant_to_a_shift_of_the_row() {
        let x = [0.5f32, -1.0, 2.0, 0.0];
        let shifted: Vec<f32> = x.iter().map(|v| v + 100.0).collect();
        let (a, b) = (softmax_rows(&x, 1, 4), softmax_rows(&shifted, 1, 4));
        for (p, q) in a.iter().zip(&b) {
            assert_relative_eq!(*p, *q, max_relative = 1e-12);
        }
    }

    #[test]
    fn large_inputs_do_not_overflow() {
        let out = softmax_rows(&[1000.0f32, 1000.0, f32::MAX], 1, 3);
        assert_eq!(out, vec![0.0, 0.0, 1.0]);
    }

    #[test]
    fn minus_infinity_gives_zero_and_an_all_minus_infinity_row_gives_zeros() {
        let ninf = f32::NEG_INFINITY;
        let out = softmax_rows(&[ninf, 0.0, ninf, ninf, ninf, ninf], 2, 3);
        assert_eq!(out, vec![0.0, 1.0, 0.0, 0.0, 0.0, 0.0]);
    }

    #[test]
    fn tolerance_grows_with_the_summation_chain() {
        assert_eq!(tolerance_f32(32).rtol, 1e-5);
        assert_relative_eq!(tolerance_f32(4096).rtol, 4100.0 / 16_777_216.0);
        assert_eq!(tolerance_f32(4096).max_rel_l2, 1e-5);
    }

    #[test]
    fn half_types_add_their_output_rounding() {
        use half::{bf16, f16};
        let f = tolerance_for::<f32>(32);
        assert_eq!(f, tolerance_f32(32));
        assert_relative_eq!(tolerance_for::<f16>(32).rtol, 1e-5 + 1.0 / 2048.0);
        assert_relative_eq!(tolerance_for::<bf16>(32).rtol, 1e-5 + 1.0 / 256.0);
    }

    #[test]
    fn one_column_is_always_one() {
        assert_eq!(softmax_rows(&[-3.0f32, 7.0], 2, 1), vec![1.0, 1.0]);
    }
}
