//! Comparing a kernel's output with the CPU reference.
//!
//! An element passes when `|out - ref| <= atol + rtol * |ref|` (plus, with
//! [`compare_with_slack`], an allowance of its own), and the whole output passes
//! when every element does and the relative L2 error `||out - ref|| / ||ref||` is at most
//! `max_rel_l2`. The per-element bound is the worst case of the algorithm's rounding; the L2
//! bound is what it gives on average, so a kernel slightly wrong everywhere fails too. The
//! report counts elements still poison (never written) and NaNs the reference does not have,
//! and keeps the first few mismatches with their indices for the failure message.

use std::fmt;

use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use crate::element::Element;

/// `|out - ref| <= atol + rtol * |ref|` per element, and a bound on the relative L2 error.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Tolerance {
    pub atol: f64,
    pub rtol: f64,
    pub max_rel_l2: f64,
}

impl Tolerance {
    /// Every element equal to its reference: for outputs computed exactly (integer sums,
    /// counts, data movement, selections).
    pub const EXACT: Tolerance = Tolerance::new(0.0, 0.0);

    /// Per-element bounds; the relative L2 error may then be at most `rtol` as well.
    pub const fn new(atol: f64, rtol: f64) -> Self {
        Self {
            atol,
            rtol,
            max_rel_l2: rtol,
        }
    }

    /// A tighter (or looser) bound on the relative L2 error than `rtol`.
    pub const fn with_max_rel_l2(self, max_rel_l2: f64) -> Self {
        Self { max_rel_l2, ..self }
    }

    fn allows(&self, got: f64, expected: f64, slack: f64) -> bool {
        if got == expected {
            // Also equal infinities, which the subtraction below would turn into NaN.
            return true;
        }
        if !expected.is_finite() {
            // An infinite reference (the log-sum-exp of a row that sees no key) would make
            // `rtol * |ref|` infinite and let any finite output through: it is matched exactly.
            return false;
        }
        (got - expected).abs() <= self.atol + self.rtol * expected.abs() + slack
    }
}

/// How many mismatches a report keeps for printing.
const KEEP_MISMATCHES: usize = 8;

/// One element outside the tolerance.
#[derive(Debug, Clone)]
pub struct Mismatch {
    /// Index per dimension of the shape given to [`compare`].
    pub index: Vec<usize>,
    pub got: f64,
    pub expected: f64,
    pub unwritten: bool,
}

/// The outcome of one comparison.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CheckReport {
    pub elements: usize,
    pub tolerance: Tolerance,
    /// Elements outside the tolerance, unwritten and NaN ones included.
    pub mismatches: usize,
    /// Elements still holding the poison value: the kernel never wrote them.
    pub unwritten: usize,
    /// NaN (not poison) where the reference is a number.
    pub nans: usize,
    /// Over elements where both values are finite.
    pub max_abs_err: f64,
    /// `|out - ref| / |ref|` over finite elements with `ref != 0`.
    pub max_rel_err: f64,
    /// `||out - ref||_2 / ||ref||_2` over finite elements (0 when the reference is all 0).
    pub rel_l2_err: f64,
    #[serde(skip)]
    pub first: Vec<Mismatch>,
}

impl CheckReport {
    /// Every element within the tolerance, the L2 bound met, and at least one element
    /// compared: a check of nothing is not a pass.
    pub fn passed(&self) -> bool {
        self.elements > 0 && self.mismatches == 0 && self.rel_l2_err <= self.tolerance.max_rel_l2
    }
}

/// Compares `got` (a kernel's output) with `expected` (the f64 reference), both laid out
/// row-major in `shape`.
pub fn compare<T: Element>(
    got: &[T],
    expected: &[f64],
    shape: &[usize],
    tolerance: Tolerance,
) -> CheckReport {
    assert_eq!(
        got.len(),
        expected.len(),
        "output and reference lengths differ"
    );
    compare_with_slack(got, expected, &[], shape, tolerance)
}

/// [`compare`] where element `i` may also err by `slack[i]` (empty: none): an error bound
/// that differs per element, such as a unit roundoff times the sum of the absolute values of
/// the terms a 16-bit kernel adds up to that element.
pub fn compare_with_slack<T: Element>(
    got: &[T],
    expected: &[f64],
    slack: &[f64],
    shape: &[usize],
    tolerance: Tolerance,
) -> CheckReport {
    compare_at_with_slack(got, None, expected, slack, shape, tolerance)
}

/// Compares `got` (a whole output, row-major in `shape`) with a reference known only at the
/// flat indices `at` (`expected[i]` is the value at `at[i]`): a sampled check of an output too
/// large for a full CPU reference. The report counts the sampled elements.
pub fn compare_at<T: Element>(
    got: &[T],
    at: &[usize],
    expected: &[f64],
    shape: &[usize],
    tolerance: Tolerance,
) -> CheckReport {
    compare_at_with_slack(got, Some(at), expected, &[], shape, tolerance)
}

/// [`compare_at`] (`at: None` is every element, in order) with [`compare_with_slack`]'s
/// per-element allowance; `slack` goes with `expected`.
pub fn compare_at_with_slack<T: Element>(
    got: &[T],
    at: Option<&[usize]>,
    expected: &[f64],
    slack: &[f64],
    shape: &[usize],
    tolerance: Tolerance,
) -> CheckReport {
    assert!(
        slack.is_empty() || slack.len() == expected.len(),
        "one slack per reference value"
    );
    let slack_of = |n: usize| slack.get(n).copied().unwrap_or(0.0);
    match at {
        None => {
            assert_eq!(
                got.len(),
                expected.len(),
                "output and reference lengths differ"
            );
            let pair = |i: usize| (i, (got[i], expected[i], slack_of(i)));
            compare_pairs(got.len(), pair, got.len(), shape, tolerance)
        }
        Some(at) => {
            assert_eq!(
                at.len(),
                expected.len(),
                "indices and reference lengths differ"
            );
            assert!(
                at.iter().all(|&i| i < got.len()),
                "a sampled index is outside the output"
            );
            let pair = |n: usize| (at[n], (got[at[n]], expected[n], slack_of(n)));
            compare_pairs(at.len(), pair, got.len(), shape, tolerance)
        }
    }
}

/// Elements one core compares at a time: large enough that the split costs nothing, small
/// enough that a GPU test's outputs of tens of millions of elements use every core.
const COMPARE_CHUNK: usize = 1 << 16;

/// The comparison itself, over `pair(n)` = (flat index, (got, expected, slack)) for `n` in
/// `0..count`, of an output of `len` elements laid out in `shape`: chunks on every core, their
/// tallies added in order, so the first mismatches kept are the first in the order compared
/// (index order; a sampled check's sample order).
fn compare_pairs<T: Element>(
    count: usize,
    pair: impl Fn(usize) -> (usize, (T, f64, f64)) + Sync,
    len: usize,
    shape: &[usize],
    tolerance: Tolerance,
) -> CheckReport {
    assert_eq!(
        shape.iter().product::<usize>(),
        len,
        "shape does not match the data"
    );
    let tallies: Vec<Tally> = (0..count.div_ceil(COMPARE_CHUNK))
        .into_par_iter()
        .map(|chunk| {
            let mut tally = Tally::default();
            let end = ((chunk + 1) * COMPARE_CHUNK).min(count);
            for n in chunk * COMPARE_CHUNK..end {
                let (i, (g, e, slack)) = pair(n);
                tally.add(i, g, e, slack, shape, &tolerance);
            }
            tally
        })
        .collect();
    let mut total = Tally::default();
    for tally in tallies {
        total.merge(tally);
    }
    CheckReport {
        elements: count,
        tolerance,
        mismatches: total.mismatches,
        unwritten: total.unwritten,
        nans: total.nans,
        max_abs_err: total.max_abs_err,
        max_rel_err: total.max_rel_err,
        rel_l2_err: if total.ref_sq > 0.0 {
            (total.diff_sq / total.ref_sq).sqrt()
        } else {
            total.diff_sq.sqrt()
        },
        first: total.first,
    }
}

/// What a run of compared elements found.
#[derive(Default)]
struct Tally {
    mismatches: usize,
    unwritten: usize,
    nans: usize,
    max_abs_err: f64,
    max_rel_err: f64,
    diff_sq: f64,
    ref_sq: f64,
    first: Vec<Mismatch>,
}

impl Tally {
    fn add<T: Element>(
        &mut self,
        i: usize,
        g: T,
        e: f64,
        slack: f64,
        shape: &[usize],
        tolerance: &Tolerance,
    ) {
        let unwritten = g.is_poison();
        let gv = g.to_f64();
        let ok = if unwritten {
            self.unwritten += 1;
            false
        } else if gv.is_nan() || e.is_nan() {
            let both = gv.is_nan() && e.is_nan();
            if gv.is_nan() && !both {
                self.nans += 1;
            }
            both
        } else {
            if gv.is_finite() && e.is_finite() {
                let err = (gv - e).abs();
                self.max_abs_err = self.max_abs_err.max(err);
                if e != 0.0 {
                    self.max_rel_err = self.max_rel_err.max(err / e.abs());
                }
                self.diff_sq += err * err;
                self.ref_sq += e * e;
            }
            tolerance.allows(gv, e, slack)
        };
        if !ok {
            self.mismatches += 1;
            if self.first.len() < KEEP_MISMATCHES {
                self.first.push(Mismatch {
                    index: unflatten(i, shape),
                    got: gv,
                    expected: e,
                    unwritten,
                });
            }
        }
    }

    /// Adds the tally of the elements that come after this one's.
    fn merge(&mut self, later: Tally) {
        self.mismatches += later.mismatches;
        self.unwritten += later.unwritten;
        self.nans += later.nans;
        self.max_abs_err = self.max_abs_err.max(later.max_abs_err);
        self.max_rel_err = self.max_rel_err.max(later.max_rel_err);
        self.diff_sq += later.diff_sq;
        self.ref_sq += later.ref_sq;
        let room = KEEP_MISMATCHES.saturating_sub(self.first.len());
        self.first.extend(later.first.into_iter().take(room));
    }
}

fn unflatten(mut flat: usize, shape: &[usize]) -> Vec<usize> {
    let mut index = vec![0; shape.len()];
    for (slot, &dim) in index.iter_mut().zip(shape).rev() {
        *slot = flat % dim;
        flat /= dim;
    }
    index
}

impl fmt::Display for CheckReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let t = self.tolerance;
        if self.elements == 0 {
            return writeln!(f, "FAIL: nothing was compared (no reference values)");
        }
        if self.passed() {
            return write!(
                f,
                "ok: {} elements within {:.0e} + {:.0e}*|ref|, rel L2 {:.2e} <= {:.0e} \
                 (max abs err {:.2e})",
                self.elements, t.atol, t.rtol, self.rel_l2_err, t.max_rel_l2, self.max_abs_err
            );
        }
        if self.mismatches == 0 {
            return writeln!(
                f,
                "FAIL: every element is within {:.0e} + {:.0e}*|ref|, but the relative L2 \
                 error {:.3e} exceeds {:.0e}",
                t.atol, t.rtol, self.rel_l2_err, t.max_rel_l2
            );
        }
        writeln!(
            f,
            "FAIL: {} of {} elements outside |out - ref| <= {:.0e} + {:.0e}*|ref| \
             ({} never written, {} NaN; max abs err {:.3e}, rel L2 {:.3e})",
            self.mismatches,
            self.elements,
            t.atol,
            t.rtol,
            self.unwritten,
            self.nans,
            self.max_abs_err,
            self.rel_l2_err
        )?;
        for m in &self.first {
            let got = if m.unwritten {
                "never written".to_string()
            } else {
                format!("{:.9e}", m.got)
            };
            writeln!(
                f,
                "  at {:?}: got {got}, expected {:.9e}",
                m.index, m.expected
            )?;
        }
        if self.mismatches > self.first.len() {
            writeln!(f, "  ... and {} more", self.mismatches - self.first.len())?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOL: Tolerance = Tolerance::new(1e-6, 1e-5);

    #[test]
    fn identical_outputs_pass_with_zero_error() {
        let r = compare(&[1.0f32, -2.5, 0.0], &[1.0, -2.5, 0.0], &[3], TOL);
        assert!(r.passed());
        assert_eq!(r.max_abs_err, 0.0);
        assert_eq!(r.rel_l2_err, 0.0);
    }

    #[test]
    fn an_error_beyond_tolerance_is_found_with_its_index() {
        let got = [1.0f32, 2.0, 3.0, 4.5, 5.0, 6.0];
        let expected = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
        let r = compare(&got, &expected, &[2, 3], TOL);
        assert!(!r.passed());
        assert_eq!(r.mismatches, 1);
        assert_eq!(r.first[0].index, vec![1, 0]);
        approx::assert_relative_eq!(r.max_abs_err, 0.5);
        approx::assert_relative_eq!(r.max_rel_err, 0.125);
        assert!(r.to_string().contains("at [1, 0]"));
    }

    #[test]
    fn errors_within_atol_plus_rtol_pass() {
        let expected = [1000.0, 0.0];
        let got = [1000.0f32 + 0.009, 5e-7];
        assert!(compare(&got, &expected, &[2], TOL).passed());
    }

    #[test]
    fn slack_widens_only_its_own_element() {
        let expected = [1.0, 1.0, 1.0];
        let got = [1.001f32, 1.001, 1.0];
        let loose = Tolerance::new(1e-6, 1e-5).with_max_rel_l2(1e-2);
        let r = compare_with_slack(&got, &expected, &[2e-3, 0.0, 0.0], &[3], loose);
        assert_eq!(r.mismatches, 1);
        assert_eq!(r.first[0].index, vec![1]);
        let r = compare_at_with_slack(&got, Some(&[0, 2]), &[1.0, 1.0], &[2e-3, 0.0], &[3], loose);
        assert!(r.passed(), "{r}");
    }

    #[test]
    fn poison_counts_as_unwritten_and_nan_as_nan() {
        let got = [f32::POISON, f32::NAN, 1.0];
        let r = compare(&got, &[1.0, 1.0, 1.0], &[3], TOL);
        assert_eq!(r.mismatches, 2);
        assert_eq!(r.unwritten, 1);
        assert_eq!(r.nans, 1);
        assert!(r.to_string().contains("never written"));
    }

    #[test]
    fn nan_matches_only_an_expected_nan_and_infinities_match_themselves() {
        let got = [f32::NAN, f32::INFINITY, f32::NEG_INFINITY];
        let expected = [f64::NAN, f64::INFINITY, f64::NEG_INFINITY];
        assert!(compare(&got, &expected, &[3], TOL).passed());
        assert!(!compare(&[f32::INFINITY], &[1.0], &[1], TOL).passed());
    }

    #[test]
    fn an_infinite_reference_is_matched_exactly_not_within_an_infinite_bound() {
        // rtol * |-inf| is infinite: before, any finite output passed here.
        let r = compare(
            &[0.0f32, 1e30],
            &[f64::NEG_INFINITY, f64::INFINITY],
            &[2],
            TOL,
        );
        assert_eq!(r.mismatches, 2, "{r}");
        let slack = [1.0];
        let r = compare_with_slack(&[f32::INFINITY], &[f64::NEG_INFINITY], &slack, &[1], TOL);
        assert!(!r.passed());
        // A NaN reference is met only by NaN.
        assert!(!compare(&[0.0f32], &[f64::NAN], &[1], TOL).passed());
    }

    #[test]
    fn a_check_of_nothing_fails() {
        let r = compare::<f32>(&[], &[], &[0], TOL);
        assert!(!r.passed());
        assert!(r.to_string().contains("nothing was compared"), "{r}");
        let r = compare_at(&[1.0f32], &[], &[], &[1], TOL);
        assert!(!r.passed());
    }

    #[test]
    fn a_small_error_everywhere_fails_the_l2_bound() {
        let expected = vec![1.0; 100];
        let got = vec![1.0f32 + 5e-6; 100];
        let loose = Tolerance::new(0.0, 1e-4);
        assert!(compare(&got, &expected, &[100], loose).passed());
        let r = compare(&got, &expected, &[100], loose.with_max_rel_l2(1e-6));
        assert!(!r.passed());
        assert_eq!(r.mismatches, 0);
        assert!(r.to_string().contains("relative L2"), "{r}");
    }

    #[test]
    fn a_sampled_check_sees_only_its_samples_and_reports_true_indices() {
        let got = [1.0f32, 9.0, 3.0, f32::POISON, 5.0, 6.0];
        // Element 1 is wrong and element 3 never written, but only 0, 4 and 5 are sampled.
        let r = compare_at(&got, &[0, 4, 5], &[1.0, 5.0, 6.0], &[2, 3], TOL);
        assert!(r.passed());
        assert_eq!(r.elements, 3);
        let r = compare_at(&got, &[5, 3], &[6.0, 4.0], &[2, 3], TOL);
        assert_eq!((r.mismatches, r.unwritten), (1, 1));
        assert_eq!(r.first[0].index, vec![1, 0]);
    }

    /// Outputs of several chunks (compared on different cores): every mismatch is counted,
    /// the first ones kept are the first in index order, and the sums are the whole output's.
    #[test]
    fn a_large_output_is_compared_whole_across_chunks() {
        let len = 5 * COMPARE_CHUNK + 17;
        let expected: Vec<f64> = (0..len).map(|i| (i % 97) as f64 - 40.0).collect();
        let mut got: Vec<f32> = expected.iter().map(|&v| v as f32).collect();
        let ok = compare(&got, &expected, &[len], Tolerance::new(0.0, 0.0));
        assert!(ok.passed() && ok.elements == len, "{ok}");
        // Wrong elements in the last chunk first written, then earlier ones: the report
        // keeps the earliest indices whatever chunk finished first.
        let wrong: Vec<usize> = (0..12)
            .map(|n| len - 1 - n * 3)
            .chain([7, 3 * COMPARE_CHUNK])
            .collect();
        for &i in &wrong {
            got[i] += 1.0;
        }
        got[COMPARE_CHUNK + 1] = f32::POISON;
        let report = compare(&got, &expected, &[len], Tolerance::new(0.0, 0.0));
        assert!(!report.passed());
        assert_eq!(report.mismatches, wrong.len() + 1);
        assert_eq!(report.unwritten, 1);
        let first: Vec<usize> = report.first.iter().map(|m| m.index[0]).collect();
        let mut sorted: Vec<usize> = wrong.iter().copied().chain([COMPARE_CHUNK + 1]).collect();
        sorted.sort_unstable();
        assert_eq!(first, sorted[..KEEP_MISMATCHES]);
        assert_eq!(report.max_abs_err, 1.0);
    }

    #[test]
    fn unflatten_is_row_major() {
        assert_eq!(unflatten(7, &[2, 3, 4]), vec![0, 1, 3]);
        assert_eq!(unflatten(23, &[2, 3, 4]), vec![1, 2, 3]);
    }
}
