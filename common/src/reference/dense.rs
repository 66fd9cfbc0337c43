//! Dense f64 matrix products for the references, on every core.
//!
//! A reference that loops over outputs one dot product at a time runs at a few hundred
//! million multiply-adds a second on one core; the GPU tests' multi-wave shapes need tens of
//! billions. The references therefore gather their operands into f64 matrices and hand the
//! products to [`gemm`]: `matrixmultiply`'s cache-blocked f64 kernels, with the rows of C
//! split across the cores by rayon. Its sums are in another order than a plain loop's, which
//! moves a result by a few f64 roundoffs: nothing next to the 16- and 32-bit tolerances the
//! references are compared with.

use rayon::prelude::*;

/// A read-only f64 matrix of `rows x cols` inside `data`: element `(i, j)` at
/// `i * row_stride + j * col_stride`. Strides let one buffer be read as a block of rows of a
/// packed tensor (a head of `[tokens, heads, d]`) or as its transpose, without a copy.
/// Made only by [`MatRef::row_major`] and [`MatRef::strided`], which check that every
/// element lies inside `data`: [`gemm`] hands the view to an unchecked product on that word.
#[derive(Debug, Clone, Copy)]
pub struct MatRef<'a> {
    data: &'a [f64],
    rows: usize,
    cols: usize,
    row_stride: usize,
    col_stride: usize,
}

impl<'a> MatRef<'a> {
    /// `rows x cols` stored row by row, from the start of `data`.
    pub fn row_major(data: &'a [f64], rows: usize, cols: usize) -> Self {
        Self::strided(data, rows, cols, cols, 1)
    }

    /// `rows x cols` with the given strides, from the start of `data`.
    pub fn strided(
        data: &'a [f64],
        rows: usize,
        cols: usize,
        row_stride: usize,
        col_stride: usize,
    ) -> Self {
        let m = Self {
            data,
            rows,
            cols,
            row_stride,
            col_stride,
        };
        // The last element's offset, without wrapping; strides dgemm takes as isize.
        let last = (rows.max(1) - 1)
            .checked_mul(row_stride)
            .and_then(|r| r.checked_add((cols.max(1) - 1).checked_mul(col_stride)?));
        assert!(
            m.is_empty()
                || (last.is_some_and(|last| last < data.len())
                    && isize::try_from(row_stride.max(col_stride)).is_ok()),
            "a {rows} x {cols} matrix with strides ({row_stride}, {col_stride}) does not fit \
             in {} elements",
            data.len()
        );
        m
    }

    /// The transpose (the same elements, strides swapped).
    pub fn t(self) -> Self {
        Self {
            rows: self.cols,
            cols: self.rows,
            row_stride: self.col_stride,
            col_stride: self.row_stride,
            ..self
        }
    }

    fn is_empty(&self) -> bool {
        self.rows == 0 || self.cols == 0
    }

    /// Rows `start..start + count`.
    fn row_block(self, start: usize, count: usize) -> Self {
        assert!(start + count <= self.rows);
        if count == 0 {
            return Self { rows: 0, ..self };
        }
        Self::strided(
            &self.data[start * self.row_stride..],
            count,
            self.cols,
            self.row_stride,
            self.col_stride,
        )
    }
}

/// `C = alpha A B + beta C`, C row-major `a.rows x b.cols` and contiguous. With `beta = 0`
/// whatever C held (NaN included) is overwritten, not read.
pub fn gemm(alpha: f64, a: MatRef, b: MatRef, beta: f64, c: &mut [f64]) {
    let (m, k, n) = (a.rows, a.cols, b.cols);
    assert_eq!(b.rows, k, "A is {m} x {k} but B has {} rows", b.rows);
    assert_eq!(c.len(), m * n, "C is not {m} x {n}");
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        for x in c.iter_mut() {
            *x = if beta == 0.0 { 0.0 } else { beta * *x };
        }
        return;
    }
    // Blocks of rows small enough to give every core several, large enough that each call
    // still runs matrixmultiply's blocked kernel on whole panels.
    let block = m.div_ceil(4 * rayon::current_num_threads()).max(16);
    c.par_chunks_mut(block * n)
        .enumerate()
        .for_each(|(index, c_block)| {
            let a_block = a.row_block(index * block, c_block.len() / n);
            // SAFETY: `MatRef::strided` checked that every element of A and B (and so of
            // `a_block`) lies inside its slice; `c_block` is `a_block.rows x n`, row-major
            // and contiguous, written by this call only.
            unsafe {
                matrixmultiply::dgemm(
                    a_block.rows,
                    k,
                    n,
                    alpha,
                    a_block.data.as_ptr(),
                    a_block.row_stride as isize,
                    a_block.col_stride as isize,
                    b.data.as_ptr(),
                    b.row_stride as isize,
                    b.col_stride as isize,
                    beta,
                    c_block.as_mut_ptr(),
                    n as isize,
                    1,
                );
            }
        });
}

/// [`gemm`] into a new matrix: `alpha A B`.
pub fn product(alpha: f64, a: MatRef, b: MatRef) -> Vec<f64> {
    let mut c = vec![0.0; a.rows * b.cols];
    gemm(alpha, a, b, 0.0, &mut c);
    c
}

/// The values of `x` as f64 (the stored values a kernel reads), on every core.
pub fn widen<T: crate::element::Element>(x: &[T]) -> Vec<f64> {
    x.par_iter().map(|v| v.to_f64()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The plain triple loop, for comparison.
    fn naive(a: MatRef, b: MatRef) -> Vec<f64> {
        let at = |m: &MatRef, i: usize, j: usize| m.data[i * m.row_stride + j * m.col_stride];
        let mut c = vec![0.0; a.rows * b.cols];
        for i in 0..a.rows {
            for j in 0..b.cols {
                c[i * b.cols + j] = (0..a.cols).map(|l| at(&a, i, l) * at(&b, l, j)).sum();
            }
        }
        c
    }

    fn values(len: usize, seed: u64) -> Vec<f64> {
        (0..len)
            .map(|i| ((i as u64 * 2654435761 + seed) % 1000) as f64 / 500.0 - 1.0)
            .collect()
    }

    #[test]
    fn products_of_strided_and_transposed_views_match_the_triple_loop() {
        // Odd sizes, more rows than one block per core, a transposed and a strided operand.
        for (m, k, n) in [(1, 1, 1), (3, 5, 7), (257, 33, 19), (1000, 3, 2)] {
            let a_t = values(k * m, 1);
            let a = MatRef::row_major(&a_t, k, m).t();
            // B as every other column of a [k, 2n] buffer.
            let b_wide = values(k * 2 * n, 2);
            let b = MatRef::strided(&b_wide, k, n, 2 * n, 2);
            let expected = naive(a, b);
            let got = product(0.5, a, b);
            for (g, e) in got.iter().zip(&expected) {
                assert!(
                    (g - 0.5 * e).abs() <= 1e-12 * (1.0 + e.abs()),
                    "{m} {k} {n}"
                );
            }
            // beta: C = A B - 2 C.
            let mut c = values(m * n, 3);
            let before = c.clone();
            gemm(1.0, a, b, -2.0, &mut c);
            for ((g, e), c0) in c.iter().zip(&expected).zip(&before) {
                assert!((g - (e - 2.0 * c0)).abs() <= 1e-12 * (1.0 + e.abs()));
            }
        }
    }

    #[test]
    fn beta_zero_overwrites_nan_and_k_zero_gives_beta_c() {
        let a = vec![1.0; 6];
        let mut c = vec![f64::NAN; 4];
        gemm(
            1.0,
            MatRef::row_major(&a, 2, 3),
            MatRef::row_major(&a, 3, 2),
            0.0,
            &mut c,
        );
        assert_eq!(c, vec![3.0; 4]);
        let empty: Vec<f64> = Vec::new();
        let mut c = vec![2.0; 4];
        gemm(
            1.0,
            MatRef::row_major(&empty, 2, 0),
            MatRef::row_major(&empty, 0, 2),
            0.5,
            &mut c,
        );
        assert_eq!(c, vec![1.0; 4]);
    }

    #[test]
    #[should_panic(expected = "does not fit")]
    fn a_view_past_its_buffer_is_refused() {
        let a = vec![0.0; 10];
        let _ = MatRef::strided(&a, 3, 4, 4, 1);
    }
}
