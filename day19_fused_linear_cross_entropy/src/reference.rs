//! Cross-entropy over a vocabulary, alone on given logits and fused with the linear layer that
//! makes them (`logits = H W^T`, W stored `[V, Hd]` as nn.Linear keeps it), with its gradients.
//!
//! Per token `t` with logits `z` (length V), target `y`, `lse = log sum_j exp(z_j)`, label
//! smoothing `eps` and z-loss coefficient `zc`:
//!
//! ```text
//! loss_t = lse - (1 - eps) z_y - eps * mean_j z_j + zc * lse^2
//! dz_j   = (p_j (1 + 2 zc lse) - (1 - eps) [j == y] - eps / V) / N,   p_j = exp(z_j - lse)
//! loss   = sum_t loss_t / N,   N = number of tokens whose target is not the ignore index
//! dH     = dz W,   dW = dz^T H
//! ```
//!
//! (`d lse / dz_j = p_j`, so the z-loss term adds `2 zc lse p_j`; label smoothing is torch's:
//! `(1 - eps) * nll + eps * mean_j(-log p_j)`.) Ignored tokens add nothing to the loss and get
//! a zero gradient row; when every token is ignored the loss is defined as 0, not 0/0. The unit
//! tests check the gradients against finite differences of the loss.
//!
//! Everything is f64 from the stored values. A GPU implementation keeps the logits and their
//! gradient in 16 bits between its GEMMs (as torch and Liger do); [`Rounding`] lets the
//! reference round them the same way, so that a comparison sees only the kernels' own error.
//!
//! Each gradient element also comes with the sum of its terms' magnitudes
//! (`sum_v m_tv |W_vc|` for dH, `sum_t m_tv |H_tc|` for dW, with `m_tv = |dz_tv| + p_tv (1 +
//! 2 zc lse_t) |z_tv| / N`): a rounding of the stored dz by a relative `u` moves an element by
//! at most `u` times that sum, and so does a stored logit rounded to its other bf16 neighbour
//! (which moves `z` by at most `2^-7 |z|`, and `p` by that relative amount), however much the
//! terms cancel. A check derives a per-element allowance from it that holds for small
//! gradients as for large ones.
//!
//! A problem too large for the full reference (8192 tokens x 128256 x 4096 is 4e12
//! multiply-adds) is checked at samples by [`linear_cross_entropy_sampled`], from logits the
//! caller supplies (computed on the GPU by a GEMM independent of the versions checked, and
//! themselves checked against [`logits_rows`] at sampled tokens): the exact loss, dH rows,
//! and dW rows and columns, which need every token's log-sum-exp.

use common::Element;

/// torch's default `ignore_index`.
pub const IGNORE_INDEX: i32 = -100;

/// The loss's options (torch's `label_smoothing`, Liger's `lse_square_scale` for the z-loss).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CeOptions {
    pub label_smoothing: f64,
    pub z_loss: f64,
    pub ignore_index: i32,
}

impl Default for CeOptions {
    fn default() -> Self {
        Self {
            label_smoothing: 0.0,
            z_loss: 0.0,
            ignore_index: IGNORE_INDEX,
        }
    }
}

/// What happens to the intermediates an implementation stores: the logits and their gradient.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rounding {
    /// Exact math.
    None,
    /// Rounded to bf16 (nearest even), as a bf16 GEMM's output and the in-place gradient are.
    Bf16,
}

impl Rounding {
    fn apply(self, v: f64) -> f64 {
        match self {
            Rounding::None => v,
            Rounding::Bf16 => half::bf16::from_f64(v).to_f64(),
        }
    }
}

/// The target of a token, or None when it is ignored. Any other target outside `[0, V)` is a
/// caller's bug.
fn target_of(y: i32, vocab: usize, opts: &CeOptions) -> Option<usize> {
    if y == opts.ignore_index {
        return None;
    }
    assert!(
        y >= 0 && (y as usize) < vocab,
        "target {y} is outside [0, {vocab}) and is not the ignore index {}",
        opts.ignore_index
    );
    Some(y as usize)
}

/// Tokens that count in the mean.
pub fn count_valid(targets: &[i32], vocab: usize, opts: &CeOptions) -> usize {
    targets
        .iter()
        .filter(|&&y| target_of(y, vocab, opts).is_some())
        .count()
}

/// `1 / N`, and 0 when every token is ignored (the gradient is then 0, not NaN).
fn inverse_count(valid: usize) -> f64 {
    if valid == 0 { 0.0 } else { 1.0 / valid as f64 }
}

/// One token: its loss (unscaled by 1/N) and its log-sum-exp, with `z` overwritten by the
/// gradient `dz` (scaled by `inv_n`). An ignored token's gradient row is 0.
fn ce_row(z: &mut [f64], y: Option<usize>, opts: &CeOptions, inv_n: f64) -> (f64, f64) {
    let v = z.len() as f64;
    let max = z.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let lse = max + z.iter().map(|&x| (x - max).exp()).sum::<f64>().ln();
    let Some(y) = y else {
        z.fill(0.0);
        return (0.0, lse);
    };
    let eps = opts.label_smoothing;
    let mean = z.iter().sum::<f64>() / v;
    let loss = lse - (1.0 - eps) * z[y] - eps * mean + opts.z_loss * lse * lse;
    let scale = 1.0 + 2.0 * opts.z_loss * lse;
    for (j, x) in z.iter_mut().enumerate() {
        let hot = if j == y { 1.0 - eps } else { 0.0 };
        *x = ((*x - lse).exp() * scale - hot - eps / v) * inv_n;
    }
    (loss, lse)
}

/// The loss and the gradient of the logits.
#[derive(Debug, Clone)]
pub struct CeOutput {
    /// Mean over non-ignored tokens.
    pub loss: f64,
    /// `[rows, V]`, row-major.
    pub dlogits: Vec<f64>,
    /// Each token's log-sum-exp, for tolerances.
    pub lse: Vec<f64>,
}

/// Cross-entropy alone on given logits `[rows, V]`: the loss and `dlogits`, in f64.
pub fn cross_entropy_f64(
    logits: &[f64],
    targets: &[i32],
    rows: usize,
    vocab: usize,
    opts: &CeOptions,
) -> CeOutput {
    cross_entropy_owned(logits.to_vec(), targets, rows, vocab, opts)
}

/// [`cross_entropy_f64`] on stored logits (one f64 copy of them, turned into the gradient: a
/// 8192 x 128256 problem needs 8 GiB of host memory, not twice that).
pub fn cross_entropy<T: Element>(
    logits: &[T],
    targets: &[i32],
    rows: usize,
    vocab: usize,
    opts: &CeOptions,
) -> CeOutput {
    let z: Vec<f64> = logits.iter().map(|v| v.to_f64()).collect();
    cross_entropy_owned(z, targets, rows, vocab, opts)
}

/// The gradient computed over `logits` in place, as the kernels do.
fn cross_entropy_owned(
    mut dlogits: Vec<f64>,
    targets: &[i32],
    rows: usize,
    vocab: usize,
    opts: &CeOptions,
) -> CeOutput {
    assert_eq!(dlogits.len(), rows * vocab, "logits are not rows x V");
    assert_eq!(targets.len(), rows, "one target per row");
    let inv_n = inverse_count(count_valid(targets, vocab, opts));
    let mut total = 0.0;
    let mut lse = Vec::with_capacity(rows);
    for (row, &y) in dlogits.chunks_exact_mut(vocab.max(1)).zip(targets) {
        let (loss, l) = ce_row(row, target_of(y, vocab, opts), opts, inv_n);
        total += loss;
        lse.push(l);
    }
    CeOutput {
        loss: total * inv_n,
        dlogits,
        lse,
    }
}

/// Sizes of the fused problem: `tokens` rows of H `[T, Hd]`, W `[V, Hd]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinearCeShape {
    pub tokens: usize,
    pub hidden: usize,
    pub vocab: usize,
}

/// Gradient elements that are sums, and beside each the sum of its terms' magnitudes (see
/// the module's notes), which its rounding error scales with.
#[derive(Debug, Clone, Default)]
pub struct Sums {
    pub values: Vec<f64>,
    pub terms: Vec<f64>,
}

impl Sums {
    /// `len` sums, all zero, to add terms into.
    fn zeros(len: usize) -> Self {
        Sums {
            values: vec![0.0; len],
            terms: vec![0.0; len],
        }
    }

    /// Appends one row of sums and their magnitudes.
    fn extend(&mut self, (values, terms): (Vec<f64>, Vec<f64>)) {
        self.values.extend(values);
        self.terms.extend(terms);
    }

    /// Adds `other` element by element.
    fn add(&mut self, other: &Sums) {
        let add = |dst: &mut [f64], src: &[f64]| dst.iter_mut().zip(src).for_each(|(d, s)| *d += s);
        add(&mut self.values, &other.values);
        add(&mut self.terms, &other.terms);
    }
}

/// Loss and gradients of the fused linear + cross-entropy.
#[derive(Debug, Clone)]
pub struct LinearCeOutput {
    pub loss: f64,
    /// `[T, Hd]`.
    pub dh: Sums,
    /// `[V, Hd]`.
    pub dw: Sums,
    /// The largest |logit|, for tolerances.
    pub max_abs_logit: f64,
    /// The largest |lse| over tokens, for the z-loss's share of the tolerance.
    pub max_abs_lse: f64,
}

impl LinearCeOutput {
    /// dH then dW, back to back: the layout of the days' gradient buffer.
    pub fn concatenated_gradients(&self) -> Vec<f64> {
        [&self.dh.values[..], &self.dw.values].concat()
    }

    /// The terms' magnitudes in the same layout.
    pub fn concatenated_terms(&self) -> Vec<f64> {
        [&self.dh.terms[..], &self.dw.terms].concat()
    }
}

/// One token's logits `z_v = h . w_v`, rounded as the implementation stores them.
fn logits_row(h: &[f64], w: &[f64], hidden: usize, rounding: Rounding) -> Vec<f64> {
    w.chunks_exact(hidden)
        .map(|wv| rounding.apply(wv.iter().zip(h).map(|(a, b)| a * b).sum()))
        .collect()
}

/// One token's results: its loss (unscaled by 1/N), lse, largest |logit|, the gradient of its
/// logits `dz` (rounded as stored) and the magnitude `m_v` of each (see the module's notes).
struct TokenOut {
    loss: f64,
    lse: f64,
    max_abs: f64,
    dz: Vec<f64>,
    magnitude: Vec<f64>,
}

/// Cross-entropy of one token from its (stored) logits `z`.
fn token_from_logits(
    z: Vec<f64>,
    y: Option<usize>,
    opts: &CeOptions,
    inv_n: f64,
    rounding: Rounding,
) -> TokenOut {
    let max_abs = z.iter().fold(0.0f64, |m, v| m.max(v.abs()));
    let mut dz = z.clone();
    let (loss, lse) = ce_row(&mut dz, y, opts, inv_n);
    for g in &mut dz {
        *g = rounding.apply(*g);
    }
    let magnitude = if y.is_some() {
        let scale = (1.0 + 2.0 * opts.z_loss * lse).abs() * inv_n;
        z.iter()
            .zip(&dz)
            .map(|(&x, g)| g.abs() + (x - lse).exp() * scale * x.abs())
            .collect()
    } else {
        vec![0.0; z.len()]
    };
    TokenOut {
        loss,
        lse,
        max_abs,
        dz,
        magnitude,
    }
}

/// One token through the whole pipeline.
fn token(
    h: &[f64],
    w: &[f64],
    y: i32,
    shape: LinearCeShape,
    opts: &CeOptions,
    inv_n: f64,
    rounding: Rounding,
) -> TokenOut {
    let z = logits_row(h, w, shape.hidden, rounding);
    token_from_logits(z, target_of(y, shape.vocab, opts), opts, inv_n, rounding)
}

/// `dh_t = dz_t W` for one token, and `sum_v m_v |W_v|` beside it.
fn dh_row(dz: &[f64], magnitude: &[f64], w: &[f64], hidden: usize) -> (Vec<f64>, Vec<f64>) {
    let mut dh = vec![0.0; hidden];
    let mut terms = vec![0.0; hidden];
    for ((g, m), wv) in dz.iter().zip(magnitude).zip(w.chunks_exact(hidden)) {
        if *m != 0.0 {
            for ((d, s), x) in dh.iter_mut().zip(terms.iter_mut()).zip(wv) {
                *d += g * x;
                *s += m * x.abs();
            }
        }
    }
    (dh, terms)
}

fn check_shapes(h: usize, w: usize, targets: usize, shape: LinearCeShape) {
    let LinearCeShape {
        tokens,
        hidden,
        vocab,
    } = shape;
    assert!(hidden > 0 && vocab > 0, "hidden and vocab must be positive");
    assert_eq!(h, tokens * hidden, "H is not T x Hd");
    assert_eq!(w, vocab * hidden, "W is not V x Hd");
    assert_eq!(targets, tokens, "one target per token");
}

/// The fused linear + cross-entropy in f64: loss, dH and dW.
pub fn linear_cross_entropy_f64(
    h: &[f64],
    w: &[f64],
    targets: &[i32],
    shape: LinearCeShape,
    opts: &CeOptions,
    rounding: Rounding,
) -> LinearCeOutput {
    check_shapes(h.len(), w.len(), targets.len(), shape);
    let hidden = shape.hidden;
    let inv_n = inverse_count(count_valid(targets, shape.vocab, opts));
    let mut out = LinearCeOutput {
        loss: 0.0,
        dh: Sums::default(),
        dw: Sums::zeros(w.len()),
        max_abs_logit: 0.0,
        max_abs_lse: 0.0,
    };
    let mut total = 0.0;
    for (ht, &y) in h.chunks_exact(hidden).zip(targets) {
        let t = token(ht, w, y, shape, opts, inv_n, rounding);
        total += t.loss;
        out.max_abs_logit = out.max_abs_logit.max(t.max_abs);
        out.max_abs_lse = out.max_abs_lse.max(t.lse.abs());
        out.dh.extend(dh_row(&t.dz, &t.magnitude, w, hidden));
        let rows = out
            .dw
            .values
            .chunks_exact_mut(hidden)
            .zip(out.dw.terms.chunks_exact_mut(hidden));
        for ((g, m), (dwv, sv)) in t.dz.iter().zip(&t.magnitude).zip(rows) {
            if *m != 0.0 {
                for ((d, s), x) in dwv.iter_mut().zip(sv.iter_mut()).zip(ht) {
                    *d += g * x;
                    *s += m * x.abs();
                }
            }
        }
    }
    out.loss = total * inv_n;
    out
}

fn to_f64<T: Element>(v: &[T]) -> Vec<f64> {
    v.iter().map(|x| x.to_f64()).collect()
}

/// [`linear_cross_entropy_f64`] on stored H and W.
pub fn linear_cross_entropy<T: Element>(
    h: &[T],
    w: &[T],
    targets: &[i32],
    shape: LinearCeShape,
    opts: &CeOptions,
    rounding: Rounding,
) -> LinearCeOutput {
    linear_cross_entropy_f64(&to_f64(h), &to_f64(w), targets, shape, opts, rounding)
}

/// The logits of `tokens` (indices into T), each row `[V]` rounded as stored, concatenated:
/// the exact values a GEMM's output should round to, to check logits computed elsewhere. One
/// thread per token (a row costs `V * Hd` products).
pub fn logits_rows<T: Element>(
    h: &[T],
    w: &[T],
    shape: LinearCeShape,
    rounding: Rounding,
    tokens: &[usize],
) -> Vec<f64> {
    let hidden = shape.hidden;
    assert_eq!(h.len(), shape.tokens * hidden, "H is not T x Hd");
    assert_eq!(w.len(), shape.vocab * hidden, "W is not V x Hd");
    let w = to_f64(w);
    let rows: Vec<Vec<f64>> = std::thread::scope(|s| {
        let handles: Vec<_> = tokens
            .iter()
            .map(|&t| {
                let w = &w;
                let ht = to_f64(&h[t * hidden..(t + 1) * hidden]);
                s.spawn(move || logits_row(&ht, w, hidden, rounding))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("a reference thread panicked"))
            .collect()
    });
    rows.concat()
}

/// What [`linear_cross_entropy_sampled`] gives: the loss, and gradients at sampled places
/// with their terms' magnitudes.
#[derive(Debug, Clone)]
pub struct SampledLinearCe {
    pub loss: f64,
    /// dH rows of the sampled tokens, concatenated (`[tokens, Hd]`).
    pub dh: Sums,
    /// dW rows of the sampled vocabulary entries (`[rows, Hd]`).
    pub dw_rows: Sums,
    /// dW columns of the sampled hidden indices, each `[V]` (`[columns, V]`).
    pub dw_columns: Sums,
    /// The largest |logit|.
    pub max_abs_logit: f64,
}

/// Sampled places of the fused problem from `logits` `[T, V]` supplied as stored (already
/// rounded as the implementation keeps them; `rounding` then applies to dz): the loss (every
/// token), the dH rows of `dh_tokens`, the dW rows `dw_rows` and the dW columns `dw_columns`
/// (sums over every token). Two passes over the logits, each split over the host's cores:
/// every token's lse, loss and gradient row, then the sums into the sampled dW places.
#[allow(clippy::too_many_arguments)]
pub fn linear_cross_entropy_sampled<T: Element, L: Element>(
    h: &[T],
    w: &[T],
    targets: &[i32],
    logits: &[L],
    shape: LinearCeShape,
    opts: &CeOptions,
    rounding: Rounding,
    (dh_tokens, dw_rows, dw_columns): (&[usize], &[usize], &[usize]),
) -> SampledLinearCe {
    check_shapes(h.len(), w.len(), targets.len(), shape);
    let LinearCeShape {
        tokens,
        hidden,
        vocab,
    } = shape;
    assert_eq!(logits.len(), tokens * vocab, "logits are not T x V");
    assert!(dh_tokens.iter().all(|&t| t < tokens), "a dH row past T");
    assert!(dw_rows.iter().all(|&v| v < vocab), "a dW row past V");
    assert!(
        dw_columns.iter().all(|&c| c < hidden),
        "a dW column past Hd"
    );
    let inv_n = inverse_count(count_valid(targets, vocab, opts));
    let row = |t: usize| -> TokenOut {
        let z: Vec<f64> = logits[t * vocab..(t + 1) * vocab]
            .iter()
            .map(|v| v.to_f64())
            .collect();
        token_from_logits(z, target_of(targets[t], vocab, opts), opts, inv_n, rounding)
    };
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .clamp(1, tokens);
    let per_thread = tokens.div_ceil(threads);
    let (nr, nc) = (dw_rows.len(), dw_columns.len());
    // Per thread, over its tokens in order: (loss, max |logit|, dW rows, dW columns); summed
    // across threads in thread order (deterministic).
    type Part = (f64, f64, Sums, Sums);
    let parts: Vec<Part> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|i| {
                let row = &row;
                s.spawn(move || {
                    let mut part: Part =
                        (0.0, 0.0, Sums::zeros(nr * hidden), Sums::zeros(nc * vocab));
                    let end = ((i + 1) * per_thread).min(tokens);
                    for t in (i * per_thread).min(end)..end {
                        let out = row(t);
                        part.0 += out.loss;
                        part.1 = part.1.max(out.max_abs);
                        let ht = &h[t * hidden..(t + 1) * hidden];
                        for (r, &v) in dw_rows.iter().enumerate() {
                            let (g, m) = (out.dz[v], out.magnitude[v]);
                            if m == 0.0 {
                                continue;
                            }
                            let dst = r * hidden..(r + 1) * hidden;
                            let terms = part.2.terms[dst.clone()].iter_mut();
                            for ((d, s), x) in part.2.values[dst].iter_mut().zip(terms).zip(ht) {
                                let x = x.to_f64();
                                *d += g * x;
                                *s += m * x.abs();
                            }
                        }
                        for (k, &c) in dw_columns.iter().enumerate() {
                            let x = ht[c].to_f64();
                            let dst = k * vocab..(k + 1) * vocab;
                            let terms = part.3.terms[dst.clone()].iter_mut();
                            let sums = part.3.values[dst].iter_mut().zip(terms);
                            for ((d, s), (g, m)) in sums.zip(out.dz.iter().zip(&out.magnitude)) {
                                *d += g * x;
                                *s += m * x.abs();
                            }
                        }
                    }
                    part
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("a reference thread panicked"))
            .collect()
    });
    let mut out = SampledLinearCe {
        loss: 0.0,
        dh: Sums::default(),
        dw_rows: Sums::zeros(nr * hidden),
        dw_columns: Sums::zeros(nc * vocab),
        max_abs_logit: 0.0,
    };
    for part in &parts {
        out.loss += part.0;
        out.max_abs_logit = out.max_abs_logit.max(part.1);
        out.dw_rows.add(&part.2);
        out.dw_columns.add(&part.3);
    }
    out.loss *= inv_n;
    // dH rows: `V * Hd` products each, one thread per row.
    let w64 = to_f64(w);
    let rows: Vec<(Vec<f64>, Vec<f64>)> = std::thread::scope(|s| {
        let handles: Vec<_> = dh_tokens
            .iter()
            .map(|&t| {
                let (w64, row) = (&w64, &row);
                s.spawn(move || {
                    let out = row(t);
                    dh_row(&out.dz, &out.magnitude, w64, hidden)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("a reference thread panicked"))
            .collect()
    });
    for row in rows {
        out.dh.extend(row);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use approx::assert_relative_eq;

    const SHAPE: LinearCeShape = LinearCeShape {
        tokens: 4,
        hidden: 3,
        vocab: 5,
    };

    fn wave(n: usize, phase: f64, amplitude: f64) -> Vec<f64> {
        (0..n)
            .map(|i| amplitude * (i as f64 * 0.77 + phase).sin())
            .collect()
    }

    fn opts(eps: f64, z: f64) -> CeOptions {
        CeOptions {
            label_smoothing: eps,
            z_loss: z,
            ignore_index: IGNORE_INDEX,
        }
    }

    #[test]
    fn uniform_logits_give_log_v() {
        // Equal logits: p = 1/V, loss = log V whatever the target.
        let out = cross_entropy_f64(&[2.0; 8], &[1, 3], 2, 4, &CeOptions::default());
        assert_relative_eq!(out.loss, 4f64.ln(), max_relative = 1e-14);
        // dz = (1/4 - [j == y]) / 2.
        assert_relative_eq!(out.dlogits[0], 0.125, max_relative = 1e-14);
        assert_relative_eq!(out.dlogits[1], -0.375, max_relative = 1e-14);
        assert_relative_eq!(out.dlogits[7], -0.375, max_relative = 1e-14);
    }

    #[test]
    fn known_values_with_smoothing_and_z_loss() {
        let z = [1.0, 2.0, 3.0];
        let lse = (1f64.exp() + 2f64.exp() + 3f64.exp()).ln();
        let (eps, zc) = (0.1, 1e-3);
        let out = cross_entropy_f64(&z, &[0], 1, 3, &opts(eps, zc));
        let expected = lse - 0.9 * 1.0 - 0.1 * 2.0 + zc * lse * lse;
        assert_relative_eq!(out.loss, expected, max_relative = 1e-14);
        let p2 = (3.0 - lse).exp();
        assert_relative_eq!(
            out.dlogits[2],
            p2 * (1.0 + 2.0 * zc * lse) - 0.1 / 3.0,
            max_relative = 1e-14
        );
    }

    #[test]
    fn gradient_rows_sum_to_the_z_loss_share() {
        // sum_j dz_j = ((1 + 2 zc lse) - (1 - eps) - eps) / N = 2 zc lse / N.
        let z = wave(12, 0.3, 3.0);
        let out = cross_entropy_f64(&z, &[2, 5], 2, 6, &opts(0.2, 0.01));
        for (row, lse) in out.dlogits.chunks(6).zip(&out.lse) {
            let sum: f64 = row.iter().sum();
            assert_relative_eq!(sum, 2.0 * 0.01 * lse / 2.0, max_relative = 1e-12);
        }
    }

    #[test]
    fn ignored_tokens_count_for_nothing_and_all_ignored_is_zero() {
        let z = wave(15, 0.1, 2.0);
        let some = cross_entropy_f64(&z, &[1, IGNORE_INDEX, 4], 3, 5, &CeOptions::default());
        let alone = cross_entropy_f64(&z[..5], &[1], 1, 5, &CeOptions::default());
        let last = cross_entropy_f64(&z[10..], &[4], 1, 5, &CeOptions::default());
        assert_relative_eq!(
            some.loss,
            (alone.loss + last.loss) / 2.0,
            max_relative = 1e-14
        );
        assert!(some.dlogits[5..10].iter().all(|&g| g == 0.0));
        let none = cross_entropy_f64(&z, &[IGNORE_INDEX; 3], 3, 5, &opts(0.1, 0.1));
        assert_eq!(none.loss, 0.0);
        assert!(none.dlogits.iter().all(|&g| g == 0.0));
        assert_eq!(
            count_valid(&[0, IGNORE_INDEX, 4], 5, &CeOptions::default()),
            2
        );
    }

    #[test]
    #[should_panic(expected = "outside [0, 5)")]
    fn a_target_outside_the_vocabulary_is_a_bug() {
        cross_entropy_f64(&[0.0; 5], &[5], 1, 5, &CeOptions::default());
    }

    #[test]
    fn one_word_vocabulary_has_zero_loss_without_z_loss() {
        let out = cross_entropy_f64(&[3.5, -1.0], &[0, 0], 2, 1, &CeOptions::default());
        assert_relative_eq!(out.loss, 0.0, epsilon = 1e-15);
        assert!(out.dlogits.iter().all(|g| g.abs() < 1e-15));
    }

    #[test]
    fn fused_equals_cross_entropy_of_the_product() {
        let h = wave(12, 0.2, 1.0);
        let w = wave(15, 1.1, 1.5);
        let targets = [0, 4, IGNORE_INDEX, 2];
        let o = opts(0.1, 0.01);
        let fused = linear_cross_entropy_f64(&h, &w, &targets, SHAPE, &o, Rounding::None);
        let logits: Vec<f64> = h
            .chunks(3)
            .flat_map(|ht| logits_row(ht, &w, 3, Rounding::None))
            .collect();
        let ce = cross_entropy_f64(&logits, &targets, 4, 5, &o);
        assert_relative_eq!(fused.loss, ce.loss, max_relative = 1e-14);
        // dH = dz W for token 1, column 0.
        let dh10: f64 = (0..5).map(|v| ce.dlogits[5 + v] * w[v * 3]).sum();
        assert_relative_eq!(fused.dh.values[3], dh10, max_relative = 1e-12);
        assert!(
            fused.dh.values[6..9].iter().all(|&g| g == 0.0),
            "ignored token"
        );
        // The sampled reference from the same stored (bf16) logits gives the same numbers.
        let (h32, w32): (Vec<f32>, Vec<f32>) = (
            h.iter().map(|&v| v as f32).collect(),
            w.iter().map(|&v| v as f32).collect(),
        );
        let fused = linear_cross_entropy(&h32, &w32, &targets, SHAPE, &o, Rounding::Bf16);
        let stored: Vec<half::bf16> = h32
            .chunks(3)
            .flat_map(|ht| logits_row(&to_f64(ht), &to_f64(&w32), 3, Rounding::Bf16))
            .map(half::bf16::from_f64)
            .collect();
        let sampled = linear_cross_entropy_sampled(
            &h32,
            &w32,
            &targets,
            &stored,
            SHAPE,
            &o,
            Rounding::Bf16,
            (&[3, 1], &[4, 0], &[2]),
        );
        assert_relative_eq!(sampled.loss, fused.loss, max_relative = 1e-13);
        for (i, &t) in [3usize, 1].iter().enumerate() {
            for c in 0..3 {
                assert_relative_eq!(
                    sampled.dh.values[i * 3 + c],
                    fused.dh.values[t * 3 + c],
                    epsilon = 1e-15
                );
                let terms = sampled.dh.terms[i * 3 + c];
                assert_relative_eq!(terms, fused.dh.terms[t * 3 + c], max_relative = 1e-12);
            }
        }
        for (i, &v) in [4usize, 0].iter().enumerate() {
            for c in 0..3 {
                let (got, want) = (
                    sampled.dw_rows.values[i * 3 + c],
                    fused.dw.values[v * 3 + c],
                );
                assert_relative_eq!(got, want, epsilon = 1e-15, max_relative = 1e-12);
            }
        }
        for v in 0..5 {
            let (got, want) = (sampled.dw_columns.values[v], fused.dw.values[v * 3 + 2]);
            assert_relative_eq!(got, want, epsilon = 1e-15, max_relative = 1e-12);
            let (got, want) = (sampled.dw_columns.terms[v], fused.dw.terms[v * 3 + 2]);
            assert_relative_eq!(got, want, max_relative = 1e-12);
        }
        let exact = logits_rows(&h32, &w32, SHAPE, Rounding::Bf16, &[1]);
        let stored_row: Vec<f64> = stored[5..10].iter().map(|v| v.to_f64()).collect();
        assert_eq!(exact, stored_row);
    }

    #[test]
    fn each_gradient_is_within_its_terms_magnitude_and_they_see_ignored_tokens() {
        let h = wave(12, 0.4, 1.2);
        let w = wave(15, 2.0, 1.7);
        let targets = [0, IGNORE_INDEX, 1, 2];
        let o = opts(0.1, 0.02);
        let out = linear_cross_entropy_f64(&h, &w, &targets, SHAPE, &o, Rounding::None);
        for (g, m) in out
            .dh
            .values
            .iter()
            .zip(&out.dh.terms)
            .chain(out.dw.values.iter().zip(&out.dw.terms))
        {
            assert!(g.abs() <= m * (1.0 + 1e-12), "{g} > {m}");
        }
        // The ignored token's dH row has no terms at all.
        assert!(out.dh.terms[3..6].iter().all(|&m| m == 0.0));
        assert!(out.dh.terms[..3].iter().all(|&m| m > 0.0));
    }

    fn numeric_gradient(v: &[f64], mut loss_at: impl FnMut(&[f64]) -> f64) -> Vec<f64> {
        let step = 1e-6;
        let mut x = v.to_vec();
        (0..v.len())
            .map(|i| {
                x[i] = v[i] + step;
                let up = loss_at(&x);
                x[i] = v[i] - step;
                let down = loss_at(&x);
                x[i] = v[i];
                (up - down) / (2.0 * step)
            })
            .collect()
    }

    fn gradients_match_finite_differences(o: CeOptions, targets: [i32; 4]) {
        let h = wave(12, 0.4, 1.2);
        let w = wave(15, 2.0, 1.7);
        let loss = |h: &[f64], w: &[f64]| {
            linear_cross_entropy_f64(h, w, &targets, SHAPE, &o, Rounding::None).loss
        };
        let analytic = linear_cross_entropy_f64(&h, &w, &targets, SHAPE, &o, Rounding::None);
        let dh = numeric_gradient(&h, |h| loss(h, &w));
        let dw = numeric_gradient(&w, |w| loss(&h, w));
        for (what, a, n) in [
            ("dH", &analytic.dh.values, &dh),
            ("dW", &analytic.dw.values, &dw),
        ] {
            for (i, (a, n)) in a.iter().zip(n).enumerate() {
                assert!(
                    (a - n).abs() <= 1e-7 + 1e-6 * n.abs(),
                    "{what}[{i}]: {a} vs {n}"
                );
            }
        }
    }

    #[test]
    fn gradients_match_finite_differences_plain() {
        gradients_match_finite_differences(CeOptions::default(), [0, 4, 1, 2]);
    }

    #[test]
    fn gradients_match_finite_differences_with_smoothing_z_loss_and_ignored() {
        gradients_match_finite_differences(opts(0.15, 0.02), [3, IGNORE_INDEX, 0, 4]);
    }

    #[test]
    fn logits_gradient_matches_finite_differences() {
        let z = wave(10, 0.9, 3.0);
        let targets = [4, 0];
        let o = opts(0.1, 0.05);
        let analytic = cross_entropy_f64(&z, &targets, 2, 5, &o);
        let numeric = numeric_gradient(&z, |z| cross_entropy_f64(z, &targets, 2, 5, &o).loss);
        for (a, n) in analytic.dlogits.iter().zip(&numeric) {
            assert!((a - n).abs() <= 1e-8 + 1e-6 * n.abs(), "{a} vs {n}");
        }
    }

    #[test]
    fn bf16_rounding_rounds_the_stored_intermediates_only() {
        let h = wave(12, 0.4, 1.2);
        let w = wave(15, 2.0, 1.7);
        let targets = [0, 4, 1, 2];
        let o = CeOptions::default();
        let exact = linear_cross_entropy_f64(&h, &w, &targets, SHAPE, &o, Rounding::None);
        let rounded = linear_cross_entropy_f64(&h, &w, &targets, SHAPE, &o, Rounding::Bf16);
        assert_ne!(exact.loss, rounded.loss);
        assert_relative_eq!(exact.loss, rounded.loss, max_relative = 2e-2);
        let gradients = rounded.concatenated_gradients();
        assert_eq!(gradients.len(), 12 + 15);
        assert_eq!(gradients[12..], rounded.dw.values[..]);
    }
}
