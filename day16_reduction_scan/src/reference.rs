//! The f64 references of the day's reductions and scans: sum, dot product, count of a value,
//! sums of consecutive segments, and the inclusive prefix sum; with the tolerances an f32
//! kernel must meet against them.
//!
//! The float references sum in f64 with Neumaier's compensation, so their own error (a few
//! f64 ulps whatever the length) is nothing next to an f32 kernel's. Integer results are exact.
//!
//! # The error bound of an f32 summation
//!
//! Any order of summation is a tree: each term takes part in some number of f32 additions on
//! its way to the result. If no term takes part in more than `d` of them (the depth), the
//! computed sum satisfies `|s - S| <= gamma(d) * sum |x_i|` with `gamma(d) = d u / (1 - d u)`
//! and `u = 2^-24` (Higham, *Accuracy and Stability of Numerical Algorithms*, section 4.2).
//! A pairwise tree over 2^28 terms has d = 28; a grid-stride loop where each thread adds
//! m terms in sequence has d = m plus the depth of the tree that combines the threads; a scan
//! whose block prefixes are chained tile after tile has d up to the number of tiles. The
//! kernel's launcher knows its order, so it states `d` and [`covering_tolerance`] turns the
//! per-element bounds into the check's `atol + rtol * |ref|`.
//!
//! The bound is relative to `sum |x_i|`, not to `|sum x_i|`: inputs of mean zero cancel, their
//! sum is about `sqrt(n)` times smaller than `sum |x_i|`, and no relative error of the result
//! could be promised. The days therefore sum inputs of a positive mean with negative values
//! among them (uniform in [-0.5, 1.5): `sum |x| = 1.25 |sum x|` for long sums), so the bound is
//! a meaningful relative error and a lost sign still fails.

use common::{Element, Tolerance};
use rayon::prelude::*;

/// The unit roundoff of f32: half the distance from 1 to the next float.
pub const F32_UNIT_ROUNDOFF: f64 = 1.0 / (1u64 << 24) as f64;

/// `gamma(d) = d u / (1 - d u)`: the relative bound of `d` nested f32 roundings.
pub fn gamma(depth: u64) -> f64 {
    let du = depth as f64 * F32_UNIT_ROUNDOFF;
    assert!(
        du < 0.5,
        "a summation depth of {depth} has no useful f32 bound"
    );
    du / (1.0 - du)
}

/// A compensated f64 accumulator (Neumaier): the running sum and the rounding it has lost.
#[derive(Debug, Clone, Copy, Default)]
struct Accumulator {
    sum: f64,
    lost: f64,
}

impl Accumulator {
    fn add(&mut self, x: f64) {
        let t = self.sum + x;
        self.lost += if self.sum.abs() >= x.abs() {
            (self.sum - t) + x
        } else {
            (x - t) + self.sum
        };
        self.sum = t;
    }

    fn value(&self) -> f64 {
        self.sum + self.lost
    }
}

/// `sum x_i`.
pub fn sum<T: Element>(x: &[T]) -> f64 {
    let mut acc = Accumulator::default();
    x.iter().for_each(|v| acc.add(v.to_f64()));
    acc.value()
}

/// `sum |x_i|`, the scale of a summation's error bound.
pub fn abs_sum<T: Element>(x: &[T]) -> f64 {
    let mut acc = Accumulator::default();
    x.iter().for_each(|v| acc.add(v.to_f64().abs()));
    acc.value()
}

/// `sum a_i b_i` (each product of two f32 is exact in f64) and `sum |a_i b_i|`.
pub fn dot<T: Element>(a: &[T], b: &[T]) -> (f64, f64) {
    assert_eq!(a.len(), b.len(), "dot: inputs differ in length");
    let (mut acc, mut abs) = (Accumulator::default(), Accumulator::default());
    for (x, y) in a.iter().zip(b) {
        let p = x.to_f64() * y.to_f64();
        acc.add(p);
        abs.add(p.abs());
    }
    (acc.value(), abs.value())
}

/// How many elements equal `value`: exact.
pub fn count_equal<T: PartialEq>(x: &[T], value: T) -> u64 {
    x.iter().filter(|v| **v == value).count() as u64
}

/// Sums of consecutive segments of `len` elements (`x.len()` a multiple of `len`), and the
/// sum of absolute values of each.
pub fn segment_sums<T: Element>(x: &[T], len: usize) -> (Vec<f64>, Vec<f64>) {
    assert!(
        len > 0 && x.len().is_multiple_of(len),
        "segment_sums: {} elements are not whole segments of {len}",
        x.len()
    );
    x.chunks_exact(len).map(|s| (sum(s), abs_sum(s))).unzip()
}

/// The inclusive prefix sum `y_i = x_0 + ... + x_i`, and the running `sum_{j <= i} |x_j|`.
/// For integers of up to 2^53 in magnitude both are exact.
pub fn inclusive_scan<T: Element>(x: &[T]) -> (Vec<f64>, Vec<f64>) {
    let (mut acc, mut abs) = (Accumulator::default(), Accumulator::default());
    x.iter()
        .map(|v| {
            acc.add(v.to_f64());
            abs.add(v.to_f64().abs());
            (acc.value(), abs.value())
        })
        .unzip()
}

/// The tolerance `atol + rtol * |ref|` that admits every per-element bound `gamma(depth) *
/// abs_sums[i]` and no more than it must: `rtol` is the bound relative to the reference where
/// that ratio is typical (its 90th percentile), and `atol` covers what that leaves out (the
/// few elements whose reference cancels towards zero, such as the first prefixes of a scan).
/// The relative L2 limit is what the per-element bounds give, `||bound|| / ||ref||`.
pub fn covering_tolerance(reference: &[f64], abs_sums: &[f64], depth: u64) -> Tolerance {
    covering_tolerance_by(reference, abs_sums, |_| depth)
}

/// [`covering_tolerance`] with a depth per output (a scan's later outputs go through more
/// additions than its first ones).
pub fn covering_tolerance_by(
    reference: &[f64],
    abs_sums: &[f64],
    depth: impl Fn(usize) -> u64,
) -> Tolerance {
    assert_eq!(reference.len(), abs_sums.len(), "one |x| sum per output");
    let bound = |i: usize| gamma(depth(i)) * abs_sums[i];
    let mut ratios: Vec<f64> = (0..reference.len())
        .filter(|&i| reference[i] != 0.0)
        .map(|i| bound(i) / reference[i].abs())
        .collect();
    let rtol = if ratios.is_empty() {
        0.0
    } else {
        let at = (ratios.len() - 1) * 9 / 10;
        *ratios.select_nth_unstable_by(at, f64::total_cmp).1
    };
    let (mut atol, mut bound_sq, mut ref_sq) = (0.0f64, 0.0f64, 0.0f64);
    for (i, r) in reference.iter().enumerate() {
        let b = bound(i);
        atol = atol.max(b - rtol * r.abs());
        bound_sq += b * b;
        ref_sq += r * r;
    }
    let max_rel_l2 = if ref_sq > 0.0 {
        (bound_sq / ref_sq).sqrt()
    } else {
        0.0
    };
    Tolerance::new(atol, rtol).with_max_rel_l2(max_rel_l2)
}

/// The largest power of two that every element of `x` is a multiple of (the grid the inputs
/// lie on: 0.25 for quarters, 1 for integers), or None when all are zero.
pub fn grid_of<T: Element>(x: &[T]) -> Option<f64> {
    x.iter()
        .map(|v| v.to_f64())
        .filter(|v| *v != 0.0 && v.is_finite())
        .map(|v| {
            let bits = v.to_bits();
            let field = ((bits >> 52) & 0x7ff) as i32;
            let fraction = bits & ((1u64 << 52) - 1);
            let (mantissa, exponent) = if field == 0 {
                (fraction, -1074)
            } else {
                (fraction | (1u64 << 52), field - 1075)
            };
            exponent + mantissa.trailing_zeros() as i32
        })
        .min()
        .map(|e| 2f64.powi(e))
}

/// How many leading outputs of an f32 inclusive scan of `x` are exact whatever the order of
/// its additions. A scan only ever adds neighbouring ranges (`x_a + ... + x_b`), each
/// `prefix_b - prefix_(a-1)`, so every partial sum on the way to output `i` is at most
/// `2 max_(j <= i) |prefix_j|` in magnitude, and a multiple of the inputs' grid
/// ([`grid_of`]); while that is at most `2^24` grids it is an f32, and every addition is
/// exact. `prefix` is [`inclusive_scan`]'s.
pub fn exact_scan_len<T: Element>(x: &[T], prefix: &[f64]) -> usize {
    assert_eq!(x.len(), prefix.len(), "one prefix per input");
    let Some(grid) = grid_of(x) else {
        return x.len();
    };
    let limit = grid * (1u64 << 24) as f64;
    let mut largest = 0.0f64;
    prefix
        .iter()
        .take_while(|p| {
            largest = largest.max(p.abs());
            2.0 * largest <= limit
        })
        .count()
}

/// Per-output bounds of an f32 inclusive scan, for `check::compare_with_slack`:
/// `gamma(depth(i)) * abs_sums[i]` (each output's own, not a cover of all of them), and 0 for
/// the first `exact_len` outputs ([`exact_scan_len`]), which must match exactly.
pub fn scan_bounds(
    abs_sums: &[f64],
    exact_len: usize,
    depth: impl Fn(usize) -> u64 + Sync,
) -> Vec<f64> {
    abs_sums
        .par_iter()
        .enumerate()
        .map(|(i, a)| {
            if i < exact_len {
                0.0
            } else {
                gamma(depth(i)) * a
            }
        })
        .collect()
}

/// The tolerance to go with per-element `bounds` as slack: nothing beyond them per element,
/// and a relative L2 error of at most `||bounds|| / ||reference||`.
pub fn slack_tolerance(reference: &[f64], bounds: &[f64]) -> Tolerance {
    let norm = |v: &[f64]| v.par_iter().map(|x| x * x).sum::<f64>().sqrt();
    let r = norm(reference);
    let l2 = if r > 0.0 { norm(bounds) / r } else { 0.0 };
    Tolerance::new(0.0, 0.0).with_max_rel_l2(l2)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_sums_and_dots() {
        assert_eq!(sum(&[1.0f32, 2.0, -0.5]), 2.5);
        assert_eq!(abs_sum(&[1.0f32, 2.0, -0.5]), 3.5);
        assert_eq!(dot(&[1.0f32, 2.0, 3.0], &[4.0f32, -5.0, 6.0]), (12.0, 32.0));
        assert_eq!(sum::<f32>(&[]), 0.0);
    }

    #[test]
    fn compensation_keeps_what_plain_f64_loses() {
        // 1 + 2^-60 repeated: plain f64 addition drops every 2^-60.
        let x = [1.0f64, 1e-18, 1e-18, 1e-18, -1.0];
        let mut acc = Accumulator::default();
        x.iter().for_each(|v| acc.add(*v));
        assert!((acc.value() - 3e-18).abs() < 1e-30, "{}", acc.value());
        assert_eq!(x.iter().sum::<f64>(), 0.0);
    }

    #[test]
    fn sums_of_f32_are_those_of_the_stored_values() {
        // 0.1f32 is 0.100000001490116...; the reference sums that, not 0.1.
        let x = [0.1f32; 10];
        assert_eq!(sum(&x), 10.0 * 0.1f32 as f64);
    }

    #[test]
    fn integer_counts_and_scans_are_exact() {
        let x = [3i32, 7, 7, -1, 7, 0];
        assert_eq!(count_equal(&x, 7), 3);
        assert_eq!(count_equal(&x, 9), 0);
        let (scan, abs) = inclusive_scan(&x);
        assert_eq!(scan, vec![3.0, 10.0, 17.0, 16.0, 23.0, 23.0]);
        assert_eq!(abs, vec![3.0, 10.0, 17.0, 18.0, 25.0, 25.0]);
        // Large integer scans stay exact: 2^24 ones, past f32's exact range.
        let ones = vec![1u32; 1 << 24];
        assert_eq!(inclusive_scan(&ones).0[(1 << 24) - 1], (1u64 << 24) as f64);
    }

    #[test]
    fn the_scan_ends_at_the_sum_and_segments_add_up() {
        let x: Vec<f32> = common::measure::inputs::uniform(1000, -0.5, 1.5, 3);
        let (scan, _) = inclusive_scan(&x);
        assert!((scan[999] - sum(&x)).abs() < 1e-12);
        let (segments, abs) = segment_sums(&x, 100);
        assert_eq!(segments.len(), 10);
        assert!((segments.iter().sum::<f64>() - sum(&x)).abs() < 1e-12);
        assert!((abs.iter().sum::<f64>() - abs_sum(&x)).abs() < 1e-12);
        assert!((segments[3] - sum(&x[300..400])).abs() < 1e-15);
    }

    #[test]
    #[should_panic(expected = "not whole segments")]
    fn partial_segments_are_refused() {
        segment_sums(&[1.0f32; 10], 3);
    }

    #[test]
    fn gamma_is_about_depth_times_u() {
        assert_eq!(gamma(0), 0.0);
        assert!((gamma(28) / (28.0 * F32_UNIT_ROUNDOFF) - 1.0).abs() < 1e-5);
    }

    #[test]
    fn a_real_f32_tree_sum_is_within_its_bound() {
        // Pairwise f32 sum of 2^16 terms: depth 16.
        let x: Vec<f32> = common::measure::inputs::uniform(1 << 16, -0.5, 1.5, 9);
        fn pairwise(x: &[f32]) -> f32 {
            if x.len() == 1 {
                x[0]
            } else {
                let (a, b) = x.split_at(x.len() / 2);
                pairwise(a) + pairwise(b)
            }
        }
        let tol = covering_tolerance(&[sum(&x)], &[abs_sum(&x)], 16);
        let report = common::measure::check::compare(&[pairwise(&x)], &[sum(&x)], &[1], tol);
        assert!(report.passed(), "{report}");
        // A sequential f32 sum is depth n - 1: it needs the bound of its own order.
        let sequential: f32 = x.iter().sum();
        let tol = covering_tolerance(&[sum(&x)], &[abs_sum(&x)], (1 << 16) - 1);
        assert!(common::measure::check::compare(&[sequential], &[sum(&x)], &[1], tol).passed());
    }

    #[test]
    fn grids_and_exact_scans() {
        assert_eq!(grid_of(&[0.25f32, -1.5, 3.0]), Some(0.25));
        assert_eq!(grid_of(&[2i32, 4, -6]), Some(2.0));
        assert_eq!(grid_of(&[0.0f32; 3]), None);
        assert_eq!(grid_of(&[1.0f32 + f32::EPSILON]), Some(f32::EPSILON as f64));
        // Quarters whose prefixes stay small: every output exact.
        let x = [0.25f32, -0.5, 1.75, -2.0];
        let (prefix, abs) = inclusive_scan(&x);
        assert_eq!(exact_scan_len(&x, &prefix), 4);
        assert_eq!(scan_bounds(&abs, 4, |_| 64), vec![0.0; 4]);
        // Integers past 2^23 in the prefix: from there a partial sum may exceed 2^24.
        let big = [(1 << 22) as f32, (1 << 22) as f32, 1.0, 1.0];
        let (prefix, abs) = inclusive_scan(&big);
        assert_eq!(exact_scan_len(&big, &prefix), 2);
        let bounds = scan_bounds(&abs, 1, |_| 10);
        assert_eq!(bounds[0], 0.0);
        assert_eq!(bounds[3], gamma(10) * abs[3]);
        let tol = slack_tolerance(&prefix, &bounds);
        assert_eq!((tol.atol, tol.rtol), (0.0, 0.0));
        assert!(tol.max_rel_l2 > 0.0);
    }

    #[test]
    fn the_covering_tolerance_admits_every_bound_and_an_off_by_one_fails_integers() {
        let x: Vec<f32> = common::measure::inputs::uniform(5000, -0.5, 1.5, 4);
        let (scan, abs) = inclusive_scan(&x);
        let depth = 40;
        let tol = covering_tolerance(&scan, &abs, depth);
        for (r, a) in scan.iter().zip(&abs) {
            let bound = gamma(depth) * a;
            assert!(bound <= tol.atol + tol.rtol * r.abs() + 1e-18);
        }
        // For long prefixes of these inputs, sum |x| / |sum x| is about 1.25.
        assert!(tol.rtol < 1.5 * gamma(depth), "{tol:?}");
        // Integers: exact, and one element off fails.
        let ints = [1i32, 2, 3];
        let (iscan, _) = inclusive_scan(&ints);
        assert!(
            common::measure::check::compare(&[1i32, 3, 6], &iscan, &[3], Tolerance::EXACT).passed()
        );
        assert!(
            !common::measure::check::compare(&[1i32, 3, 5], &iscan, &[3], Tolerance::EXACT)
                .passed()
        );
    }
}
