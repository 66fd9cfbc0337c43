//! `out[i] = a[i] + b[i]`.

use crate::element::Element;

pub fn vector_add<T: Element>(a: &[T], b: &[T]) -> Vec<f64> {
    assert_eq!(a.len(), b.len(), "vector_add: inputs differ in length");
    a.iter()
        .zip(b)
        .map(|(x, y)| x.to_f64() + y.to_f64())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use half::bf16;

    #[test]
    fn adds_elementwise_in_f64() {
        let out = vector_add(&[1.0f32, -2.0, 1e-8], &[2.0f32, 2.0, 1.0]);
        assert_eq!(out, vec![3.0, 0.0, 1.0 + 1e-8f32 as f64]);
    }

    #[test]
    fn reads_half_types_at_their_stored_value() {
        let a = [bf16::from_f32(1.0), bf16::from_f32(0.1)];
        let out = vector_add(&a, &a);
        assert_eq!(out[0], 2.0);
        // bf16(0.1) is 0.10009765625; the reference doubles that, not 0.1.
        assert_eq!(out[1], 2.0 * 0.10009765625);
    }

    #[test]
    #[should_panic(expected = "differ in length")]
    fn refuses_inputs_of_different_lengths() {
        vector_add(&[1.0f32], &[1.0f32, 2.0]);
    }
}
