//! Scaled dot-product attention, forward: `O = softmax(scale * Q K^T + mask) V` and the
//! log-sum-exp `L` of each query row (what a backward pass needs to rebuild P).
//! The backward pass ([`attention_backward`]) recomputes P from L and gives dQ, dK, dV.
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

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rayon::prelude::*;

use super::dense::{self, MatRef};
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

    /// Elements of Q (and O, dO, dQ) and of K (and V, dK, dV): `[total_q, heads, head_dim]`
    /// and `[total_k, kv_heads, head_dim]`.
    pub fn lens(&self) -> (usize, usize) {
        (
            self.total_q() * self.heads * self.head_dim,
            self.total_k() * self.kv_heads * self.head_dim,
        )
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
    /// Saturates at `u64::MAX` rather than wrapping on absurd shapes.
    pub fn exact_flops(&self) -> u64 {
        let mut pairs: u64 = 0;
        for (&lq, &lk) in self.seqlens_q.iter().zip(&self.seqlens_k) {
            let seen = (0..lq).map(|i| self.key_end(i, lq, lk) as u64).sum::<u64>();
            pairs = pairs.saturating_add(seen);
        }
        pairs
            .saturating_mul(4)
            .saturating_mul(self.heads as u64)
            .saturating_mul(self.head_dim as u64)
    }

    /// Every query row, token-major: what a full check compares.
    pub fn all_query_rows(&self) -> Vec<QueryRow> {
        let heads = self.heads;
        (0..self.total_q())
            .flat_map(|token| (0..heads).map(move |head| QueryRow { token, head }))
            .collect()
    }

    /// Every key row, token-major.
    pub fn all_key_rows(&self) -> Vec<KeyRow> {
        let kv_heads = self.kv_heads;
        (0..self.total_k())
            .flat_map(|token| (0..kv_heads).map(move |kv_head| KeyRow { token, kv_head }))
            .collect()
    }

    /// The query rows a sampled check of a large problem compares: the very first and last,
    /// and one random row in every tile of `tile` rows of every head of every sequence. With
    /// `tile` the smallest query tile of any kernel, every block of every version (the
    /// second and later waves of a grid, and every work item of a persistent kernel,
    /// included) writes checked outputs; a sample of a few hundred random rows does not.
    pub fn sampled_query_rows(&self, tile: usize, seed: u64) -> Vec<QueryRow> {
        one_in_each_tile(&self.seqlens_q, self.heads, tile, seed)
            .into_iter()
            .map(|(token, head)| QueryRow { token, head })
            .collect()
    }

    /// [`Self::sampled_query_rows`] for the keys (and values) of each kv head: what a sampled
    /// check of dK and dV compares.
    pub fn sampled_key_rows(&self, tile: usize, seed: u64) -> Vec<KeyRow> {
        // A seed of its own, so that query and key samples are not the same positions.
        let seed = seed ^ 0x6b65_7973;
        one_in_each_tile(&self.seqlens_k, self.kv_heads, tile, seed)
            .into_iter()
            .map(|(token, kv_head)| KeyRow { token, kv_head })
            .collect()
    }
}

/// `(token, head)` pairs: the first and last of the packed batch, then a random token in every
/// tile of `tile` tokens of every head of every sequence of lengths `lens`.
fn one_in_each_tile(lens: &[usize], heads: usize, tile: usize, seed: u64) -> Vec<(usize, usize)> {
    assert!(tile > 0, "a sampled check needs a tile of at least one row");
    let starts = AttentionShape::cu_seqlens(lens);
    let total = starts[lens.len()];
    if total == 0 || heads == 0 {
        return Vec::new();
    }
    let mut rng = StdRng::seed_from_u64(seed ^ 0x5eed);
    let mut picked = vec![(0, 0), (total - 1, heads - 1)];
    for (&start, &len) in starts.iter().zip(lens) {
        for head in 0..heads {
            for first in (0..len).step_by(tile) {
                let end = (first + tile).min(len);
                picked.push((start + rng.random_range(first..end), head));
            }
        }
    }
    picked
}

/// `f` over chunks of `items` on every host core, the results concatenated in order: the f64
/// references over thousands of sampled rows (or a whole test shape) in seconds, not minutes.
pub fn in_parallel<I: Sync, F: Fn(&[I]) -> Vec<f64> + Sync>(items: &[I], f: F) -> Vec<f64> {
    in_parallel_pairs(items, |chunk| (f(chunk), Vec::new())).0
}

/// [`in_parallel`] for a function that returns two vectors (O and L, or dK and dV).
pub fn in_parallel_pairs<I: Sync, F: Fn(&[I]) -> (Vec<f64>, Vec<f64>) + Sync>(
    items: &[I],
    f: F,
) -> (Vec<f64>, Vec<f64>) {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let chunk = items.len().div_ceil(threads).max(1);
    let parts: Vec<(Vec<f64>, Vec<f64>)> = std::thread::scope(|scope| {
        let handles: Vec<_> = items.chunks(chunk).map(|c| scope.spawn(|| f(c))).collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("a reference thread panicked"))
            .collect()
    });
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for (x, y) in parts {
        a.extend(x);
        b.extend(y);
    }
    (a, b)
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

/// The forward pass at every query row (in blocks on every core:
/// [`attention_rows_with_magnitudes`]; [`attention_rows`] is the same row by row).
pub fn attention_forward<T: Element>(
    q: &[T],
    k: &[T],
    v: &[T],
    shape: &AttentionShape,
    scale: f64,
) -> AttentionOutput {
    attention_rows_with_magnitudes(q, k, v, shape, scale, &shape.all_query_rows()).0
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
    attention_rows_terms(q, k, v, shape, scale, rows, Terms::Signed)
}

/// [`attention_rows`] with the terms of `O_ic = sum_j P_ij V_jc` taken as `terms` gives them:
/// with [`Terms::Absolute`], `o` holds `sum_j P_ij |V_jc|`, the scale of a 16-bit kernel's
/// rounding error on that element (a kernel that rounds P to 16 bits before `P V` errs by up
/// to the format's unit roundoff times it, however much the values cancel). `lse` is the
/// same either way.
pub fn attention_rows_terms<T: Element>(
    q: &[T],
    k: &[T],
    v: &[T],
    shape: &AttentionShape,
    scale: f64,
    rows: &[QueryRow],
    terms: Terms,
) -> AttentionOutput {
    let d = shape.head_dim;
    let Layout { cu_q, cu_k } = Layout::forward(q, k, v, shape);
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
                .map(|(j, w)| terms.of(w * v[key_at(j) + c].to_f64()))
                .sum();
            out.o.push(acc / sum);
        }
        out.lse.push(max + sum.ln());
    }
    out
}

/// What the backward pass reads besides Q, K, V: the output gradient `dO` (as Q), and the
/// forward's `O` and `L` as the backward kernels are given them (the stored 16-bit O and f32
/// L, widened), so that a kernel is checked against exactly its own inputs.
#[derive(Debug, Clone, Copy)]
pub struct BackwardInputs<'a, T> {
    pub q: &'a [T],
    pub k: &'a [T],
    pub v: &'a [T],
    pub d_o: &'a [T],
    /// `[total_q, heads, head_dim]`.
    pub o: &'a [f64],
    /// `[total_q, heads]`, natural log, -inf for a row that sees no key.
    pub lse: &'a [f64],
}

/// A backward problem held whole, as tests build one: Q, K, V, dO and the f64 forward's O and
/// L of them ([`attention_forward`]); [`HeldBackward::inputs`] lends them as the backward
/// reference reads them.
pub struct HeldBackward<T> {
    pub q: Vec<T>,
    pub k: Vec<T>,
    pub v: Vec<T>,
    pub d_o: Vec<T>,
    pub forward: AttentionOutput,
}

impl<T: Element> HeldBackward<T> {
    pub fn new([q, k, v, d_o]: [Vec<T>; 4], shape: &AttentionShape, scale: f64) -> Self {
        let forward = attention_forward(&q, &k, &v, shape, scale);
        Self {
            q,
            k,
            v,
            d_o,
            forward,
        }
    }

    pub fn inputs(&self) -> BackwardInputs<'_, T> {
        BackwardInputs {
            q: &self.q,
            k: &self.k,
            v: &self.v,
            d_o: &self.d_o,
            o: &self.forward.o,
            lse: &self.forward.lse,
        }
    }
}

/// `dQ` is `[total_q, heads, head_dim]`; `dK` and `dV` are `[total_k, kv_heads, head_dim]`,
/// each summed over the query heads of its group.
#[derive(Debug, Clone)]
pub struct AttentionGradients {
    pub dq: Vec<f64>,
    pub dk: Vec<f64>,
    pub dv: Vec<f64>,
}

/// One key (and value) row: `(token, kv_head)` of the packed K.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyRow {
    pub token: usize,
    pub kv_head: usize,
}

/// What a reference gradient adds up: its terms, or their absolute values.
///
/// The second is the scale of a kernel's rounding error on that element. A kernel that rounds
/// a factor of every term to 16 bits (P for dV, dS for dQ and dK, as tensor-core kernels do)
/// errs by up to that format's unit roundoff times the sum of |term|, however much the terms
/// cancel: an early key of a causal sequence, which every query sees, can sum terms of order
/// 1 into a gradient of order 1e-3.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Terms {
    Signed,
    Absolute,
}

impl Terms {
    fn of(self, term: f64) -> f64 {
        match self {
            Terms::Signed => term,
            Terms::Absolute => term.abs(),
        }
    }
}

/// The backward pass of [`attention_forward`] for the loss `sum(dO * O)`:
///
/// ```text
/// P = exp(scale Q K^T - L)     (recomputed from L; 0 where masked)
/// D = rowsum(dO * O)
/// dV = P^T dO    dP = dO V^T    dS = P * (dP - D)    dQ = scale dS K    dK = scale dS^T Q
/// ```
///
/// (`D_i = sum_j P_ij dP_ij`, the softmax's Jacobian applied to dP, computed from O in one
/// pass over d instead of one over the keys.) Computed in blocks on every core
/// ([`attention_backward_at`]); [`attention_backward_dq`] and [`attention_backward_dkv`] are
/// the same sums row by row, the plain definition the blocked passes are tested against.
pub fn attention_backward<T: Element>(
    x: &BackwardInputs<T>,
    shape: &AttentionShape,
    scale: f64,
) -> AttentionGradients {
    attention_backward_terms(x, shape, scale, Terms::Signed)
}

/// [`attention_backward`] with each gradient's terms taken as given by `terms`: with
/// [`Terms::Absolute`], the magnitudes a 16-bit kernel's error scales with.
pub fn attention_backward_terms<T: Element>(
    x: &BackwardInputs<T>,
    shape: &AttentionShape,
    scale: f64,
    terms: Terms,
) -> AttentionGradients {
    let (rows, keys) = (shape.all_query_rows(), shape.all_key_rows());
    let (values, magnitudes) = attention_backward_at(x, shape, scale, &rows, &keys);
    match terms {
        Terms::Signed => values,
        Terms::Absolute => magnitudes,
    }
}

/// Where the packed tensors of a shape start, with the checks every entry point makes.
struct Layout {
    cu_q: Vec<usize>,
    cu_k: Vec<usize>,
}

impl Layout {
    /// The forward pass's inputs: Q, K and V of `shape`'s lengths.
    fn forward<T: Element>(q: &[T], k: &[T], v: &[T], shape: &AttentionShape) -> Self {
        assert!(shape.kv_heads > 0 && shape.heads.is_multiple_of(shape.kv_heads));
        assert_eq!((q.len(), k.len()), shape.lens(), "Q's and K's lengths");
        assert_eq!(v.len(), k.len(), "V's length");
        Self {
            cu_q: AttentionShape::cu_seqlens(&shape.seqlens_q),
            cu_k: AttentionShape::cu_seqlens(&shape.seqlens_k),
        }
    }

    /// The backward pass's inputs: the forward's, and dO, O and L.
    fn new<T: Element>(x: &BackwardInputs<T>, shape: &AttentionShape) -> Self {
        let layout = Self::forward(x.q, x.k, x.v, shape);
        assert!(
            x.d_o.len() == x.q.len() && x.o.len() == x.q.len(),
            "dO and O's lengths"
        );
        assert_eq!(x.lse.len(), shape.total_q() * shape.heads, "L's length");
        layout
    }
}

fn dot<T: Element>(a: &[T], b: &[T]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x.to_f64() * y.to_f64()).sum()
}

/// `P_ij` and `dS_ij = P_ij (dO_i . v_j - D_i)` of query row `(token, head)` and key row
/// `(key_token, kv_head)`, both given as offsets of their rows; the caller has checked the
/// mask.
#[allow(clippy::too_many_arguments)]
fn p_and_ds<T: Element>(
    x: &BackwardInputs<T>,
    d: usize,
    scale: f64,
    q_at: usize,
    row: usize,
    k_at: usize,
) -> (f64, f64) {
    let p = (scale * dot(&x.q[q_at..][..d], &x.k[k_at..][..d]) - x.lse[row]).exp();
    let delta: f64 = x.d_o[q_at..][..d]
        .iter()
        .zip(&x.o[q_at..][..d])
        .map(|(g, o)| g.to_f64() * o)
        .sum();
    let dp = dot(&x.d_o[q_at..][..d], &x.v[k_at..][..d]);
    (p, p * (dp - delta))
}

/// `dQ` at some query rows only (a sampled check): `head_dim` values per row, in the order of
/// `rows`.
pub fn attention_backward_dq<T: Element>(
    x: &BackwardInputs<T>,
    shape: &AttentionShape,
    scale: f64,
    rows: &[QueryRow],
    terms: Terms,
) -> Vec<f64> {
    let d = shape.head_dim;
    let layout = Layout::new(x, shape);
    let mut out = Vec::with_capacity(rows.len() * d);
    for r in rows {
        let seq = layout.cu_q.partition_point(|&start| start <= r.token) - 1;
        let (lq, lk) = (shape.seqlens_q[seq], shape.seqlens_k[seq]);
        let i = r.token - layout.cu_q[seq];
        let kv_head = r.head / shape.group();
        let row = r.token * shape.heads + r.head;
        let mut acc = vec![0.0f64; d];
        for j in 0..shape.key_end(i, lq, lk) {
            let k_at = ((layout.cu_k[seq] + j) * shape.kv_heads + kv_head) * d;
            let (_, ds) = p_and_ds(x, d, scale, row * d, row, k_at);
            for (a, kc) in acc.iter_mut().zip(&x.k[k_at..][..d]) {
                *a += terms.of(scale * ds * kc.to_f64());
            }
        }
        out.extend(acc);
    }
    out
}

/// `dK` and `dV` at some key rows only, each summed over the query heads that read its kv
/// head: `head_dim` values per key, in the order of `keys`.
pub fn attention_backward_dkv<T: Element>(
    x: &BackwardInputs<T>,
    shape: &AttentionShape,
    scale: f64,
    keys: &[KeyRow],
    terms: Terms,
) -> (Vec<f64>, Vec<f64>) {
    let d = shape.head_dim;
    let layout = Layout::new(x, shape);
    let (mut dk, mut dv) = (
        Vec::with_capacity(keys.len() * d),
        Vec::with_capacity(keys.len() * d),
    );
    for key in keys {
        let seq = layout.cu_k.partition_point(|&start| start <= key.token) - 1;
        let (lq, lk) = (shape.seqlens_q[seq], shape.seqlens_k[seq]);
        let j = key.token - layout.cu_k[seq];
        let k_at = (key.token * shape.kv_heads + key.kv_head) * d;
        let (mut acc_k, mut acc_v) = (vec![0.0f64; d], vec![0.0f64; d]);
        let group = shape.group();
        for head in key.kv_head * group..(key.kv_head + 1) * group {
            // Queries that see key j: j < key_end(i), i.e. from i = j + lq - lk on (causal).
            for i in (0..lq).filter(|&i| j < shape.key_end(i, lq, lk)) {
                let row = (layout.cu_q[seq] + i) * shape.heads + head;
                let (p, ds) = p_and_ds(x, d, scale, row * d, row, k_at);
                for c in 0..d {
                    acc_v[c] += terms.of(p * x.d_o[row * d + c].to_f64());
                    acc_k[c] += terms.of(scale * ds * x.q[row * d + c].to_f64());
                }
            }
        }
        dk.extend(acc_k);
        dv.extend(acc_v);
    }
    (dk, dv)
}

/// Rows `first..first + count` of one head of a packed `[tokens, heads, d]` tensor, as a
/// `count x d` matrix.
fn head_rows(
    x: &[f64],
    first: usize,
    count: usize,
    heads: usize,
    head: usize,
    d: usize,
) -> MatRef<'_> {
    if count == 0 {
        return MatRef::row_major(&[], 0, d);
    }
    MatRef::strided(&x[(first * heads + head) * d..], count, d, heads * d, 1)
}

/// The given rows (tokens `first + i` for each `i` of `picked`) of one head of a packed
/// `[tokens, heads, d]` tensor, copied into an `n x d` matrix.
fn gather_rows(
    x: &[f64],
    first: usize,
    picked: &[usize],
    heads: usize,
    head: usize,
    d: usize,
) -> Vec<f64> {
    let mut out = Vec::with_capacity(picked.len() * d);
    for &i in picked {
        out.extend_from_slice(&x[((first + i) * heads + head) * d..][..d]);
    }
    out
}

/// Rows of one (sequence, head) block: the position in the sequence of each, and where its
/// result goes in the caller's order.
struct Block {
    seq: usize,
    head: usize,
    picked: Vec<usize>,
    slots: Vec<usize>,
}

/// The most elements of one block's score matrix (32 MiB of f64): blocks of more rows are
/// split, so a sampled check of a very long sequence holds a few such matrices per core, not
/// rows x keys of them.
const BLOCK_ELEMENTS: usize = 1 << 22;

/// Groups `(token, head)` items by sequence and head, in the order of first appearance, each
/// group cut into blocks of at most [`BLOCK_ELEMENTS`] / `width(seq)` items (the other side of
/// the block's score matrix: keys for query rows, queries for keys).
fn group_by_block(
    items: impl Iterator<Item = (usize, usize)>,
    cu: &[usize],
    width: impl Fn(usize) -> usize,
) -> Vec<Block> {
    let mut blocks = Vec::new();
    for block in group_by_sequence_and_head(items, cu) {
        let most = (BLOCK_ELEMENTS / width(block.seq).max(1)).max(1);
        for (picked, slots) in block.picked.chunks(most).zip(block.slots.chunks(most)) {
            blocks.push(Block {
                seq: block.seq,
                head: block.head,
                picked: picked.to_vec(),
                slots: slots.to_vec(),
            });
        }
    }
    blocks
}

/// Groups `(token, head)` items by sequence and head, in the order of first appearance.
fn group_by_sequence_and_head(
    items: impl Iterator<Item = (usize, usize)>,
    cu: &[usize],
) -> Vec<Block> {
    let mut index = std::collections::HashMap::new();
    let mut blocks: Vec<Block> = Vec::new();
    for (slot, (token, head)) in items.enumerate() {
        let seq = cu.partition_point(|&start| start <= token) - 1;
        let b = *index.entry((seq, head)).or_insert_with(|| {
            blocks.push(Block {
                seq,
                head,
                picked: Vec::new(),
                slots: Vec::new(),
            });
            blocks.len() - 1
        });
        blocks[b].picked.push(token - cu[seq]);
        blocks[b].slots.push(slot);
    }
    blocks
}

/// The keys each of the queries `query_of` of a sequence of `lq` queries and `lk` keys sees
/// (exclusive ends: [`AttentionShape::key_end`]).
fn key_ends(shape: &AttentionShape, (lq, lk): (usize, usize), query_of: &[usize]) -> Vec<usize> {
    query_of.iter().map(|&i| shape.key_end(i, lq, lk)).collect()
}

/// The forward pass at `rows` (any of them, in any order), with each output's magnitude
/// `sum_j P_ij |V_jc|` (what [`attention_rows_terms`] gives with [`Terms::Absolute`]) beside
/// it: `o` and the magnitudes hold `head_dim` values per row and `lse` one, in the order of
/// `rows`.
///
/// The same sums as [`attention_rows`], in blocks: the rows of each sequence and query head
/// together, `S = scale Q K^T` and `O = P V` (and `P |V|`) as f64 matrix products
/// ([`dense::gemm`]), the blocks spread over every core. A whole GPU test shape then takes
/// milliseconds, where one dot product per score took seconds.
pub fn attention_rows_with_magnitudes<T: Element>(
    q: &[T],
    k: &[T],
    v: &[T],
    shape: &AttentionShape,
    scale: f64,
    rows: &[QueryRow],
) -> (AttentionOutput, Vec<f64>) {
    let (d, heads, kv_heads) = (shape.head_dim, shape.heads, shape.kv_heads);
    let Layout { cu_q, cu_k } = Layout::forward(q, k, v, shape);
    let (q, k, v) = (dense::widen(q), dense::widen(k), dense::widen(v));
    let v_abs: Vec<f64> = v.par_iter().map(|x| x.abs()).collect();
    let row_items = rows.iter().map(|r| (r.token, r.head));
    let blocks = group_by_block(row_items, &cu_q, |seq| shape.seqlens_k[seq]);
    let done: Vec<(Vec<f64>, Vec<f64>, Vec<f64>)> = blocks
        .par_iter()
        .map(|b| {
            let (lq, lk) = (shape.seqlens_q[b.seq], shape.seqlens_k[b.seq]);
            let (g, n) = (b.head / shape.group(), b.picked.len());
            let q_rows = gather_rows(&q, cu_q[b.seq], &b.picked, heads, b.head, d);
            let keys = head_rows(&k, cu_k[b.seq], lk, kv_heads, g, d);
            let mut p = dense::product(scale, MatRef::row_major(&q_rows, n, d), keys.t());
            let ends = key_ends(shape, (lq, lk), &b.picked);
            let mut lse = vec![f64::NEG_INFINITY; n];
            for (r, row) in p.chunks_exact_mut(lk.max(1)).enumerate().take(n) {
                let (seen, masked) = row.split_at_mut(ends[r]);
                masked.fill(0.0);
                if seen.is_empty() {
                    continue;
                }
                let max = seen.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let mut sum = 0.0;
                for x in seen.iter_mut() {
                    *x = (*x - max).exp();
                    sum += *x;
                }
                for x in seen.iter_mut() {
                    *x /= sum;
                }
                lse[r] = max + sum.ln();
            }
            let p = MatRef::row_major(&p, n, lk);
            let o = dense::product(1.0, p, head_rows(&v, cu_k[b.seq], lk, kv_heads, g, d));
            let size = dense::product(1.0, p, head_rows(&v_abs, cu_k[b.seq], lk, kv_heads, g, d));
            (o, size, lse)
        })
        .collect();
    let mut out = AttentionOutput {
        o: vec![0.0; rows.len() * d],
        lse: vec![0.0; rows.len()],
    };
    let mut magnitudes = vec![0.0; rows.len() * d];
    for (b, (o, size, lse)) in blocks.iter().zip(done) {
        for (r, &slot) in b.slots.iter().enumerate() {
            out.o[slot * d..][..d].copy_from_slice(&o[r * d..][..d]);
            magnitudes[slot * d..][..d].copy_from_slice(&size[r * d..][..d]);
            out.lse[slot] = lse[r];
        }
    }
    (out, magnitudes)
}

/// The gradients at `rows` (dQ) and `keys` (dK, dV; each summed over the query heads of its
/// group), any of them in any order, with their magnitudes (each gradient's terms taken
/// absolute, what [`attention_backward_dq`] and [`attention_backward_dkv`] give with
/// [`Terms::Absolute`]): `(values, magnitudes)`, `head_dim` values per row or key in the
/// order given.
///
/// The same sums as those two, in blocks, the blocks spread over every core. dQ: the rows of
/// each sequence and head together, `P` from `S = scale Q K^T` and L, `dP = dO V^T`,
/// `dS = P * (dP - D)`, `dQ = scale dS K`. dK and dV: the keys of each sequence and kv head
/// together, for each query head of its group the same with every query of the sequence
/// (`dS^T` from `K Q^T` and `V dO^T`), `dK += scale dS^T Q`, `dV += P^T dO`.
pub fn attention_backward_at<T: Element>(
    x: &BackwardInputs<T>,
    shape: &AttentionShape,
    scale: f64,
    rows: &[QueryRow],
    keys: &[KeyRow],
) -> (AttentionGradients, AttentionGradients) {
    let layout = Layout::new(x, shape);
    let (d, heads, kv_heads) = (shape.head_dim, shape.heads, shape.kv_heads);
    let abs = |x: &[f64]| -> Vec<f64> { x.par_iter().map(|v| v.abs()).collect() };
    let (q, k, v, d_o) = (
        dense::widen(x.q),
        dense::widen(x.k),
        dense::widen(x.v),
        dense::widen(x.d_o),
    );
    let (q_abs, k_abs, d_o_abs) = (abs(&q), abs(&k), abs(&d_o));
    // D_i = dO_i . O_i of every query row.
    let delta: Vec<f64> = (0..shape.total_q() * heads)
        .into_par_iter()
        .map(|row| (0..d).map(|c| d_o[row * d + c] * x.o[row * d + c]).sum())
        .collect();
    // P (in `p`) and dS (in `ds`) of a block of scores `s` (scale already in) and `dp`,
    // laid out `count x lk` (or, `by_key`, `lk' x count`), for queries `query_of` of head `h`.
    let p_and_ds = |p: &mut [f64],
                    ds: &mut [f64],
                    seq: usize,
                    h: usize,
                    query_of: &[usize],
                    keys_of: &[usize],
                    by_key: bool| {
        let (lq, lk) = (shape.seqlens_q[seq], shape.seqlens_k[seq]);
        let ends = key_ends(shape, (lq, lk), query_of);
        let (nq, nk) = (query_of.len(), keys_of.len());
        for (r, &i) in query_of.iter().enumerate() {
            let row = (layout.cu_q[seq] + i) * heads + h;
            for (c, &j) in keys_of.iter().enumerate() {
                let at = if by_key { c * nq + r } else { r * nk + c };
                if j < ends[r] {
                    p[at] = (p[at] - x.lse[row]).exp();
                    ds[at] = p[at] * (ds[at] - delta[row]);
                } else {
                    p[at] = 0.0;
                    ds[at] = 0.0;
                }
            }
        }
    };

    let row_items = rows.iter().map(|r| (r.token, r.head));
    let row_blocks = group_by_block(row_items, &layout.cu_q, |seq| shape.seqlens_k[seq]);
    let dq: Vec<(Vec<f64>, Vec<f64>)> = row_blocks
        .par_iter()
        .map(|b| {
            let (seq, h, n) = (b.seq, b.head, b.picked.len());
            let lk = shape.seqlens_k[seq];
            let (first_q, first_k, g) = (layout.cu_q[seq], layout.cu_k[seq], h / shape.group());
            let q_rows = gather_rows(&q, first_q, &b.picked, heads, h, d);
            let d_o_rows = gather_rows(&d_o, first_q, &b.picked, heads, h, d);
            let k_g = head_rows(&k, first_k, lk, kv_heads, g, d);
            let mut p = dense::product(scale, MatRef::row_major(&q_rows, n, d), k_g.t());
            let v_g = head_rows(&v, first_k, lk, kv_heads, g, d);
            let mut ds = dense::product(1.0, MatRef::row_major(&d_o_rows, n, d), v_g.t());
            let all_keys: Vec<usize> = (0..lk).collect();
            p_and_ds(&mut p, &mut ds, seq, h, &b.picked, &all_keys, false);
            let ds_abs = abs(&ds);
            let value = dense::product(scale, MatRef::row_major(&ds, n, lk), k_g);
            let k_abs_g = head_rows(&k_abs, first_k, lk, kv_heads, g, d);
            let size = dense::product(scale.abs(), MatRef::row_major(&ds_abs, n, lk), k_abs_g);
            (value, size)
        })
        .collect();

    let key_items = keys.iter().map(|r| (r.token, r.kv_head));
    let key_blocks = group_by_block(key_items, &layout.cu_k, |seq| shape.seqlens_q[seq]);
    let dkv: Vec<[Vec<f64>; 4]> = key_blocks
        .par_iter()
        .map(|b| {
            let (seq, g, n) = (b.seq, b.head, b.picked.len());
            let lq = shape.seqlens_q[seq];
            let (first_q, first_k) = (layout.cu_q[seq], layout.cu_k[seq]);
            let k_sel = gather_rows(&k, first_k, &b.picked, kv_heads, g, d);
            let v_sel = gather_rows(&v, first_k, &b.picked, kv_heads, g, d);
            let (k_sel, v_sel) = (
                MatRef::row_major(&k_sel, n, d),
                MatRef::row_major(&v_sel, n, d),
            );
            let all_queries: Vec<usize> = (0..lq).collect();
            let mut sums = [
                vec![0.0; n * d],
                vec![0.0; n * d],
                vec![0.0; n * d],
                vec![0.0; n * d],
            ];
            let [dk, dv, dk_size, dv_size] = &mut sums;
            for h in g * shape.group()..(g + 1) * shape.group() {
                let rows_of = |t: &'_ [f64]| -> Vec<f64> {
                    gather_rows(t, first_q, &all_queries, heads, h, d)
                };
                let (q_h, d_o_h) = (rows_of(&q), rows_of(&d_o));
                let (q_h, d_o_h) = (
                    MatRef::row_major(&q_h, lq, d),
                    MatRef::row_major(&d_o_h, lq, d),
                );
                // P^T and dS^T: keys x queries.
                let mut p_t = dense::product(scale, k_sel, q_h.t());
                let mut ds_t = dense::product(1.0, v_sel, d_o_h.t());
                p_and_ds(&mut p_t, &mut ds_t, seq, h, &all_queries, &b.picked, true);
                let ds_t_abs = abs(&ds_t);
                let (p_t, ds_t, ds_t_abs) = (
                    MatRef::row_major(&p_t, n, lq),
                    MatRef::row_major(&ds_t, n, lq),
                    MatRef::row_major(&ds_t_abs, n, lq),
                );
                let (q_abs_h, d_o_abs_h) = (rows_of(&q_abs), rows_of(&d_o_abs));
                dense::gemm(scale, ds_t, q_h, 1.0, dk);
                let q_abs_h = MatRef::row_major(&q_abs_h, lq, d);
                dense::gemm(scale.abs(), ds_t_abs, q_abs_h, 1.0, dk_size);
                dense::gemm(1.0, p_t, d_o_h, 1.0, dv);
                dense::gemm(1.0, p_t, MatRef::row_major(&d_o_abs_h, lq, d), 1.0, dv_size);
            }
            sums
        })
        .collect();

    let empty = || AttentionGradients {
        dq: vec![0.0; rows.len() * d],
        dk: vec![0.0; keys.len() * d],
        dv: vec![0.0; keys.len() * d],
    };
    let (mut values, mut sizes) = (empty(), empty());
    let place = |out: &mut [f64], block: &[f64], slots: &[usize]| {
        for (r, &slot) in slots.iter().enumerate() {
            out[slot * d..][..d].copy_from_slice(&block[r * d..][..d]);
        }
    };
    for (b, (value, size)) in row_blocks.iter().zip(&dq) {
        place(&mut values.dq, value, &b.slots);
        place(&mut sizes.dq, size, &b.slots);
    }
    for (b, [dk, dv, dk_size, dv_size]) in key_blocks.iter().zip(&dkv) {
        place(&mut values.dk, dk, &b.slots);
        place(&mut values.dv, dv, &b.slots);
        place(&mut sizes.dk, dk_size, &b.slots);
        place(&mut sizes.dv, dv_size, &b.slots);
    }
    (values, sizes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::measure::inputs;

    /// Equal to a few f64 roundoffs (two orders of the same sums).
    pub(super) fn assert_close(got: &[f64], want: &[f64]) {
        assert_eq!(got.len(), want.len());
        for (g, w) in got.iter().zip(want) {
            assert!(
                g == w || (g - w).abs() <= 1e-12 * (1.0 + w.abs()),
                "{got:?} != {want:?}"
            );
        }
    }

    pub(super) fn random(shape: &AttentionShape, seed: u64) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
        let (q_len, k_len) = shape.lens();
        (
            inputs::uniform(q_len, -2.0, 2.0, seed),
            inputs::uniform(k_len, -2.0, 2.0, seed + 1),
            inputs::uniform(k_len, -1.0, 1.0, seed + 2),
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
        // Row by row against the blocked products: the same sums in another order.
        assert_close(&some.o[..4], &full.o[(7 * 2 + 1) * 4..][..4]);
        assert_close(&some.o[4..], &full.o[..4]);
        assert_close(&some.lse, &[full.lse[7 * 2 + 1], full.lse[0]]);
    }

    #[test]
    fn sampled_checks_touch_every_tile_of_every_head_and_sequence() {
        let shape = AttentionShape {
            heads: 4,
            kv_heads: 2,
            head_dim: 128,
            seqlens_q: vec![4096, 1000, 65, 1],
            seqlens_k: vec![4096, 3000, 130, 64],
            causal: true,
        };
        let tile = 64;
        let rows = shape.sampled_query_rows(tile, 7);
        let keys = shape.sampled_key_rows(tile, 7);
        assert!(rows.len() < shape.total_q() * shape.heads / 8, "a sample");
        let covers = |lens: &[usize], heads: usize, picked: &[(usize, usize)]| {
            let starts = AttentionShape::cu_seqlens(lens);
            let total = starts[lens.len()];
            assert!(picked.contains(&(0, 0)) && picked.contains(&(total - 1, heads - 1)));
            assert!(picked.iter().all(|&(t, h)| t < total && h < heads));
            for (&start, &len) in starts.iter().zip(lens) {
                for head in 0..heads {
                    for first in (0..len).step_by(tile) {
                        let tokens = start + first..start + (first + tile).min(len);
                        assert!(
                            picked
                                .iter()
                                .any(|&(t, h)| h == head && tokens.contains(&t)),
                            "no checked row in tokens {tokens:?} of head {head}"
                        );
                    }
                }
            }
        };
        let rows: Vec<_> = rows.iter().map(|r| (r.token, r.head)).collect();
        let keys: Vec<_> = keys.iter().map(|k| (k.token, k.kv_head)).collect();
        covers(&shape.seqlens_q, shape.heads, &rows);
        covers(&shape.seqlens_k, shape.kv_heads, &keys);
        // The same seed gives the same sample; the rows of a tile are not always its first.
        assert_eq!(
            shape.sampled_query_rows(tile, 7),
            shape.sampled_query_rows(tile, 7)
        );
        assert!(rows.iter().any(|&(t, _)| t % tile != 0));
        assert_eq!(shape.all_query_rows().len(), shape.total_q() * shape.heads);
        assert_eq!(shape.all_key_rows().len(), shape.total_k() * shape.kv_heads);
    }

    #[test]
    fn the_parallel_reference_keeps_the_order() {
        let items: Vec<usize> = (0..1001).collect();
        let doubled = in_parallel(&items, |c| c.iter().map(|&i| 2.0 * i as f64).collect());
        assert_eq!(
            doubled,
            (0..1001).map(|i| 2.0 * i as f64).collect::<Vec<_>>()
        );
        let (a, b) = in_parallel_pairs(&items[..3], |c| {
            (c.iter().map(|&i| i as f64).collect(), vec![c.len() as f64])
        });
        assert_eq!(a, vec![0.0, 1.0, 2.0]);
        assert_eq!(b.iter().sum::<f64>(), 3.0);
        assert!(in_parallel(&items[..0], |c| vec![0.0; c.len()]).is_empty());
    }

    #[test]
    fn output_magnitudes_bound_o_and_equal_it_for_non_negative_values() {
        let shape = AttentionShape::uniform(2, 9, 7, 4, 2, 5, true);
        let (q, k, v) = random(&shape, 13);
        let rows = shape.all_query_rows();
        let o = attention_rows(&q, &k, &v, &shape, 0.4, &rows);
        let size = attention_rows_terms(&q, &k, &v, &shape, 0.4, &rows, Terms::Absolute);
        assert_eq!(o.lse, size.lse);
        assert!(o.o.iter().zip(&size.o).all(|(o, m)| o.abs() <= m + 1e-15));
        assert!(o.o.iter().zip(&size.o).any(|(o, m)| o.abs() < 0.5 * m));
        let positive: Vec<f32> = v.iter().map(|x| x.abs()).collect();
        let o = attention_rows(&q, &k, &positive, &shape, 0.4, &rows);
        let size = attention_rows_terms(&q, &k, &positive, &shape, 0.4, &rows, Terms::Absolute);
        assert!(o.o.iter().zip(&size.o).all(|(o, m)| (o - m).abs() <= 1e-12));
    }

    #[test]
    fn flops_count_the_unmasked_pairs() {
        let full = AttentionShape::uniform(2, 4, 4, 3, 3, 8, false);
        assert_eq!(full.exact_flops(), 4 * 2 * 16 * 3 * 8);
        let causal = AttentionShape::uniform(2, 4, 4, 3, 3, 8, true);
        assert_eq!(causal.exact_flops(), 4 * 2 * 10 * 3 * 8);
    }
}

#[cfg(test)]
mod backward_tests {
    use super::tests::{assert_close, random};
    use super::*;
    use crate::measure::inputs;

    /// Checks every gradient against central differences of `loss = sum(dO * O)`. The step is
    /// applied to the f32 inputs, and the difference divides by the step the f32 values
    /// actually took, so only the O(h^2) truncation remains.
    fn check_finite_differences(shape: &AttentionShape, seed: u64) {
        let (q_len, k_len) = shape.lens();
        let q: Vec<f32> = inputs::uniform(q_len, -1.5, 1.5, seed);
        let k: Vec<f32> = inputs::uniform(k_len, -1.5, 1.5, seed + 1);
        let v: Vec<f32> = inputs::uniform(k_len, -1.0, 1.0, seed + 2);
        let d_o: Vec<f32> = inputs::uniform(q_len, -1.0, 1.0, seed + 3);
        let scale = 0.7;
        let held = HeldBackward::new([q.clone(), k.clone(), v.clone(), d_o.clone()], shape, scale);
        let x = held.inputs();
        let grads = attention_backward(&x, shape, scale);
        let loss = |q: &[f32], k: &[f32], v: &[f32]| -> f64 {
            let out = attention_forward(q, k, v, shape, scale);
            out.o.iter().zip(&d_o).map(|(o, g)| o * g.to_f64()).sum()
        };
        let h = 1e-3f32;
        let check = |which: usize, analytic: &[f64]| {
            for idx in 0..analytic.len() {
                let (mut qp, mut kp, mut vp) = (q.clone(), k.clone(), v.clone());
                let (mut qm, mut km, mut vm) = (q.clone(), k.clone(), v.clone());
                let (plus, minus) = match which {
                    0 => (&mut qp[idx], &mut qm[idx]),
                    1 => (&mut kp[idx], &mut km[idx]),
                    _ => (&mut vp[idx], &mut vm[idx]),
                };
                *plus += h;
                *minus -= h;
                let step = (*plus as f64) - (*minus as f64);
                let numeric = (loss(&qp, &kp, &vp) - loss(&qm, &km, &vm)) / step;
                let err = (numeric - analytic[idx]).abs();
                assert!(
                    err <= 1e-5 + 1e-4 * analytic[idx].abs(),
                    "{} [{idx}] of {shape:?}: analytic {} numeric {numeric}",
                    ["dQ", "dK", "dV"][which],
                    analytic[idx]
                );
            }
        };
        check(0, &grads.dq);
        check(1, &grads.dk);
        check(2, &grads.dv);
    }

    #[test]
    fn gradients_match_finite_differences() {
        check_finite_differences(&AttentionShape::uniform(1, 3, 4, 1, 1, 3, false), 1);
    }

    #[test]
    fn causal_gradients_match_and_rows_that_see_nothing_get_zero() {
        // 4 queries on 2 keys: the first two see no key, so their dQ is exactly 0.
        let shape = AttentionShape::uniform(1, 4, 2, 1, 1, 3, true);
        check_finite_differences(&shape, 2);
        let wide = AttentionShape::uniform(1, 2, 5, 1, 1, 3, true);
        check_finite_differences(&wide, 3);

        let q: Vec<f32> = inputs::uniform(12, -1.0, 1.0, 4);
        let k: Vec<f32> = inputs::uniform(6, -1.0, 1.0, 5);
        let held = HeldBackward::new([q.clone(), k.clone(), k, q], &shape, 0.5);
        let x = held.inputs();
        let grads = attention_backward(&x, &shape, 0.5);
        assert!(grads.dq[..6].iter().all(|&g| g == 0.0));
        assert!(grads.dq.iter().chain(&grads.dk).all(|g| g.is_finite()));
    }

    #[test]
    fn grouped_query_gradients_sum_over_the_group() {
        // GQA: dK and dV of a kv head gather both of its query heads.
        check_finite_differences(&AttentionShape::uniform(2, 3, 3, 4, 2, 2, true), 6);
        check_finite_differences(&AttentionShape::uniform(1, 3, 2, 3, 1, 2, false), 7);
    }

    #[test]
    fn packed_batch_gradients_match_finite_differences() {
        let shape = AttentionShape {
            heads: 2,
            kv_heads: 1,
            head_dim: 2,
            seqlens_q: vec![1, 3, 2],
            seqlens_k: vec![2, 1, 3],
            causal: true,
        };
        check_finite_differences(&shape, 8);
    }

    #[test]
    fn sampled_gradients_match_the_full_pass() {
        let shape = AttentionShape::uniform(2, 5, 4, 4, 2, 3, true);
        let d = 3;
        let q: Vec<f32> = inputs::uniform(10 * 4 * d, -1.0, 1.0, 9);
        let k: Vec<f32> = inputs::uniform(8 * 2 * d, -1.0, 1.0, 10);
        let held = HeldBackward::new([q.clone(), k.clone(), k, q], &shape, 0.5);
        let x = held.inputs();
        let full = attention_backward(&x, &shape, 0.5);
        let row = [QueryRow { token: 7, head: 3 }];
        let dq = attention_backward_dq(&x, &shape, 0.5, &row, Terms::Signed);
        assert_close(&dq, &full.dq[(7 * 4 + 3) * d..][..d]);
        let (dk, dv) = attention_backward_dkv(
            &x,
            &shape,
            0.5,
            &[KeyRow {
                token: 5,
                kv_head: 1,
            }],
            Terms::Signed,
        );
        assert_close(&dk, &full.dk[(5 * 2 + 1) * d..][..d]);
        assert_close(&dv, &full.dv[(5 * 2 + 1) * d..][..d]);
    }

    /// Items grouped by sequence and head, long groups cut so that no block's score matrix
    /// passes BLOCK_ELEMENTS: every item once, in its block's order, with its own slot.
    #[test]
    fn blocks_group_by_sequence_and_head_and_split_long_groups() {
        let cu = [0, 3, 10];
        let items = [(0, 1), (4, 0), (9, 0), (1, 1), (5, 0), (6, 0), (2, 0)];
        let blocks = group_by_block(items.iter().copied(), &cu, |_| BLOCK_ELEMENTS / 2);
        let seen: Vec<(usize, usize, Vec<usize>, Vec<usize>)> = blocks
            .iter()
            .map(|b| (b.seq, b.head, b.picked.clone(), b.slots.clone()))
            .collect();
        assert_eq!(
            seen,
            vec![
                (0, 1, vec![0, 1], vec![0, 3]),
                (1, 0, vec![1, 6], vec![1, 2]),
                (1, 0, vec![2, 3], vec![4, 5]),
                (0, 0, vec![2], vec![6]),
            ]
        );
        // Short rows of keys: one block per sequence and head.
        assert_eq!(group_by_block(items.iter().copied(), &cu, |_| 10).len(), 3);
    }

    /// The blocked full passes against the row-by-row sums on every row and key of shapes
    /// with a mask that empties rows, GQA, MQA and a packed batch of unequal lengths.
    #[test]
    fn the_blocked_passes_equal_the_row_by_row_sums() {
        let shapes = [
            AttentionShape::uniform(2, 9, 7, 4, 2, 5, true),
            AttentionShape::uniform(1, 6, 11, 3, 1, 8, false),
            AttentionShape {
                heads: 2,
                kv_heads: 1,
                head_dim: 4,
                seqlens_q: vec![1, 5, 3],
                seqlens_k: vec![2, 1, 6],
                causal: true,
            },
        ];
        for (n, shape) in shapes.iter().enumerate() {
            let (q, k, v) = random(shape, 40 + n as u64);
            let (all_rows, all_keys) = (shape.all_query_rows(), shape.all_key_rows());
            let d_o: Vec<f32> = inputs::uniform(q.len(), -1.0, 1.0, 50 + n as u64);
            let held = HeldBackward::new([q.clone(), k.clone(), v.clone(), d_o], shape, 0.3);
            let x = held.inputs();
            // Every row and key, then a sampled check's: some of them, out of order.
            let some_rows: Vec<QueryRow> = all_rows.iter().rev().step_by(3).copied().collect();
            let some_keys: Vec<KeyRow> = all_keys.iter().rev().step_by(3).copied().collect();
            for (rows, keys) in [(&all_rows, &all_keys), (&some_rows, &some_keys)] {
                let (blocked, size) = attention_rows_with_magnitudes(&q, &k, &v, shape, 0.3, rows);
                let one = attention_rows(&q, &k, &v, shape, 0.3, rows);
                let one_size = attention_rows_terms(&q, &k, &v, shape, 0.3, rows, Terms::Absolute);
                assert_close(&blocked.o, &one.o);
                assert_close(&blocked.lse, &one.lse);
                assert_close(&size, &one_size.o);
                let (values, sizes) = attention_backward_at(&x, shape, 0.3, rows, keys);
                for (terms, blocked) in [(Terms::Signed, &values), (Terms::Absolute, &sizes)] {
                    let dq = attention_backward_dq(&x, shape, 0.3, rows, terms);
                    let (dk, dv) = attention_backward_dkv(&x, shape, 0.3, keys, terms);
                    assert_close(&blocked.dq, &dq);
                    assert_close(&blocked.dk, &dk);
                    assert_close(&blocked.dv, &dv);
                }
            }
        }
    }

    #[test]
    fn magnitudes_bound_the_gradients_and_equal_them_when_no_term_is_negative() {
        let shape = AttentionShape::uniform(2, 5, 4, 4, 2, 3, true);
        let d = 3;
        let q: Vec<f32> = inputs::uniform(10 * 4 * d, -1.0, 1.0, 11);
        let k: Vec<f32> = inputs::uniform(8 * 2 * d, -1.0, 1.0, 12);
        let held = HeldBackward::new([q.clone(), k.clone(), k, q], &shape, 0.5);
        let x = held.inputs();
        let value = attention_backward(&x, &shape, 0.5);
        let size = attention_backward_terms(&x, &shape, 0.5, Terms::Absolute);
        for (v, m) in [
            (&value.dq, &size.dq),
            (&value.dk, &size.dk),
            (&value.dv, &size.dv),
        ] {
            assert!(v.iter().zip(m).all(|(v, m)| v.abs() <= m + 1e-15));
        }
        // Mixed signs cancel somewhere: the magnitudes are not just |gradient|.
        assert!(
            value
                .dv
                .iter()
                .zip(&size.dv)
                .any(|(v, m)| v.abs() < 0.9 * m)
        );
        // dV = P^T dO with dO >= 0: every term is non-negative, so the two agree.
        let ones = vec![1.0f32; held.q.len()];
        let x = BackwardInputs { d_o: &ones, ..x };
        let value = attention_backward(&x, &shape, 0.5);
        let size = attention_backward_terms(&x, &shape, 0.5, Terms::Absolute);
        assert!(
            value
                .dv
                .iter()
                .zip(&size.dv)
                .all(|(v, m)| (v - m).abs() <= 1e-12)
        );
    }
}
