//! Data movement: copy, transpose, reversal. No arithmetic, so the check is bit for bit: the
//! kernels must put every stored value, unchanged, in its place.

/// `out[c][r] = x[r][c]` for row-major `x` of `rows x cols`; `out` is `cols x rows`.
pub fn transpose<T: Copy>(x: &[T], rows: usize, cols: usize) -> Vec<T> {
    assert_eq!(x.len(), rows * cols, "transpose: data is not rows x cols");
    let mut out = Vec::with_capacity(x.len());
    for c in 0..cols {
        out.extend((0..rows).map(|r| x[r * cols + c]));
    }
    out
}

/// `out[i] = x[n - 1 - i]`.
pub fn reverse<T: Copy>(x: &[T]) -> Vec<T> {
    x.iter().rev().copied().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transposes_a_small_matrix() {
        // [[1, 2, 3], [4, 5, 6]] -> [[1, 4], [2, 5], [3, 6]]
        assert_eq!(transpose(&[1, 2, 3, 4, 5, 6], 2, 3), vec![1, 4, 2, 5, 3, 6]);
    }

    #[test]
    fn transposing_twice_is_the_identity_and_vectors_keep_their_order() {
        let x: Vec<u32> = (0..33 * 65).collect();
        assert_eq!(transpose(&transpose(&x, 33, 65), 65, 33), x);
        assert_eq!(transpose(&x[..7], 1, 7), x[..7].to_vec());
        assert_eq!(transpose(&x[..7], 7, 1), x[..7].to_vec());
    }

    #[test]
    fn reverses_and_reversing_twice_is_the_identity() {
        assert_eq!(reverse(&[1, 2, 3]), vec![3, 2, 1]);
        let x: Vec<u32> = (0..1001).collect();
        assert_eq!(reverse(&reverse(&x)), x);
        assert_eq!(reverse::<u32>(&[]), Vec::<u32>::new());
    }

    #[test]
    #[should_panic(expected = "not rows x cols")]
    fn refuses_a_wrong_shape() {
        transpose(&[1, 2, 3], 2, 2);
    }
}
