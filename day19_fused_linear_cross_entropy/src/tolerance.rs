//! Tolerances, from where the 16-bit roundings are.

use common::Tolerance;

// bf16's unit roundoff: half an ulp is up to 2^-8 of the value (8 significant bits), not
// 2^-9: just above a power of two an ulp is 2^-7 of the value. The first H100 run found
// it (-0.27248 correctly rounded to -0.27344 is 3.5e-3 off).
const BF16_HALF_ULP: f64 = 1.0 / 256.0;

/// dH or dW of the fused problem, against the f64 reference that rounds the logits and
/// their gradient to bf16 as the kernels store them (`Rounding::Bf16`): the bf16 output
/// (half an ulp, twice for margin) relative to the element, plus each element's own
/// allowance, [`gradient_slack`]. The absolute floor, 1e-7, is for exact zeros: with one
/// vocabulary entry the exact gradient is 0 and the f32 sums leave about 5e-9 (seen on the
/// H100). The relative L2 bound stays at 1e-2.
pub fn gradient() -> Tolerance {
    Tolerance::new(1e-7, 2.0 * BF16_HALF_ULP).with_max_rel_l2(1e-2)
}

/// Each element's allowance from the sum of its terms' magnitudes `terms`
/// ([`crate::reference::Sums::terms`]): dz stored in bf16 (half an ulp of each term); a
/// logit that the GEMM's f32 sums, in another order, round to its other bf16 neighbour
/// (`2^-7 |z|`, which moves p by that relative amount: the terms count `p |z|` for it, and
/// one such neighbour per term is covered twice); dW accumulated
/// in bf16 over `chunks` chunks, half an ulp of a partial sum each. All of it relative to
/// the terms, not to the element: it holds where they cancel to a small gradient.
pub fn gradient_slack(terms: &[f64], chunks: usize) -> Vec<f64> {
    let factor = (4 + chunks) as f64 * BF16_HALF_ULP;
    terms.iter().map(|m| factor * m).collect()
}

/// One version's dH and dW against another's that passed its f64 check (the chunked
/// versions against the first one on problems too large for a full f64 reference): both
/// err, so the allowance is an element-wise rtol twice the f64 check's, and an absolute
/// floor of 2^-6 of the largest gradient for elements whose terms cancel.
pub fn gradient_against_version(max_abs: f64, chunks: usize) -> Tolerance {
    let rtol = (4 + chunks) as f64 * BF16_HALF_ULP;
    Tolerance::new((max_abs / 64.0).max(1e-7), rtol).with_max_rel_l2(1e-2)
}

/// The loss: f32 log-sum-exp per row from bf16 logits, summed in f32; a logit that the
/// GEMM rounds to the other neighbour moves a row's loss by up to an ulp of it.
pub const LOSS: Tolerance = Tolerance::new(2e-3, 2e-3);

/// dlogits of cross-entropy alone, against the exact reference on the same bf16 logits:
/// the bf16 output (half an ulp), ex2.approx (2 ulp of f32) and the f32 lse, whose error
/// (an ulp of lse * log2(e), 1e-5 at |lse| = 50, the inputs' outliers) multiplies p. The
/// target's `(p_y - 1) / N` cancels when p_y is near 1, so an absolute term of that size
/// over N (`inv_count` = 1/N).
pub fn dlogits(inv_count: f64) -> Tolerance {
    Tolerance::new(3e-5 * inv_count + 1e-30, 1.5 * BF16_HALF_ULP).with_max_rel_l2(3e-3)
}

/// The loss of cross-entropy alone: f32 sums of exact bf16 logits. The L2 bound is looser
/// than the relative one because a one-row loss can cancel almost to nothing (one
/// vocabulary entry with label smoothing leaves only the z-loss term), where the absolute
/// term is what bounds it: 1.4e-4 relative was seen on the H100 for that case.
pub const CE_LOSS: Tolerance = Tolerance::new(1e-5, 1e-4).with_max_rel_l2(1e-3);

#[cfg(test)]
mod tests {
    use super::*;
    use common::measure::check;
    use half::bf16;

    /// The old gradient check allowed 2^-6 of the largest gradient on every element: a small
    /// gradient ten times too large passed. Its own allowance, from its terms, fails it.
    #[test]
    fn a_wrong_small_gradient_fails_its_element_wise_bound() {
        let expected = [1e-2, 1e-5];
        let terms = [1.2e-2, 2e-5];
        let got = [bf16::from_f64(1e-2), bf16::from_f64(1e-4)];
        let old = gradient_against_version(1e-2, 8).with_max_rel_l2(1.0);
        assert!(check::compare(&got, &expected, &[2], old).passed());
        let slack = gradient_slack(&terms, 8);
        let report = check::compare_with_slack(&got, &expected, &slack, &[2], gradient());
        assert_eq!(report.mismatches, 1, "{report}");
        assert_eq!(report.first[0].index, vec![1]);
        // The right value passes.
        let right = [bf16::from_f64(1e-2), bf16::from_f64(1e-5)];
        let report = check::compare_with_slack(&right, &expected, &slack, &[2], gradient());
        assert!(report.passed(), "{report}");
    }
}
