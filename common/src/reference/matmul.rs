//! `C = A B` for row-major `A` (m x k) and `B` (k x n), in f64: in full for small problems,
//! at sampled outputs for large ones (a full f64 reference of 4096^3 is minutes of CPU).

use super::dense::{self, MatRef};
use crate::element::Element;
use crate::gpu::cublas::{GemmEx, Stored};
use crate::measure::check::Tolerance;
/// The sampled checks' outputs live with the checks; kept here too, where the references that
/// take them are.
pub use crate::measure::sampled::{
    CHECK_TILE, RANDOM_SAMPLES, sample_outputs, sample_outputs_every_tile, tile_outputs,
};

/// Problems up to this many multiply-adds get a full reference (about a second of CPU in a
/// release build); larger ones a sampled one.
pub const FULL_REFERENCE_MAX_MACS: usize = 1 << 30;

/// Every element of `C`, row-major (a blocked f64 product on every core: [`dense::gemm`]).
pub fn matmul<T: Element>(a: &[T], b: &[T], m: usize, n: usize, k: usize) -> Vec<f64> {
    check_lengths(a, b, m, n, k);
    let (a, b) = (dense::widen(a), dense::widen(b));
    dense::product(
        1.0,
        MatRef::row_major(&a, m, k),
        MatRef::row_major(&b, k, n),
    )
}

/// The elements of `C` at the flat (row-major) indices `at`.
pub fn matmul_at<T: Element>(
    a: &[T],
    b: &[T],
    m: usize,
    n: usize,
    k: usize,
    at: &[usize],
) -> Vec<f64> {
    check_lengths(a, b, m, n, k);
    at.iter()
        .map(|&flat| {
            let (i, j) = (flat / n, flat % n);
            assert!(i < m, "index {flat} is outside a {m} x {n} output");
            (0..k)
                .map(|l| a[i * k + l].to_f64() * b[l * n + j].to_f64())
                .sum()
        })
        .collect()
}

/// The tensor-core layout, `C = A B^T` with `B` stored `[n, k]` (a linear layer's weight), for
/// `batch` products stored back to back: the elements of the `[batch, m, n]` output at the flat
/// indices `at`. Each output is the dot product of two contiguous rows.
pub fn matmul_bt_at<T: Element>(
    a: &[T],
    b: &[T],
    (batch, m, n, k): (usize, usize, usize, usize),
    at: &[usize],
) -> Vec<f64> {
    assert_eq!(a.len(), batch * m * k, "A is not {batch} x {m} x {k}");
    assert_eq!(b.len(), batch * n * k, "B is not {batch} x {n} x {k}");
    at.iter()
        .map(|&flat| {
            let (z, i, j) = output_index(flat, (batch, m, n));
            let a_row = &a[(z * m + i) * k..][..k];
            let b_row = &b[(z * n + j) * k..][..k];
            a_row
                .iter()
                .zip(b_row)
                .map(|(x, y)| x.to_f64() * y.to_f64())
                .sum()
        })
        .collect()
}

/// The general row-major product of [`GemmEx`]: `C = alpha op(A) op(B) + beta C`, each operand
/// stored as is or transposed (A as `[m, k]` or `[k, m]`, B as `[k, n]` or `[n, k]`), `batch`
/// products whose matrices are `stride_*` elements apart. Returns the elements at the flat
/// indices `at` of the logical `[batch, m, n]` output (`z m n + i n + j`, whatever
/// `stride_c`). `c` is C before the product, read only where `beta != 0` (as the kernels do:
/// with beta = 0 whatever C held, NaN included, does not matter); `None` reads as zeros.
pub fn gemm_ex_at<T: Element>(
    a: &[T],
    b: &[T],
    c: Option<&[T]>,
    g: &GemmEx,
    at: &[usize],
) -> Vec<f64> {
    let GemmEx { m, n, k, batch, .. } = *g;
    check_batch_lengths(a, b, c, g);
    let a_at = |z: usize, i: usize, l: usize| match g.a {
        Stored::AsIs => a[z * g.stride_a + i * k + l],
        Stored::Transposed => a[z * g.stride_a + l * m + i],
    };
    let b_at = |z: usize, l: usize, j: usize| match g.b {
        Stored::AsIs => b[z * g.stride_b + l * n + j],
        Stored::Transposed => b[z * g.stride_b + j * k + l],
    };
    at.iter()
        .map(|&flat| {
            let (z, i, j) = output_index(flat, (batch, m, n));
            let dot: f64 = (0..k)
                .map(|l| a_at(z, i, l).to_f64() * b_at(z, l, j).to_f64())
                .sum();
            let before = match c {
                Some(c) if g.beta != 0.0 => c[z * g.stride_c + i * n + j].to_f64(),
                _ => 0.0,
            };
            f64::from(g.alpha) * dot + f64::from(g.beta) * before
        })
        .collect()
}

/// Every element of [`gemm_ex_at`]'s logical `[batch, m, n]` output, in order: the same
/// product as blocked f64 matrix products on every core ([`dense::gemm`]), for checks of
/// whole outputs (the GPU tests' multi-wave shapes are billions of multiply-adds).
pub fn gemm_ex<T: Element>(a: &[T], b: &[T], c: Option<&[T]>, g: &GemmEx) -> Vec<f64> {
    let GemmEx { m, n, k, batch, .. } = *g;
    check_batch_lengths(a, b, c, g);
    let (a, b) = (dense::widen(a), dense::widen(b));
    let mut out = vec![0.0f64; batch * m * n];
    for (z, c_z) in out.chunks_exact_mut((m * n).max(1)).enumerate().take(batch) {
        // A as [m, k] (as is) or [k, m] read transposed; B likewise.
        let a_z = &a[z * g.stride_a..];
        let a_z = match g.a {
            Stored::AsIs => MatRef::strided(a_z, m, k, k, 1),
            Stored::Transposed => MatRef::strided(a_z, m, k, 1, m),
        };
        let b_z = &b[z * g.stride_b..];
        let b_z = match g.b {
            Stored::AsIs => MatRef::strided(b_z, k, n, n, 1),
            Stored::Transposed => MatRef::strided(b_z, k, n, 1, k),
        };
        let beta = match c {
            Some(c) if g.beta != 0.0 => {
                for (i, row) in c_z.chunks_exact_mut(n).enumerate() {
                    let c_row = &c[z * g.stride_c + i * n..][..n];
                    for (x, v) in row.iter_mut().zip(c_row) {
                        *x = v.to_f64();
                    }
                }
                f64::from(g.beta)
            }
            _ => 0.0,
        };
        dense::gemm(f64::from(g.alpha), a_z, b_z, beta, c_z);
    }
    out
}

/// [`tolerance`] for an f32-accumulated product stored in a 16-bit type whose rounding is
/// `unit_roundoff` (2^-9 for bf16, 2^-12 for f16): the accumulation's bound plus one final
/// rounding of the output, relative to it.
pub fn tolerance_stored_in(k: usize, unit_roundoff: f64) -> Tolerance {
    let f32_sum = tolerance(k);
    Tolerance::new(f32_sum.atol, unit_roundoff).with_max_rel_l2(f32_sum.max_rel_l2 + unit_roundoff)
}

/// The check of an f32 matmul with inner dimension `k`, for inputs in [-1, 1].
///
/// Each output is a sum of `k` products. Its partial sums wander like a random walk, to about
/// `sqrt(j / 9)` after `j` terms, and each addition rounds by at most `u = 2^-24` of the
/// partial sum. Added in order, the worst case is `u * sum_j sqrt(j) / 3 ~= u k^1.5 / 4.5`;
/// the per-element bound is `u (k^1.5 / 4 + 4)`. Blocked and tree orders give less. Typical
/// errors are a random walk of those roundings, `~u k / 4` against outputs of `~sqrt(k) / 3`,
/// so the relative L2 bound is `4 u sqrt(k) + 2^-20`. A lost or doubled product (about 0.25)
/// is far outside both for any k we run (at k = 8192 the element bound is 0.011).
pub fn tolerance(k: usize) -> Tolerance {
    let u = f64::from(f32::EPSILON) / 2.0;
    let k = k as f64;
    Tolerance::new(u * (k.powf(1.5) / 4.0 + 4.0), 0.0)
        .with_max_rel_l2(4.0 * u * k.sqrt() + 2f64.powi(-20))
}

/// A, B (and C, when given) hold `batch` matrices `stride_*` apart.
fn check_batch_lengths<T>(a: &[T], b: &[T], c: Option<&[T]>, g: &GemmEx) {
    let GemmEx { m, n, k, batch, .. } = *g;
    let last = batch.saturating_sub(1);
    assert!(
        a.len() >= last * g.stride_a + m * k,
        "A holds {} elements, not {batch} matrices {} apart",
        a.len(),
        g.stride_a
    );
    assert!(
        b.len() >= last * g.stride_b + k * n,
        "B holds {} elements, not {batch} matrices {} apart",
        b.len(),
        g.stride_b
    );
    if let Some(c) = c {
        assert!(
            c.len() >= last * g.stride_c + m * n,
            "C is too short for {g:?}"
        );
    }
}

fn check_lengths<T>(a: &[T], b: &[T], m: usize, n: usize, k: usize) {
    assert_eq!(a.len(), m * k, "A is not {m} x {k}");
    assert_eq!(b.len(), k * n, "B is not {k} x {n}");
}

/// The product, row and column of the flat index `flat` of a `[batch, m, n]` output.
fn output_index(flat: usize, (batch, m, n): (usize, usize, usize)) -> (usize, usize, usize) {
    let z = flat / (m * n);
    assert!(
        z < batch,
        "index {flat} is outside a {batch} x {m} x {n} output"
    );
    (z, flat / n % m, flat % n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn multiplies_a_small_example() {
        // [1 2 3; 4 5 6] x [7 8; 9 10; 11 12]
        let a = [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0];
        let b = [7.0f32, 8.0, 9.0, 10.0, 11.0, 12.0];
        assert_eq!(matmul(&a, &b, 2, 2, 3), vec![58.0, 64.0, 139.0, 154.0]);
    }

    #[test]
    fn sampled_values_equal_the_full_product() {
        let (m, n, k) = (17, 13, 9);
        let a: Vec<f32> = crate::measure::inputs::uniform(m * k, -1.0, 1.0, 1);
        let b: Vec<f32> = crate::measure::inputs::uniform(k * n, -1.0, 1.0, 2);
        let full = matmul(&a, &b, m, n, k);
        let at = sample_outputs(m, n, 20, 3);
        let sampled = matmul_at(&a, &b, m, n, k, &at);
        for (&i, v) in at.iter().zip(&sampled) {
            approx::assert_relative_eq!(full[i], *v, max_relative = 1e-12);
        }
    }

    #[test]
    fn the_transposed_layout_equals_the_product_with_b_transposed() {
        let (batch, m, n, k) = (2, 5, 3, 4);
        let a: Vec<f32> = crate::measure::inputs::uniform(batch * m * k, -1.0, 1.0, 4);
        let b: Vec<f32> = crate::measure::inputs::uniform(batch * n * k, -1.0, 1.0, 5);
        let all: Vec<usize> = (0..batch * m * n).collect();
        let got = matmul_bt_at(&a, &b, (batch, m, n, k), &all);
        for z in 0..batch {
            let bz = &b[z * n * k..(z + 1) * n * k];
            let b_kn: Vec<f32> = (0..k * n).map(|f| bz[(f % n) * k + f / n]).collect();
            let want = matmul(&a[z * m * k..(z + 1) * m * k], &b_kn, m, n, k);
            for (w, g) in want.iter().zip(&got[z * m * n..]) {
                approx::assert_relative_eq!(*w, *g, max_relative = 1e-12);
            }
        }
    }

    /// `x` (rows x cols, row-major) transposed.
    fn transpose(x: &[f32], rows: usize, cols: usize) -> Vec<f32> {
        (0..rows * cols)
            .map(|f| x[(f % rows) * cols + f / rows])
            .collect()
    }

    #[test]
    fn every_layout_alpha_beta_and_batch_stride_match_the_plain_product() {
        let (batch, m, n, k) = (2, 5, 3, 4);
        // Matrices 7 elements further apart than their size: the gaps must not be read.
        let (sa, sb, sc) = (m * k + 7, k * n + 7, m * n + 7);
        let a: Vec<f32> = crate::measure::inputs::uniform(batch * sa, -1.0, 1.0, 6);
        let b: Vec<f32> = crate::measure::inputs::uniform(batch * sb, -1.0, 1.0, 7);
        let c: Vec<f32> = crate::measure::inputs::uniform(batch * sc, -1.0, 1.0, 8);
        let all: Vec<usize> = (0..batch * m * n).collect();
        for a_stored in [Stored::AsIs, Stored::Transposed] {
            for b_stored in [Stored::AsIs, Stored::Transposed] {
                let g = GemmEx {
                    a: a_stored,
                    b: b_stored,
                    alpha: -0.75,
                    beta: 0.5,
                    batch,
                    stride_a: sa,
                    stride_b: sb,
                    stride_c: sc,
                    ..GemmEx::new(m, n, k)
                };
                let got = gemm_ex_at(&a, &b, Some(&c), &g, &all);
                // The full (blocked, every core) product gives the same outputs.
                for (full, one) in gemm_ex(&a, &b, Some(&c), &g).iter().zip(&got) {
                    approx::assert_relative_eq!(full, one, max_relative = 1e-12);
                }
                for z in 0..batch {
                    // The stored matrices, brought back to A [m, k] and B [k, n].
                    let az = &a[z * sa..z * sa + m * k];
                    let bz = &b[z * sb..z * sb + k * n];
                    let a_mk = match a_stored {
                        Stored::AsIs => az.to_vec(),
                        Stored::Transposed => transpose(az, k, m),
                    };
                    let b_kn = match b_stored {
                        Stored::AsIs => bz.to_vec(),
                        Stored::Transposed => transpose(bz, n, k),
                    };
                    let product = matmul(&a_mk, &b_kn, m, n, k);
                    for (f, p) in product.iter().enumerate() {
                        let want = -0.75 * p + 0.5 * f64::from(c[z * sc + f]);
                        approx::assert_relative_eq!(want, got[z * m * n + f], max_relative = 1e-12);
                    }
                }
            }
        }
    }

    #[test]
    fn beta_zero_never_reads_c() {
        let g = GemmEx {
            b: Stored::Transposed,
            ..GemmEx::new(2, 2, 3)
        };
        let a = [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0];
        let b = [1.0f32, 0.0, 0.0, 0.0, 1.0, 0.0];
        let poison = [f32::NAN; 4];
        let got = gemm_ex_at(&a, &b, Some(&poison), &g, &[0, 1, 2, 3]);
        assert_eq!(got, vec![1.0, 2.0, 4.0, 5.0]);
        assert_eq!(gemm_ex(&a, &b, Some(&poison), &g), got);
        // The K-major layout is matmul_bt_at's.
        assert_eq!(got, matmul_bt_at(&a, &b, (1, 2, 2, 3), &[0, 1, 2, 3]));
    }

    #[test]
    fn the_tolerance_allows_rounding_and_not_a_lost_product() {
        let t = tolerance(4096);
        assert!(t.atol > 1e-3 && t.atol < 0.01, "{t:?}");
        assert!(tolerance(1).atol < 1e-6);
        assert!(tolerance(8192).atol < 0.02);
    }
}
