//! How a backward's gradients are checked: each one's tolerance from its reference's typical
//! size, each element's own allowance from its terms' magnitudes, and the f64 reference at the
//! checked rows and keys ([`ExpectedGradients`]).

use common::dtype::Dtype;
use common::element::Element;
use common::family::attention;
use common::measure::check::{self, CheckReport, Tolerance};
use common::reference::attention::{
    self as reference, AttentionGradients, AttentionShape, BackwardInputs, KeyRow, QueryRow,
};

/// Tolerance of one gradient, scaled by its reference's root mean square: the gradients sum
/// many terms of both signs (dS sums to 0 along a row), so an error is best measured against
/// their typical size. Every product's 16-bit operand (P, dS, and the stored inputs) is a
/// relative error of at most 2^-8 (bf16) or 2^-11 (f16) on its term, and the output is
/// rounded once more; the f32 sums add far less. The absolute term never goes below 1e-6:
/// where a gradient is exactly 0 (one key per row, so dS = P (dP - D) = 0) the f32 sums leave
/// about 6e-8 (seen on the H100), which says nothing about correctness.
pub fn grad_tolerance(dtype: Dtype, reference: &[f64]) -> Tolerance {
    let rms = (reference.iter().map(|v| v * v).sum::<f64>() / reference.len().max(1) as f64).sqrt();
    match dtype {
        Dtype::F16 => Tolerance::new((4e-3 * rms).max(1e-6), 8e-3).with_max_rel_l2(4e-3),
        _ => Tolerance::new((2.5e-2 * rms).max(1e-6), 4e-2).with_max_rel_l2(2e-2),
    }
}

/// Each element's own allowance on top of [`grad_tolerance`], from the reference's sum of
/// the absolute values of its terms (`Terms::Absolute`): a kernel that rounds P or dS to
/// `dtype` before a product errs by up to the format's unit roundoff times that sum, even
/// where the terms cancel to a gradient much smaller than the typical one (the early keys of
/// a causal sequence, which every query sees, are such elements).
pub fn grad_slack(dtype: Dtype, magnitudes: &[f64]) -> Vec<f64> {
    let unit_roundoff = match dtype {
        Dtype::F16 => 2f64.powi(-11),
        Dtype::Bf16 => 2f64.powi(-8),
        _ => 2f64.powi(-24),
    };
    magnitudes.iter().map(|m| unit_roundoff * m).collect()
}

/// One of the three gradients, as the checks name them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gradient {
    Dq,
    Dk,
    Dv,
}

impl Gradient {
    pub const ALL: [Gradient; 3] = [Gradient::Dq, Gradient::Dk, Gradient::Dv];

    pub fn name(self) -> &'static str {
        match self {
            Gradient::Dq => "dQ",
            Gradient::Dk => "dK",
            Gradient::Dv => "dV",
        }
    }

    fn of(self, g: &AttentionGradients) -> &[f64] {
        match self {
            Gradient::Dq => &g.dq,
            Gradient::Dk => &g.dk,
            Gradient::Dv => &g.dv,
        }
    }
}

/// The reference gradients at some query rows (dQ) and keys (dK, dV), every one of them when
/// given [`AttentionShape::all_query_rows`] and [`AttentionShape::all_key_rows`], computed in
/// blocks on every host core ([`reference::attention_backward_at`]: a whole test shape in
/// milliseconds); with the sums of their terms' absolute values, each element's own
/// allowance ([`grad_slack`]).
pub struct ExpectedGradients {
    pub values: AttentionGradients,
    pub magnitudes: AttentionGradients,
}

impl ExpectedGradients {
    pub fn at<T: Element>(
        x: &BackwardInputs<T>,
        shape: &AttentionShape,
        rows: &[QueryRow],
        keys: &[KeyRow],
    ) -> Self {
        let (values, magnitudes) =
            reference::attention_backward_at(x, shape, shape.default_scale(), rows, keys);
        Self { values, magnitudes }
    }

    /// Checks one gradient with [`grad_tolerance`] and [`grad_slack`]: `got` is a whole
    /// output of `shape`, and the reference's values sit at its flat indices `at` (None: every
    /// element, in order).
    pub fn check<T: Element>(
        &self,
        which: Gradient,
        got: &[T],
        at: Option<&[usize]>,
        shape: &[usize],
    ) -> CheckReport {
        let values = which.of(&self.values);
        let tolerance = grad_tolerance(T::DTYPE, values);
        let slack = grad_slack(T::DTYPE, which.of(&self.magnitudes));
        check::compare_at_with_slack(got, at, values, &slack, shape, tolerance)
    }
}

/// The reference gradients at the rows and keys a run checks, and where they sit in the
/// `[dQ | dK | dV]` buffer: every query row and key when the reference costs at most a given
/// number of multiply-adds; otherwise a random query row and a random key in every tile of
/// every head of every sequence, and the first and last of each.
pub struct SampledGradients {
    gradients: ExpectedGradients,
    /// Flat indices in the buffer, in `Gradient` order (dQ, dK, dV).
    at: [Vec<usize>; 3],
    /// Whether every row and key is checked.
    pub full: bool,
    /// Query rows and key rows checked.
    pub checked: (usize, usize),
}

impl SampledGradients {
    pub fn new<T: Element>(
        x: &BackwardInputs<T>,
        shape: &AttentionShape,
        max_work: usize,
        seed: u64,
    ) -> Self {
        let (q_len, k_len) = (x.q.len(), x.k.len());
        let rows = attention::query_rows_to_check(shape, max_work, seed);
        let keys = attention::key_rows_to_check(shape, max_work, seed);
        let q_at = attention::query_row_elements(shape, &rows);
        let k_at = |base: usize| attention::key_row_elements(shape, &keys, base);
        Self {
            gradients: ExpectedGradients::at(x, shape, &rows, &keys),
            at: [q_at, k_at(q_len), k_at(q_len + k_len)],
            full: rows.len() == shape.total_q() * shape.heads,
            checked: (rows.len(), keys.len()),
        }
    }

    /// Checks one gradient in the whole `[dQ | dK | dV]` buffer.
    pub fn check<T: Element>(&self, got: &[T], which: Gradient) -> CheckReport {
        let at = &self.at[which as usize];
        self.gradients.check(which, got, Some(at), &[got.len()])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use common::reference::attention::HeldBackward;

    #[test]
    fn the_expected_gradients_at_every_row_are_the_full_pass() {
        let shape = AttentionShape::uniform(2, 9, 7, 4, 2, 8, true);
        let (q_len, k_len) = (shape.total_q() * 4 * 8, shape.total_k() * 2 * 8);
        let uniform = common::measure::inputs::uniform::<f32>;
        let held = HeldBackward::new(
            [
                uniform(q_len, -2.0, 2.0, 1),
                uniform(k_len, -2.0, 2.0, 2),
                uniform(k_len, -1.0, 1.0, 3),
                uniform(q_len, -1.0, 1.0, 4),
            ],
            &shape,
            shape.default_scale(),
        );
        let x = held.inputs();
        let expected =
            ExpectedGradients::at(&x, &shape, &shape.all_query_rows(), &shape.all_key_rows());
        let full = reference::attention_backward(&x, &shape, shape.default_scale());
        assert_eq!(expected.values.dq, full.dq);
        assert_eq!(expected.values.dk, full.dk);
        assert_eq!(expected.values.dv, full.dv);
        // The reference itself, stored as f32, passes; a gradient off by a lot fails.
        let dk: Vec<f32> = full.dk.iter().map(|&g| g as f32).collect();
        assert!(
            expected
                .check(Gradient::Dk, &dk, None, &[dk.len()])
                .passed()
        );
        let wrong: Vec<f32> = dk.iter().map(|g| g + 1.0).collect();
        assert!(
            !expected
                .check(Gradient::Dk, &wrong, None, &[dk.len()])
                .passed()
        );
    }
}
