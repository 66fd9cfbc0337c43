//! The shapes of the attention GPU tests.

use super::*;

/// The GPU tests' grid: `per_block(head_dim, causal)` for both head dims, without and with
/// the mask, one block after another.
pub fn test_grid(per_block: impl Fn(usize, bool) -> Vec<AttentionShape>) -> Vec<AttentionShape> {
    let mut shapes = Vec::new();
    for d in [64, 128] {
        for causal in [false, true] {
            shapes.extend(per_block(d, causal));
        }
    }
    shapes
}

/// The odd shapes both days' GPU tests check at one head dim and mask: sequence lengths that
/// are not multiples of any tile, more and fewer queries than keys, GQA and MQA.
pub fn odd_test_shapes(d: usize, causal: bool) -> Vec<AttentionShape> {
    let mut shapes: Vec<AttentionShape> = [1, 17, 100, 257, 1000]
        .into_iter()
        .map(|len| AttentionShape::uniform(2, len, len, 2, 2, d, causal))
        .collect();
    shapes.extend([
        // More queries than keys (causal: the first 157 rows see nothing), and fewer.
        AttentionShape::uniform(1, 257, 100, 2, 2, d, causal),
        AttentionShape::uniform(1, 100, 257, 2, 2, d, causal),
        // GQA (2 query heads per kv head; the backward sums dK and dV over the group) and MQA.
        AttentionShape::uniform(2, 130, 130, 4, 2, d, causal),
        AttentionShape::uniform(1, 77, 150, 4, 1, d, causal),
    ]);
    shapes
}

/// Variable lengths in one batch, one of them with more queries than keys: the tests' varlen
/// shape at one head dim and mask.
pub fn varlen_test_shape(d: usize, causal: bool) -> AttentionShape {
    AttentionShape {
        heads: 2,
        kv_heads: 1,
        head_dim: d,
        seqlens_q: vec![1, 17, 100, 257, 65],
        seqlens_k: vec![1, 30, 100, 200, 64],
        causal,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Args {
        #[command(flatten)]
        attention: AttentionArgs,
    }

    #[test]
    fn the_test_grid_has_every_odd_shape_at_both_head_dims_and_masks() {
        let grid = test_grid(|d, causal| {
            let mut shapes = odd_test_shapes(d, causal);
            shapes.push(varlen_test_shape(d, causal));
            shapes
        });
        assert_eq!(grid.len(), 4 * 10);
        assert_eq!(grid[0], AttentionShape::uniform(2, 1, 1, 2, 2, 64, false));
        assert!(grid[30..].iter().all(|s| s.head_dim == 128 && s.causal));
    }
}
