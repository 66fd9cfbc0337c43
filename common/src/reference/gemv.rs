//! Matrix-vector product `y = A x`, A row-major `m x n`.
//!
//! Tolerance: an f32 dot product whose longest chain of dependent roundings (sequential FMAs
//! in one thread, then the levels of the reduction tree, then the second pass of a split row)
//! has `k` steps is within `gamma_k * sum_i |a_i x_i|` of the exact value, `gamma_k = k u /
//! (1 - k u)`, `u = 2^-24` (Higham, "Accuracy and Stability of Numerical Algorithms", 3.1).
//! The bound is relative to the sum of magnitudes, not to `|y|`: with random signs `|y|` is
//! about `sqrt(n)` times smaller than that sum, so the per-element check is absolute, with
//! the largest row's sum of magnitudes. Rounding errors of random sign grow like `sqrt(k)`,
//! not `k`, so on average the error is far below the bound; the relative L2 error must stay
//! under 1e-5.

use crate::element::Element;
use crate::measure::check::Tolerance;

/// `y = A x` in f64, and for each row `sum_j |a_ij x_j|` (what the error bound scales with).
pub fn gemv<T: Element>(a: &[T], x: &[T], m: usize, n: usize) -> (Vec<f64>, Vec<f64>) {
    assert_eq!(a.len(), m * n, "gemv: A is not m x n");
    assert_eq!(x.len(), n, "gemv: x does not have n elements");
    let x: Vec<f64> = x.iter().map(|v| v.to_f64()).collect();
    let mut y = Vec::with_capacity(m);
    let mut magnitudes = Vec::with_capacity(m);
    for row in a.chunks_exact(n.max(1)).take(m) {
        let (mut dot, mut mag) = (0.0f64, 0.0f64);
        for (a, x) in row.iter().zip(&x) {
            let p = a.to_f64() * x;
            dot += p;
            mag += p.abs();
        }
        y.push(dot);
        magnitudes.push(mag);
    }
    (y, magnitudes)
}

/// The per-element bound `gamma_k * max_row sum |a x|` (see the module docs) for a kernel
/// whose longest chain of roundings has `chain` steps.
pub fn tolerance_f32(chain: usize, max_row_magnitude: f64) -> Tolerance {
    let k = chain as f64 * 2f64.powi(-24);
    let atol = k / (1.0 - k) * max_row_magnitude;
    // Plus a floor for an all-zero product; nothing else is relative to |y|.
    Tolerance::new(atol.max(1e-30), 0.0).with_max_rel_l2(1e-5)
}

#[cfg(test)]
mod tests {
    use super::*;
    use approx::assert_relative_eq;

    #[test]
    fn known_values() {
        let a = [1.0f32, 2.0, 3.0, -4.0, 5.0, -6.0];
        let (y, mag) = gemv(&a, &[1.0f32, 0.5, -1.0], 2, 3);
        assert_eq!(y, vec![-1.0, 4.5]);
        assert_eq!(mag, vec![5.0, 12.5]);
    }

    #[test]
    fn identity_returns_x_and_one_by_one_is_a_product() {
        let n = 5;
        let eye: Vec<f32> = (0..n * n)
            .map(|i| if i / n == i % n { 1.0 } else { 0.0 })
            .collect();
        let x = [0.5f32, -1.5, 2.0, 3.25, -7.0];
        assert_eq!(gemv(&eye, &x, n, n).0, x.map(f64::from).to_vec());
        assert_eq!(gemv(&[3.0f32], &[-2.0f32], 1, 1).0, vec![-6.0]);
    }

    #[test]
    fn linear_in_x() {
        let a: Vec<f32> = (0..12).map(|i| (i as f32 * 0.37).sin()).collect();
        let x: Vec<f32> = (0..4).map(|i| i as f32 - 1.5).collect();
        let x2: Vec<f32> = x.iter().map(|v| 2.0 * v).collect();
        let (y, _) = gemv(&a, &x, 3, 4);
        let (y2, _) = gemv(&a, &x2, 3, 4);
        for (p, q) in y.iter().zip(&y2) {
            assert_relative_eq!(2.0 * p, *q, max_relative = 1e-15);
        }
    }

    #[test]
    fn tolerance_scales_with_the_chain_and_the_magnitudes() {
        let t = tolerance_f32(256, 2048.0);
        assert_relative_eq!(t.atol, 256.0 * 2048.0 / 16_777_216.0, max_relative = 1e-4);
        assert_eq!(t.rtol, 0.0);
        assert_eq!(t.max_rel_l2, 1e-5);
    }
}
