//! Per-row top-k: the `k` largest values of each row of a `rows x width` matrix, in descending
//! order, with their column indices. Top-k is exact (it only compares and copies), so a
//! kernel's output is checked bit for bit against this reference, with no tolerance.
//!
//! # The defined order
//!
//! Floats are ranked by an order-preserving unsigned key of their stored bits: for a positive
//! float set the sign bit, for a negative one flip every bit. Then unsigned comparison of keys
//! is numeric comparison of the floats, with two choices made explicit:
//!
//! - `-0.0` ranks below `+0.0` (their keys differ by one), and subnormals rank by value: the
//!   key is computed from the bits, so nothing is flushed to zero, on the CPU or on the GPU;
//! - every NaN (either sign, any payload) gets the largest key, above `+inf`, as `torch.topk`
//!   treats NaN as the largest value; the NaN is returned with its own bits.
//!
//! Equal keys (ties, and NaNs among themselves) go to the lower column index first. The
//! values returned are the stored elements at the returned indices, unchanged.

use common::element::Element;
use common::measure::check::{self, CheckReport, Tolerance};
use half::bf16;

/// A storage type top-k ranks: its order-preserving key and its raw bits.
pub trait TopkValue: Element {
    /// Bits in the key (32 for f32, 16 for bf16).
    const KEY_BITS: u32;
    /// The order-preserving key; every NaN gets the largest key of the type.
    fn key(self) -> u32;
    /// The stored bits, for bit-for-bit comparison.
    fn bits(self) -> u32;
}

/// The order-preserving key of `bits`, an IEEE float of `width` (32 or 16) bits whose exponent
/// field starts at bit `width - 9` (f32 and bf16 both have 8 exponent bits): NaN canonicalized
/// to the top, negatives flipped, positives above them.
fn order_key(bits: u32, width: u32) -> u32 {
    let all = if width == 32 {
        u32::MAX
    } else {
        (1 << width) - 1
    };
    let sign = 1 << (width - 1);
    let magnitude = bits & (sign - 1);
    // The exponent field is all ones and the sign excluded: the positive infinity's bits.
    let infinity = if width == 32 { 0x7f80_0000 } else { 0x7f80 };
    if magnitude > infinity {
        all
    } else if bits & sign != 0 {
        !bits & all
    } else {
        bits | sign
    }
}

impl TopkValue for f32 {
    const KEY_BITS: u32 = 32;
    fn key(self) -> u32 {
        order_key(self.to_bits(), 32)
    }
    fn bits(self) -> u32 {
        self.to_bits()
    }
}

impl TopkValue for bf16 {
    const KEY_BITS: u32 = 16;
    fn key(self) -> u32 {
        order_key(u32::from(self.to_bits()), 16)
    }
    fn bits(self) -> u32 {
        u32::from(self.to_bits())
    }
}

/// The column indices of each row's top `k`, row after row (`rows * k` of them), in the defined
/// order: key descending, then index ascending. `x` is row-major with rows of `width`.
pub fn top_k_indices<T: TopkValue>(x: &[T], width: usize, k: usize) -> Vec<u32> {
    assert!(
        width > 0 && x.len().is_multiple_of(width),
        "x is not whole rows"
    );
    assert!((1..=width).contains(&k), "k must be in 1..=width");
    assert!(u32::try_from(width).is_ok(), "column indices are u32");
    let mut out = Vec::with_capacity(x.len() / width * k);
    let mut ranked: Vec<(u32, u32)> = Vec::with_capacity(width);
    for row in x.chunks_exact(width) {
        ranked.clear();
        ranked.extend(row.iter().enumerate().map(|(i, v)| (v.key(), i as u32)));
        // The same order as a full sort (key desc, index asc), without sorting the whole row:
        // partition around the k-th, then sort the k in front.
        let order = |a: &(u32, u32), b: &(u32, u32)| b.0.cmp(&a.0).then(a.1.cmp(&b.1));
        if k < width {
            ranked.select_nth_unstable_by(k - 1, order);
        }
        ranked[..k].sort_unstable_by(order);
        out.extend(ranked[..k].iter().map(|&(_, i)| i));
    }
    out
}

/// The values at `indices` (`k` per row of `x`): the top-k values, stored bits unchanged.
pub fn gather<T: Copy>(x: &[T], width: usize, k: usize, indices: &[u32]) -> Vec<T> {
    indices
        .iter()
        .enumerate()
        .map(|(n, &i)| x[n / k * width + i as usize])
        .collect()
}

/// Compares values bit for bit: `-0.0` is not `+0.0`, and a NaN must carry the input's bits.
/// Unwritten (poisoned) elements are counted as such. The report shows values as numbers,
/// or, where they pass as numbers (zeros of either sign, any two NaNs) but not as bits, the
/// bits as integers.
pub fn compare_values<T: TopkValue>(got: &[T], expected: &[T], shape: &[usize]) -> CheckReport {
    let as_f64: Vec<f64> = expected.iter().map(|v| v.to_f64()).collect();
    let numbers = check::compare(got, &as_f64, shape, Tolerance::EXACT);
    if !numbers.passed() {
        return numbers;
    }
    let got_bits: Vec<u32> = got.iter().map(|v| v.bits()).collect();
    let expected_bits: Vec<f64> = expected.iter().map(|v| f64::from(v.bits())).collect();
    check::compare(&got_bits, &expected_bits, shape, Tolerance::EXACT)
}

/// Compares column indices exactly; unwritten (poisoned) ones are counted as such.
pub fn compare_indices(got: &[u32], expected: &[u32], shape: &[usize]) -> CheckReport {
    let as_f64: Vec<f64> = expected.iter().map(|&i| f64::from(i)).collect();
    check::compare(got, &as_f64, shape, Tolerance::EXACT)
}

/// Values that exercise the defined order, for tests: NaNs of both signs and two payloads,
/// infinities, both zeros, the smallest and largest subnormals of both signs, and the largest
/// finite values. None is an `Element::POISON`.
pub fn special_f32() -> Vec<f32> {
    [
        0x7fc0_0000,      // NaN
        0xffc0_0000,      // -NaN
        0x7f80_0001,      // a NaN with another payload
        0x7f80_0000,      // +inf
        0xff80_0000,      // -inf
        0x0000_0000,      // +0
        0x8000_0000,      // -0
        0x0000_0001,      // smallest subnormal
        0x8000_0001,      // its negative
        0x007f_ffff,      // largest subnormal
        0x807f_ffff,      // its negative
        0x0080_0000,      // smallest normal
        0x7f7f_ffff,      // largest finite
        0xff7f_ffff,      // most negative finite
        1.0f32.to_bits(), // an ordinary value, and its copy below (a tie)
        1.0f32.to_bits(),
    ]
    .map(f32::from_bits)
    .into()
}

/// [`special_f32`] for bf16.
pub fn special_bf16() -> Vec<bf16> {
    [
        0x7fc0, 0xffc0, 0x7f81, 0x7f80, 0xff80, 0x0000, 0x8000, 0x0001, 0x8001, 0x007f, 0x807f,
        0x0080, 0x7f7f, 0xff7f, 0x3f80, 0x3f80,
    ]
    .map(bf16::from_bits)
    .into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use common::measure::inputs;

    #[test]
    fn keys_order_floats_numerically_with_nan_on_top() {
        let ascending = [
            f32::NEG_INFINITY,
            -f32::MAX,
            -1.0,
            -f32::from_bits(1),
            -0.0,
            0.0,
            f32::from_bits(1),
            f32::from_bits(0x007f_ffff),
            f32::MIN_POSITIVE,
            1.0,
            f32::MAX,
            f32::INFINITY,
        ];
        for pair in ascending.windows(2) {
            assert!(pair[0].key() < pair[1].key(), "{pair:?}");
            let (a, b) = (bf16::from_f32(pair[0]), bf16::from_f32(pair[1]));
            // bf16 rounds some neighbours together (MAX becomes inf): never out of order.
            assert!(a.key() <= b.key(), "{pair:?}");
        }
        for nan in [0x7fc0_0000u32, 0xffc0_0000, 0x7f80_0001, 0xffff_ffff] {
            assert_eq!(f32::from_bits(nan).key(), u32::MAX);
        }
        assert_eq!(bf16::from_bits(0xffc0).key(), 0xffff);
        assert_eq!(bf16::from_bits(0x7f81).key(), 0xffff);
        assert!(bf16::INFINITY.key() < 0xffff);
        // The smallest key is -inf's, never 0: a kernel may use 0 as "no element".
        assert_eq!(f32::NEG_INFINITY.key(), 0x007f_ffff);
        assert_eq!(bf16::NEG_INFINITY.key(), 0x007f);
    }

    /// The full sort, spelled out: the definition `top_k_indices` must match.
    fn by_full_sort<T: TopkValue>(row: &[T], k: usize) -> Vec<u32> {
        let mut all: Vec<(u32, u32)> = row
            .iter()
            .enumerate()
            .map(|(i, v)| (v.key(), i as u32))
            .collect();
        all.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        all[..k].iter().map(|&(_, i)| i).collect()
    }

    #[test]
    fn selection_matches_a_full_sort_with_ties_and_specials() {
        let width = 301;
        let mut x: Vec<f32> = inputs::uniform(3 * width, -4.0, 4.0, 9);
        // Row 1: many ties (values rounded to a few levels) and the special values.
        for (i, v) in x[width..2 * width].iter_mut().enumerate() {
            *v = (*v).round();
            if i % 37 == 0 {
                *v = special_f32()[i / 37 % 16];
            }
        }
        // Row 2: every element equal.
        x[2 * width..].fill(0.5);
        for k in [1, 2, 7, 64, 300, 301] {
            let got = top_k_indices(&x, width, k);
            for (r, row) in x.chunks_exact(width).enumerate() {
                assert_eq!(&got[r * k..(r + 1) * k], &by_full_sort(row, k)[..], "k {k}");
            }
        }
        let all_equal = top_k_indices(&x[2 * width..], width, 5);
        assert_eq!(all_equal, [0, 1, 2, 3, 4]);
    }

    /// The whole of `x` (one row) in top-k order: the indices, and the values as `bits` gives
    /// their bits.
    fn full_order<T: TopkValue>(x: &[T], bits: impl Fn(&T) -> u32) -> (Vec<u32>, Vec<u32>) {
        let idx = top_k_indices(x, x.len(), x.len());
        let order = gather(x, x.len(), x.len(), &idx).iter().map(bits).collect();
        (idx, order)
    }

    #[test]
    fn specials_come_out_in_the_defined_order() {
        let x = special_f32();
        let (idx, bits) = full_order(&x, |v| v.to_bits());
        assert_eq!(
            bits,
            [
                0x7fc0_0000,
                0xffc0_0000,
                0x7f80_0001,
                0x7f80_0000,
                0x7f7f_ffff,
                0x3f80_0000,
                0x3f80_0000,
                0x0080_0000,
                0x007f_ffff,
                0x0000_0001,
                0x0000_0000,
                0x8000_0000,
                0x8000_0001,
                0x807f_ffff,
                0xff7f_ffff,
                0xff80_0000,
            ]
        );
        // The tie of the two 1.0s: lower index first.
        assert_eq!(&idx[5..7], &[14, 15]);
        let b = special_bf16();
        let (_, order) = full_order(&b, |v| v.bits());
        assert_eq!(&order[..4], &[0x7fc0, 0xffc0, 0x7f81, 0x7f80]);
        assert_eq!(&order[10..12], &[0x0000, 0x8000]);
        assert!(x.iter().all(|v| !v.is_poison()) && b.iter().all(|v| !v.is_poison()));
    }

    #[test]
    fn value_checks_see_signed_zeros_nan_payloads_and_unwritten_outputs() {
        let expected = [0.0f32, f32::from_bits(0x7fc0_0000), 1.0];
        assert!(compare_values(&expected, &expected, &[3]).passed());
        let wrong_zero = [-0.0f32, f32::from_bits(0x7fc0_0000), 1.0];
        assert!(!compare_values(&wrong_zero, &expected, &[3]).passed());
        let other_nan = [0.0f32, f32::from_bits(0xffc0_0000), 1.0];
        assert!(!compare_values(&other_nan, &expected, &[3]).passed());
        let unwritten = [0.0f32, f32::POISON, 1.0];
        let report = compare_values(&unwritten, &expected, &[3]);
        assert!(!report.passed() && report.unwritten == 1, "{report}");
        assert!(compare_indices(&[3, 1], &[3, 1], &[1, 2]).passed());
        assert!(!compare_indices(&[3, 2], &[3, 1], &[1, 2]).passed());
        assert!(!compare_indices(&[3, u32::POISON], &[3, 1], &[1, 2]).passed());
    }
}
