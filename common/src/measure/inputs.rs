//! Random inputs from a seed. Never zeros: zeros hide unwritten outputs and wrong indexing.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::element::Element;

/// `n` values uniform in `[lo, hi)`, rounded to `T`.
pub fn uniform<T: Element>(n: usize, lo: f64, hi: f64, seed: u64) -> Vec<T> {
    let mut rng = StdRng::seed_from_u64(seed);
    (0..n)
        .map(|_| T::from_f64(rng.random_range(lo..hi)))
        .collect()
}

/// Softmax-like logits: uniform in `[-4, 4)`, with about one element in 256 an outlier of
/// magnitude 20 to 60, so that the row maximum matters and a kernel that skips the max
/// subtraction, or takes it from the wrong element, fails.
pub fn logits<T: Element>(n: usize, seed: u64) -> Vec<T> {
    let mut rng = StdRng::seed_from_u64(seed);
    (0..n)
        .map(|_| {
            let v = if rng.random_ratio(1, 256) {
                let magnitude = rng.random_range(20.0..60.0);
                if rng.random_bool(0.5) {
                    magnitude
                } else {
                    -magnitude
                }
            } else {
                rng.random_range(-4.0..4.0)
            };
            T::from_f64(v)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_values_other_seed_other_values() {
        let a: Vec<f32> = uniform(100, -1.0, 1.0, 7);
        assert_eq!(a, uniform::<f32>(100, -1.0, 1.0, 7));
        assert_ne!(a, uniform::<f32>(100, -1.0, 1.0, 8));
        assert!(a.iter().all(|v| (-1.0..1.0).contains(v) && *v != 0.0));
    }

    #[test]
    fn logits_have_outliers_and_no_zeros() {
        let x: Vec<f32> = logits(1 << 16, 1);
        let outliers = x.iter().filter(|v| v.abs() >= 20.0).count();
        assert!((128..=384).contains(&outliers), "{outliers} outliers");
        assert!(x.iter().all(|v| v.is_finite() && *v != 0.0));
    }
}
