//! The CPU reference: `out[i] = a[i] + b[i]` in f64, from the values the kernel reads, so the
//! only error left in the check is the kernel's own rounding.

use common::Element;

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

    #[test]
    fn adds_elementwise_in_f64() {
        let out = vector_add(&[1.0f32, -2.0, 1e-8], &[2.0f32, 2.0, 1.0]);
        assert_eq!(out, vec![3.0, 0.0, 1.0 + 1e-8f32 as f64]);
    }

    #[test]
    fn reads_inputs_at_their_stored_value() {
        let out = vector_add(&[0.1f32], &[0.1f32]);
        // f32(0.1) is 13421773 / 2^27 = 0.100000001490116...; the reference doubles that,
        // not 0.1.
        assert_eq!(out[0], 2.0 * 13421773.0 / (1u64 << 27) as f64);
        assert_ne!(out[0], 0.2);
    }

    #[test]
    #[should_panic(expected = "differ in length")]
    fn refuses_inputs_of_different_lengths() {
        vector_add(&[1.0f32], &[1.0f32, 2.0]);
    }
}
