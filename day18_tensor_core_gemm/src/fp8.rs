//! FP8 (e4m3) problems: the inputs, their f64 reference and the tolerance the FP8 versions
//! and cuBLASLt's FP8 GEMM are checked with. The operands live on the device as their bytes
//! (the kernels and cuBLASLt decode them); the host encodes and decodes with `float8`.
//!
//! E4M3: 1 sign, 4 exponent and 3 mantissa bits, bias 7, no infinities (0x7F and 0xFF are
//! NaN), largest finite value 448, smallest normal 2^-6, subnormals down to 2^-9.

use common::measure::check::Tolerance;
use float8::F8E4M3;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// `n` values uniform in [-1, 1), each rounded to the nearest e4m3 value, as bytes. Every
/// value is exact in e4m3, so the reference multiplies exactly what the GPU multiplies.
pub fn uniform_e4m3(n: usize, seed: u64) -> Vec<u8> {
    let mut rng = StdRng::seed_from_u64(seed);
    (0..n)
        .map(|_| F8E4M3::from_f32(rng.random_range(-1.0f32..1.0)).to_bits())
        .collect()
}

/// The value of each byte, as e4m3.
pub fn decode(bytes: &[u8]) -> Vec<f64> {
    bytes
        .iter()
        .map(|&b| F8E4M3::from_bits(b).to_f64())
        .collect()
}

/// Every output of `alpha A B^T` in f64, row-major; A `[m, k]` and B `[n, k]` decoded
/// (a blocked product on every core, for checks of whole outputs).
pub fn reference(a: &[f64], b: &[f64], (m, n, k): (usize, usize, usize), alpha: f32) -> Vec<f64> {
    use common::reference::dense::{self, MatRef};
    dense::product(
        f64::from(alpha),
        MatRef::row_major(a, m, k),
        MatRef::row_major(b, n, k).t(),
    )
}

/// `alpha (A B^T)[i][j]` in f64 at the flat outputs `at` (`i * n + j`); A `[m, k]` and B
/// `[n, k]` decoded.
pub fn reference_at(
    a: &[f64],
    b: &[f64],
    n: usize,
    k: usize,
    alpha: f32,
    at: &[usize],
) -> Vec<f64> {
    at.iter()
        .map(|&flat| {
            let (i, j) = (flat / n, flat % n);
            let row = &a[i * k..(i + 1) * k];
            let col = &b[j * k..(j + 1) * k];
            f64::from(alpha) * row.iter().zip(col).map(|(x, y)| x * y).sum::<f64>()
        })
        .collect()
}

/// The accumulator's rounding per k32 step. Hopper's FP8 wgmma adds each step's 32 products
/// into the f32 accumulator with fewer bits than f32 keeps (DeepSeek-V3's report measured
/// about 14 on the H800). We first allowed 13 (2^-13); the GPU test then found one output in
/// 10^6 (k = 1008, value -2.79, error 0.043) at 1.05 times that bound, so the model allows 12.
pub const ACCUMULATION_ROUNDOFF: f64 = 1.0 / 4096.0;

/// The check of `C = alpha A B^T` stored in bf16, inputs e4m3 in [-1, 1].
///
/// The products are exact (two 4-bit significands make at most 8 bits), so the error is the
/// accumulation's and the final rounding's. The accumulator takes one rounding per k32 step,
/// at most [`ACCUMULATION_ROUNDOFF`] of the partial sum, which wanders like a random walk to
/// about `sqrt(32 s / 9)` after `s` steps (uniform inputs: E[(ab)^2] = 1/9). Added up over
/// `S = k / 32` steps: `u sqrt(32 / 9) (2 / 3) S^1.5`, plus 4 u for the last steps. The output
/// is rounded once to bf16 (relative 2^-8 allowed, bf16's unit roundoff is 2^-9). At k = 8192
/// the element bound is 1.26 against outputs of about 30: a wrong k step (about 1.9) or tile
/// is outside it; a single lost product (about 0.25) may not be. The relative L2 bound is
/// the random walk's typical error, `4 u sqrt(S)`, plus the bf16 rounding.
pub fn tolerance(k: usize) -> Tolerance {
    let u = ACCUMULATION_ROUNDOFF;
    let steps = k.div_ceil(32) as f64;
    let walk = (32.0f64 / 9.0).sqrt() * 2.0 / 3.0 * steps.powf(1.5);
    let bf16_rounding = 2f64.powi(-8);
    Tolerance::new(u * (walk + 4.0), bf16_rounding)
        .with_max_rel_l2(4.0 * u * steps.sqrt() + bf16_rounding)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inputs_are_exact_e4m3_values_in_range() {
        let bytes = uniform_e4m3(10_000, 3);
        let values = decode(&bytes);
        assert!(values.iter().all(|v| (-1.0..=1.0).contains(v)));
        // Round trip: each value is representable, so encoding it again gives the same byte.
        for (&b, &v) in bytes.iter().zip(&values) {
            assert_eq!(F8E4M3::from_f64(v).to_bits(), b);
        }
        // Spread over many codes, not a handful.
        let mut codes = bytes.clone();
        codes.sort_unstable();
        codes.dedup();
        assert!(codes.len() > 100, "{} codes", codes.len());
    }

    #[test]
    fn known_codes_decode() {
        assert_eq!(F8E4M3::from_bits(0x38).to_f64(), 1.0); // exponent 7 = bias
        assert_eq!(F8E4M3::from_bits(0x7E).to_f64(), 448.0); // largest finite
        assert_eq!(F8E4M3::from_bits(0x01).to_f64(), 2f64.powi(-9)); // smallest subnormal
        assert!(F8E4M3::from_bits(0x7F).to_f64().is_nan());
    }

    #[test]
    fn the_reference_is_alpha_a_b_transposed() {
        // A = [1 2; 3 4], B = [5 6; 7 8] (rows of B are columns of B^T).
        let a = [1.0, 2.0, 3.0, 4.0];
        let b = [5.0, 6.0, 7.0, 8.0];
        let got = reference_at(&a, &b, 2, 2, 0.5, &[0, 1, 2, 3]);
        assert_eq!(reference(&a, &b, (2, 2, 2), 0.5), got);
        assert_eq!(got, vec![8.5, 11.5, 19.5, 26.5]);
    }

    #[test]
    fn the_tolerance_grows_with_k_and_stays_below_a_k_step() {
        let small = tolerance(64);
        let large = tolerance(8192);
        assert!(small.atol < large.atol);
        // A k32 step of products (about sqrt(32) / 3 = 1.9) is still outside it at 8192.
        assert!(large.atol < 1.5, "{}", large.atol);
    }
}
