//! How a forward's outputs are checked: O's tolerance from the storage type's rounding and
//! each element's own allowance from its terms' magnitudes, L's tolerance, and the f64
//! reference at the checked rows ([`ExpectedO`]).

use common::dtype::Dtype;
use common::element::Element;
use common::measure::check::{self, CheckReport, Tolerance};
use common::reference::attention::{self as reference, AttentionShape, QueryRow};

/// The unit roundoff of a storage type: 2^-8 for bf16, 2^-11 for f16 (2^-24 for f32).
fn unit_roundoff(dtype: Dtype) -> f64 {
    match dtype {
        Dtype::Bf16 => 2f64.powi(-8),
        Dtype::F16 => 2f64.powi(-11),
        _ => 2f64.powi(-24),
    }
}

/// What the f32 parts of a kernel add, relative to the magnitudes: scores summed over the
/// head dim in f32, f32 (or `ex2.approx`) exponentials, the online softmax's rescaling, and
/// the f32 sums of `P V` over the keys. Each is a relative error of a few 2^-24 per term
/// times a count that grows (at random) with d or the keys; 2^-12 leaves room for that up to
/// millions of keys, and is still 16 times below bf16's unit roundoff. The largest head dim,
/// 256 (`fa_hopper`), moves each P by at most scale x 256 x 2^-24 x sum |q k|, about 2^-12
/// with the tests' inputs (sum |q k| ~ 256, scale 1/16) if every rounding went the same
/// way, about 2^-16 at random: inside that allowance.
const O_F32_PARTS: f64 = 1.0 / 4096.0;

/// The per-element tolerance of O, the part that scales with the output itself: `2 u |O|`,
/// `u` the storage type's unit roundoff, for O's own rounding when it is stored and for a
/// row sum taken over the unrounded P while `P V` used the rounded one; and an absolute
/// floor of 1e-5 for the f32 sums. The relative L2 error may be at most `2 u` (random
/// rounding of this kind gives about `0.6 u`). [`o_slack`] adds each element's own share.
pub fn o_tolerance(dtype: Dtype) -> Tolerance {
    let u = unit_roundoff(dtype);
    Tolerance::new(1e-5, 2.0 * u).with_max_rel_l2(2.0 * u)
}

/// Each element's own allowance on top of [`o_tolerance`], from `m = sum_j P_ij |V_jc|` (the
/// reference with `Terms::Absolute`): a kernel that rounds P to 16 bits before `P V`
/// (`fa2_mma`, `fa_hopper`) errs by up to `u m` on that element however much the values
/// cancel, and the f32 parts add [`O_F32_PARTS`] `m`. Dropping a key of weight `w` moves an
/// element by about `w |V_jc - O_ic|`: a wrong mask or a lost tile shows, where a tolerance of
/// 1.6e-2 + 3e-2 |O| (70 times the measured error) let the last 64 keys of a row go.
pub fn o_slack(dtype: Dtype, magnitudes: &[f64]) -> Vec<f64> {
    let per_unit = unit_roundoff(dtype) + O_F32_PARTS;
    magnitudes.iter().map(|m| per_unit * m).collect()
}

/// L is computed from f32 scores of the stored inputs (exact products, f32 sums over d) and
/// f32 exponentials; no 16-bit rounding enters it.
pub const L_TOLERANCE: Tolerance = Tolerance::new(2e-4, 2e-5);

/// The reference at some query rows (every row: [`AttentionShape::all_query_rows`]), computed
/// in blocks on every host core ([`reference::attention_rows_with_magnitudes`]): O and L, and
/// each O element's magnitude for [`o_slack`].
pub struct ExpectedO {
    pub o: Vec<f64>,
    pub lse: Vec<f64>,
    pub magnitudes: Vec<f64>,
}

impl ExpectedO {
    pub fn at_rows<T: Element>(
        q: &[T],
        k: &[T],
        v: &[T],
        shape: &AttentionShape,
        rows: &[QueryRow],
    ) -> Self {
        let (out, magnitudes) =
            reference::attention_rows_with_magnitudes(q, k, v, shape, shape.default_scale(), rows);
        Self {
            o: out.o,
            lse: out.lse,
            magnitudes,
        }
    }

    /// Checks O, a whole `[total_q, heads, head_dim]` output, at the flat indices `at` of
    /// the reference's values (None: the reference has every element, in order).
    pub fn check_o<T: Element>(
        &self,
        got: &[T],
        at: Option<&[usize]>,
        shape: &[usize],
    ) -> CheckReport {
        let slack = o_slack(T::DTYPE, &self.magnitudes);
        check::compare_at_with_slack(got, at, &self.o, &slack, shape, o_tolerance(T::DTYPE))
    }

    /// Checks L, a whole `[total_q, heads]` output, likewise.
    pub fn check_lse(&self, got: &[f32], at: Option<&[usize]>, shape: &[usize]) -> CheckReport {
        check::compare_at_with_slack(got, at, &self.lse, &[], shape, L_TOLERANCE)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `fa2_mma` and `fa_hopper` do to one row, in f32 on the CPU: scores of the stored
    /// inputs, P = exp(s - max) rounded to `T` before `P V`, the row sum over the unrounded
    /// (or, `rounded_sum`, the rounded) P, and O rounded to `T` when stored.
    fn emulate_16_bit_kernel<T: Element>(
        q: &[T],
        k: &[T],
        v: &[T],
        shape: &AttentionShape,
        rounded_sum: bool,
    ) -> Vec<T> {
        let (d, kv) = (shape.head_dim, shape.kv_heads);
        let lk = shape.seqlens_k[0];
        let scale = shape.default_scale() as f32;
        let mut o = Vec::with_capacity(q.len());
        for row in shape.all_query_rows() {
            let q_row = &q[(row.token * shape.heads + row.head) * d..][..d];
            let at = |j: usize| (j * kv + row.head / shape.group()) * d;
            let s: Vec<f32> = (0..lk)
                .map(|j| {
                    let k_row = &k[at(j)..][..d];
                    let dot: f32 = q_row
                        .iter()
                        .zip(k_row)
                        .map(|(a, b)| a.to_f64() as f32 * b.to_f64() as f32)
                        .sum();
                    dot * scale
                })
                .collect();
            let max = s.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let p: Vec<f32> = s.iter().map(|x| (x - max).exp()).collect();
            let p16: Vec<f32> = p
                .iter()
                .map(|&x| T::from_f64(x as f64).to_f64() as f32)
                .collect();
            let sum: f32 = if rounded_sum { &p16 } else { &p }.iter().sum();
            for c in 0..d {
                let acc: f32 = (0..lk).map(|j| p16[j] * v[at(j) + c].to_f64() as f32).sum();
                o.push(T::from_f64((acc / sum) as f64));
            }
        }
        o
    }

    /// The O check on the CPU, where a wrong answer can be made on purpose: a row that lost
    /// its last 64 of 4096 keys (a dropped key tile, renormalized) fails it, while the
    /// reference rounded to the storage type and a CPU emulation of the 16-bit kernels'
    /// rounding pass.
    fn the_o_check_tells_a_lost_key_tile_from_rounding<T: Element>(seed: u64, d: usize) {
        use common::measure::inputs;
        const KEYS: usize = 4096;
        let shape = AttentionShape::uniform(1, 16, KEYS, 2, 1, d, false);
        let d = shape.head_dim;
        let (q_len, k_len) = (shape.total_q() * shape.heads * d, shape.total_k() * d);
        let q: Vec<T> = inputs::uniform(q_len, -2.0, 2.0, seed);
        let k: Vec<T> = inputs::uniform(k_len, -2.0, 2.0, seed + 1);
        let v: Vec<T> = inputs::uniform(k_len, -1.0, 1.0, seed + 2);
        let expected = ExpectedO::at_rows(&q, &k, &v, &shape, &shape.all_query_rows());
        let o_shape = [shape.total_q(), shape.heads, d];
        let what = T::NAME;

        let stored: Vec<T> = expected.o.iter().map(|&x| T::from_f64(x)).collect();
        let report = expected.check_o(&stored, None, &o_shape);
        assert!(report.passed(), "{what}: the rounded reference: {report}");
        for rounded_sum in [false, true] {
            let emulated = emulate_16_bit_kernel(&q, &k, &v, &shape, rounded_sum);
            let report = expected.check_o(&emulated, None, &o_shape);
            assert!(report.passed(), "{what}: the emulated kernel: {report}");
        }

        // Row (token 11, head 1) without its last 64 keys, every other row right.
        let short = AttentionShape::uniform(1, 16, KEYS - 64, 2, 1, d, false);
        let row = [QueryRow { token: 11, head: 1 }];
        let cut = (KEYS - 64) * d;
        let lost = reference::attention_rows(
            &q,
            &k[..cut],
            &v[..cut],
            &short,
            shape.default_scale(),
            &row,
        );
        let mut wrong = stored.clone();
        let at = (11 * shape.heads + 1) * d;
        for (slot, &x) in wrong[at..at + d].iter_mut().zip(&lost.o) {
            *slot = T::from_f64(x);
        }
        let report = expected.check_o(&wrong, None, &o_shape);
        assert!(
            !report.passed(),
            "{what}: a row lost 64 keys and passed: {report}"
        );
        assert!(
            report.first.iter().all(|m| m.index[..2] == [11, 1]),
            "{what}: only the short row fails: {report}"
        );
        if T::DTYPE == Dtype::Bf16 && d == 64 {
            // The per-element bound this replaced let every element of it through (only the
            // L2 bound of so small a problem noticed; among thousands of rows it would not).
            let old = Tolerance::new(1.6e-2, 3e-2).with_max_rel_l2(1e-2);
            let report = check::compare(&wrong, &expected.o, &o_shape, old);
            assert_eq!(report.mismatches, 0, "{report}");
        }
    }

    #[test]
    fn the_o_check_fails_a_lost_key_tile_and_passes_rounding() {
        the_o_check_tells_a_lost_key_tile_from_rounding::<half::bf16>(10, 64);
        the_o_check_tells_a_lost_key_tile_from_rounding::<half::f16>(20, 64);
        // Head dim 256 (fa_hopper's widest): scores summed over 256 products in f32 still
        // sit well inside the f32 parts' 2^-12, and a lost tile still shows (bf16 only: the
        // f16 case costs as much again and tests nothing the one at 64 does not).
        the_o_check_tells_a_lost_key_tile_from_rounding::<half::bf16>(30, 256);
    }

    #[test]
    fn the_o_allowance_follows_the_terms_not_a_fixed_floor() {
        // An output near 0 whose terms are large gets their allowance; one with small terms
        // gets little. 2^-8 + 2^-12 per unit of magnitude in bf16, 2^-11 + 2^-12 in f16.
        let slack = o_slack(Dtype::Bf16, &[0.5, 1e-3]);
        assert!((slack[0] - 0.5 * (2f64.powi(-8) + 2f64.powi(-12))).abs() < 1e-15);
        assert!(slack[1] < 5e-6);
        assert!(o_slack(Dtype::F16, &[0.5])[0] < slack[0] / 4.0);
        let t = o_tolerance(Dtype::Bf16);
        assert!(t.atol <= 1e-5 && t.rtol < 1e-2 && t.max_rel_l2 < 1e-2);
    }
}
