//! Scaled dot-product attention, forward: `O = softmax(scale * Q K^T + mask) V` and the
//! log-sum-exp `L` of each query row (what a backward pass needs to rebuild P).
//!
//! Layout, as FlashAttention's variable-length API has it: the sequences of a batch are packed
//! one after another, `Q` is `[total_q, heads, head_dim]`, `K` and `V` are
//! `[total_k, kv_heads, head_dim]`, and `cu_seqlens` give where each sequence starts. A
//! uniform batch is the special case of equal lengths. Query head `h` reads kv head
//! `h / (heads / kv_heads)` (grouped-query attention; `kv_heads = 1` is multi-query).
//!
//! Causal masking is aligned bottom-right, as FlashAttention 2.1+ does: query `i` of a
//! sequence with `lq` queries and `lk` keys sees keys `j <= i + lk - lq`, so the last query
//! sees every key. When `lq > lk` the first `lq - lk` queries see none: their output is
//! defined as 0 and their `L` as -inf.

use crate::element::Element;

/// The shape of one attention problem: a batch of sequences of possibly different lengths.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttentionShape {
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    /// Query length of each sequence.
    pub seqlens_q: Vec<usize>,
    /// Key (and value) length of each sequence.
    pub seqlens_k: Vec<usize>,
    pub causal: bool,
}

impl AttentionShape {
    /// `batch` sequences of the same lengths.
    pub fn uniform(
        batch: usize,
        seqlen_q: usize,
        seqlen_k: usize,
        heads: usize,
        kv_heads: usize,
        head_dim: usize,
        causal: bool,
    ) -> Self {
        Self {
            heads,
            kv_heads,
            head_dim,
            seqlens_q: vec![seqlen_q; batch],
            seqlens_k: vec![seqlen_k; batch],
            causal,
        }
    }

    pub fn batch(&self) -> usize {
        self.seqlens_q.len()
    }

    pub fn total_q(&self) -> usize {
        self.seqlens_q.iter().sum()
    }

    pub fn total_k(&self) -> usize {
        self.seqlens_k.iter().sum()
    }

    /// Query heads per kv head.
    pub fn group(&self) -> usize {
        self.heads / self.kv_heads
    }

    /// Start of each sequence in the packed tokens, and the total: `[0, l0, l0 + l1, ...]`.
    pub fn cu_seqlens(lens: &[usize]) -> Vec<usize> {
        let mut cu = Vec::with_capacity(lens.len() + 1);
        let mut total = 0;
        cu.push(0);
        for &l in lens {
            total += l;
            cu.push(total);
        }
        cu
    }

    /// The last key query `i` may see (exclusive end) in a sequence of `lq` queries and `lk`
    /// keys: `lk` without a mask, `i + 1 + lk - lq` (clamped to `0..=lk`) with the causal one.
    pub fn key_end(&self, i: usize, lq: usize, lk: usize) -> usize {
        if !self.causal {
            return lk;
        }
        (i as i64 + 1 + lk as i64 - lq as i64).clamp(0, lk as i64) as usize
    }

    /// `1 / sqrt(head_dim)`, the usual softmax scale.
    pub fn default_scale(&self) -> f64 {
        1.0 / (self.head_dim as f64).sqrt()
    }

    /// Multiply-adds of Q K^T and P V that the mask leaves, times 2: the FLOPs of the
    /// forward pass counted exactly (FlashAttention's benchmarks use 4 b h s^2 d, halved for
    /// a causal mask; for square causal problems the two differ by the diagonal only).
    pub fn exact_flops(&self) -> u64 {
        let mut pairs: u64 = 0;
        for (&lq, &lk) in self.seqlens_q.iter().zip(&self.seqlens_k) {
            pairs += (0..lq).map(|i| self.key_end(i, lq, lk) as u64).sum::<u64>();
        }
        4 * pairs * (self.heads * self.head_dim) as u64
    }
}

/// The reference's outputs: `o` is `[total_q, heads, head_dim]`, `lse` is `[total_q, heads]`
/// (natural log; -inf for a row that sees no key).
#[derive(Debug, Clone)]
pub struct AttentionOutput {
    pub o: Vec<f64>,
    pub lse: Vec<f64>,
}

/// One query row: `(token, head)` of the packed Q.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueryRow {
    pub token: usize,
    pub head: usize,
}

/// The forward pass at every query row.
pub fn attention_forward<T: Element>(
    q: &[T],
    k: &[T],
    v: &[T],
    shape: &AttentionShape,
    scale: f64,
) -> AttentionOutput {
    let rows: Vec<QueryRow> = (0..shape.total_q())
        .flat_map(|token| (0..shape.heads).map(move |head| QueryRow { token, head }))
        .collect();
    attention_rows(q, k, v, shape, scale, &rows)
}

/// The forward pass at some query rows only (a sampled check of a large problem): `o` holds
/// `head_dim` values per row, `lse` one, in the order of `rows`.
pub fn attention_rows<T: Element>(
    q: &[T],
    k: &[T],
    v: &[T],
    shape: &AttentionShape,
    scale: f64,
    rows: &[QueryRow],
) -> AttentionOutput {
    let d = shape.head_dim;
    assert!(shape.kv_heads > 0 && shape.heads.is_multiple_of(shape.kv_heads));
    assert_eq!(q.len(), shape.total_q() * shape.heads * d, "Q's length");
    assert_eq!(k.len(), shape.total_k() * shape.kv_heads * d, "K's length");
    assert_eq!(v.len(), k.len(), "V's length");
    let cu_q = AttentionShape::cu_seqlens(&shape.seqlens_q);
    let cu_k = AttentionShape::cu_seqlens(&shape.seqlens_k);
    let mut out = AttentionOutput {
        o: Vec::with_capacity(rows.len() * d),
        lse: Vec::with_capacity(rows.len()),
    };
    let mut scores = Vec::new();
    for row in rows {
        // The sequence this token belongs to.
        let seq = cu_q.partition_point(|&start| start <= row.token) - 1;
        let (lq, lk) = (shape.seqlens_q[seq], shape.seqlens_k[seq]);
        let i = row.token - cu_q[seq];
        let kv_head = row.head / shape.group();
        let q_row = &q[(row.token * shape.heads + row.head) * d..][..d];
        // Where key/value row j of this sequence and kv head starts in K and V.
        let key_at = |j: usize| ((cu_k[seq] + j) * shape.kv_heads + kv_head) * d;
        let end = shape.key_end(i, lq, lk);
        scores.clear();
        scores.extend((0..end).map(|j| {
            let k_row = &k[key_at(j)..][..d];
            scale
                * q_row
                    .iter()
                    .zip(k_row)
                    .map(|(a, b)| a.to_f64() * b.to_f64())
                    .sum::<f64>()
        }));
        if end == 0 {
            out.o.extend(std::iter::repeat_n(0.0, d));
            out.lse.push(f64::NEG_INFINITY);
            continue;
        }
        let max = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let weights: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
        let sum: f64 = weights.iter().sum();
        for c in 0..d {
            let acc: f64 = weights
                .iter()
                .enumerate()
                .map(|(j, w)| w * v[key_at(j) + c].to_f64())
                .sum();
            out.o.push(acc / sum);
        }
        out.lse.push(max + sum.ln());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inputs;

    fn random(shape: &AttentionShape, seed: u64) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
        let d = shape.head_dim;
        (
            inputs::uniform(shape.total_q() * shape.heads * d, -2.0, 2.0, seed),
            inputs::uniform(shape.total_k() * shape.kv_heads * d, -2.0, 2.0, seed + 1),
            inputs::uniform(shape.total_k() * shape.kv_heads * d, -1.0, 1.0, seed + 2),
        )
    }

    #[test]
    fn one_key_passes_its_value_through() {
        let shape = AttentionShape::uniform(1, 3, 1, 1, 1, 2, false);
        let q = [1.0f32, 2.0, -1.0, 0.5, 3.0, 3.0];
        let (k, v) = ([0.5f32, -0.25], [7.0f32, -3.0]);
        let out = attention_forward(&q, &k, &v, &shape, 1.0);
        assert_eq!(out.o, vec![7.0, -3.0, 7.0, -3.0, 7.0, -3.0]);
        // L is the one score itself: q . k.
        assert_eq!(out.lse, vec![0.0, -0.625, 0.75]);
    }

    #[test]
    fn equal_scores_average_the_values_and_lse_is_log_n() {
        // K rows all equal: every query weighs the keys equally.
        let shape = AttentionShape::uniform(1, 2, 4, 1, 1, 1, false);
        let q = [0.3f32, -2.0];
        let k = [1.0f32; 4];
        let v = [1.0f32, 2.0, 3.0, 6.0];
        let out = attention_forward(&q, &k, &v, &shape, 1.0);
        assert!((out.o[0] - 3.0).abs() < 1e-12 && (out.o[1] - 3.0).abs() < 1e-12);
        assert!((out.lse[0] - (0.3f32 as f64 + 4f64.ln())).abs() < 1e-12);
    }

    #[test]
    fn causal_mask_is_bottom_right_aligned_and_empty_rows_are_zero() {
        // 3 queries, 2 keys: query 0 sees nothing, query 1 sees key 0, query 2 sees both.
        let shape = AttentionShape::uniform(1, 3, 2, 1, 1, 1, true);
        assert_eq!(
            (0..3).map(|i| shape.key_end(i, 3, 2)).collect::<Vec<_>>(),
            vec![0, 1, 2]
        );
        let q = [1.0f32, 1.0, 1.0];
        let (k, v) = ([0.0f32, 0.0], [4.0f32, 8.0]);
        let out = attention_forward(&q, &k, &v, &shape, 1.0);
        assert_eq!(out.o, vec![0.0, 4.0, 6.0]);
        assert_eq!(out.lse[0], f64::NEG_INFINITY);
        // More keys than queries: the last query sees all 5, the first 3 of them.
        let wide = AttentionShape::uniform(1, 3, 5, 1, 1, 1, true);
        assert_eq!(
            (0..3).map(|i| wide.key_end(i, 3, 5)).collect::<Vec<_>>(),
            vec![3, 4, 5]
        );
    }

    #[test]
    fn grouped_query_attention_equals_repeated_kv_heads() {
        let gqa = AttentionShape::uniform(2, 5, 7, 4, 2, 8, true);
        let (q, k, v) = random(&gqa, 3);
        // Repeat each kv head twice: [tokens, 2, d] -> [tokens, 4, d].
        let d = gqa.head_dim;
        let repeat = |x: &[f32]| -> Vec<f32> {
            x.chunks(2 * d)
                .flat_map(|tok| {
                    let (h0, h1) = tok.split_at(d);
                    [h0, h0, h1, h1].concat()
                })
                .collect()
        };
        let mha = AttentionShape {
            kv_heads: 4,
            ..gqa.clone()
        };
        let a = attention_forward(&q, &k, &v, &gqa, 0.3);
        let b = attention_forward(&q, &repeat(&k), &repeat(&v), &mha, 0.3);
        assert_eq!(a.o, b.o);
        assert_eq!(a.lse, b.lse);
    }

    #[test]
    fn a_packed_batch_equals_its_sequences_alone() {
        let packed = AttentionShape {
            heads: 2,
            kv_heads: 1,
            head_dim: 4,
            seqlens_q: vec![3, 1, 5],
            seqlens_k: vec![4, 2, 5],
            causal: true,
        };
        let (q, k, v) = random(&packed, 9);
        let all = attention_forward(&q, &k, &v, &packed, 0.5);
        let (mut tq, mut tk) = (0, 0);
        for s in 0..3 {
            let (lq, lk) = (packed.seqlens_q[s], packed.seqlens_k[s]);
            let one = AttentionShape {
                seqlens_q: vec![lq],
                seqlens_k: vec![lk],
                ..packed.clone()
            };
            let qs = &q[tq * 2 * 4..(tq + lq) * 2 * 4];
            let ks = &k[tk * 4..(tk + lk) * 4];
            let vs = &v[tk * 4..(tk + lk) * 4];
            let alone = attention_forward(qs, ks, vs, &one, 0.5);
            assert_eq!(alone.o, all.o[tq * 2 * 4..(tq + lq) * 2 * 4]);
            assert_eq!(alone.lse, all.lse[tq * 2..(tq + lq) * 2]);
            tq += lq;
            tk += lk;
        }
    }

    #[test]
    fn sampled_rows_match_the_full_pass() {
        let shape = AttentionShape::uniform(2, 6, 6, 2, 2, 4, false);
        let (q, k, v) = random(&shape, 5);
        let full = attention_forward(&q, &k, &v, &shape, 0.5);
        let rows = [
            QueryRow { token: 7, head: 1 },
            QueryRow { token: 0, head: 0 },
        ];
        let some = attention_rows(&q, &k, &v, &shape, 0.5, &rows);
        assert_eq!(some.o[..4], full.o[(7 * 2 + 1) * 4..][..4]);
        assert_eq!(some.lse, vec![full.lse[7 * 2 + 1], full.lse[0]]);
    }

    #[test]
    fn flops_count_the_unmasked_pairs() {
        let full = AttentionShape::uniform(2, 4, 4, 3, 3, 8, false);
        assert_eq!(full.exact_flops(), 4 * 2 * 16 * 3 * 8);
        let causal = AttentionShape::uniform(2, 4, 4, 3, 3, 8, true);
        assert_eq!(causal.exact_flops(), 4 * 2 * 10 * 3 * 8);
    }
}
