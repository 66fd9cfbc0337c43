//! The attention days' random inputs: one recipe for days 10 and 20, their GPU tests and their
//! benches, so a table, a test and a bench of the same shape and seed see the same tensors.

use crate::element::Element;
use crate::measure::inputs;
use crate::reference::attention::AttentionShape;

/// Q, K and V from `seed`: Q and K uniform in [-2, 2), so scores of scale q.k have a standard
/// deviation of 4/3 and rows are peaked enough that a wrong max or a wrong key shows; V in
/// [-1, 1). Q is `total_q x heads x d`, K and V `total_k x kv_heads x d`.
pub fn random_qkv<T: Element>(shape: &AttentionShape, seed: u64) -> (Vec<T>, Vec<T>, Vec<T>) {
    let (q_len, k_len) = shape.lens();
    (
        inputs::uniform(q_len, -2.0, 2.0, seed),
        inputs::uniform(k_len, -2.0, 2.0, seed.wrapping_add(1)),
        inputs::uniform(k_len, -1.0, 1.0, seed.wrapping_add(2)),
    )
}

/// The backward's upstream gradient dO from the same `seed` (a stream of its own): uniform in
/// [-1, 1), shaped as Q.
pub fn random_d_o<T: Element>(shape: &AttentionShape, seed: u64) -> Vec<T> {
    inputs::uniform(shape.lens().0, -1.0, 1.0, seed.wrapping_add(3))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_and_streams() {
        // Grouped heads and more keys than queries: Q and K/V differ in length.
        let shape = AttentionShape::uniform(2, 3, 5, 4, 2, 8, false);
        let (q, k, v) = random_qkv::<f32>(&shape, 7);
        let d_o = random_d_o::<f32>(&shape, 7);
        assert_eq!((q.len(), k.len(), v.len(), d_o.len()), (192, 160, 160, 192));
        assert!(q.iter().chain(&k).all(|x| (-2.0..2.0).contains(x)));
        assert!(v.iter().chain(&d_o).all(|x| (-1.0..1.0).contains(x)));
        // One seed, four streams: no two tensors start alike.
        assert_ne!(q[..8], d_o[..8]);
        assert_ne!(k[..8], v[..8]);
        assert_eq!(random_qkv::<f32>(&shape, 7).0, q);
    }
}
