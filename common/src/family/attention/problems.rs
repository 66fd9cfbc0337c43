//! The attention flags, the benchmark shapes, the problems built from the flags (refused
//! before the GPU opens when they cannot be built), their names, and the rows a check compares.

use super::*;

/// The flags of the attention days, beside the common ones.
#[derive(clap::Args, Debug, Clone)]
pub struct AttentionArgs {
    /// Query length of every sequence (default: the FlashAttention benchmark shapes at 4096).
    #[arg(long, value_parser = positive)]
    pub seqlen: Option<usize>,
    /// Key length, when it differs from the query length.
    #[arg(long, value_parser = positive)]
    pub seqlen_k: Option<usize>,
    /// Sequences in the batch (default: 16384 tokens / seqlen).
    #[arg(long, value_parser = positive)]
    pub batch: Option<usize>,
    /// Variable lengths in one batch, instead of --seqlen/--batch: `--varlen 1,17,1000`
    /// (keys as long as queries unless --seqlen-k).
    #[arg(long, value_delimiter = ',', value_parser = positive)]
    pub varlen: Vec<usize>,
    /// Query heads (default: hidden 2048 / head dim).
    #[arg(long, value_parser = positive)]
    pub heads: Option<usize>,
    /// Key/value heads (grouped-query attention; 1 = multi-query). Default: --heads.
    #[arg(long, value_parser = positive)]
    pub kv_heads: Option<usize>,
    /// Head dimension (default 128; given alone, the benchmark shape at 4096 with this head
    /// dim and hidden 2048).
    #[arg(long, value_parser = positive)]
    pub head_dim: Option<usize>,
    /// Bottom-right aligned causal mask.
    #[arg(long)]
    pub causal: bool,
    #[arg(long, value_enum, default_value_t = Dtype::Bf16)]
    pub dtype: Dtype,
    /// Sequence lengths 512 to 16384 at 16384 tokens, hidden 2048; plotted to --plot.
    #[arg(long)]
    pub sweep: bool,
    #[arg(long, default_value = "sweep.svg")]
    pub plot: PathBuf,
}

/// Where a day's own flag goes in `--help` to sit between `--dtype` and `--sweep`
/// (`#[arg(display_order = ...)]`): clap numbers the flags in the order they are declared,
/// from 0, and sorts equal numbers by name, so `--deterministic` with `--sweep`'s number comes
/// just before it.
pub const SWEEP_DISPLAY_ORDER: usize = 9;

impl AttentionArgs {
    pub fn head_dim(&self) -> usize {
        self.head_dim.unwrap_or(128)
    }

    /// No sweep and no flag that sizes a problem: the run of the benchmark targets.
    pub fn without_size_flags(&self) -> bool {
        !(self.sweep
            || self.seqlen.is_some()
            || !self.varlen.is_empty()
            || self.heads.is_some()
            || self.batch.is_some()
            || self.kv_heads.is_some()
            || self.seqlen_k.is_some()
            || self.head_dim.is_some())
    }

    /// The problems the flags ask for: the sweep, the one the size flags give, or the default
    /// targets. Lengths and batch sizes that cannot be built are refused here; the day's
    /// [`AttentionDay::check_shape`] refuses the rest.
    pub fn problems(&self) -> Result<Vec<AttentionShape>> {
        if self.sweep {
            return Ok((9..=14)
                .map(|p| benchmark_shape(1 << p, self.head_dim(), self.causal))
                .collect());
        }
        if self.without_size_flags() {
            // FlashAttention's benchmark shapes: hd128 and hd64 at 4096, and hd128 causal.
            return Ok(vec![
                benchmark_shape(4096, 128, self.causal),
                benchmark_shape(4096, 64, self.causal),
                benchmark_shape(4096, 128, true),
            ]
            .into_iter()
            .take(if self.causal { 2 } else { 3 })
            .collect());
        }
        let heads = self.heads.unwrap_or((HIDDEN / self.head_dim()).max(1));
        let kv_heads = self.kv_heads.unwrap_or(heads);
        let shape = if self.varlen.is_empty() {
            let seqlen = self.seqlen.unwrap_or(4096);
            let batch = self.batch.unwrap_or((TOKENS / seqlen).max(1));
            sizes::at_most("--batch", batch, MAX_BATCH)?;
            let seqlen_k = self.seqlen_k.unwrap_or(seqlen);
            AttentionShape::uniform(
                batch,
                seqlen,
                seqlen_k,
                heads,
                kv_heads,
                self.head_dim(),
                self.causal,
            )
        } else {
            if self.seqlen.is_some() || self.batch.is_some() {
                return Err(UsageError::new("--varlen replaces --seqlen and --batch").into());
            }
            sizes::at_most("the sequences of --varlen", self.varlen.len(), MAX_BATCH)?;
            let keys = match self.seqlen_k {
                Some(k) => vec![k; self.varlen.len()],
                None => self.varlen.clone(),
            };
            AttentionShape {
                heads,
                kv_heads,
                head_dim: self.head_dim(),
                seqlens_q: self.varlen.clone(),
                seqlens_k: keys,
                causal: self.causal,
            }
        };
        if shape.seqlens_q.contains(&0) || shape.seqlens_k.contains(&0) {
            return Err(UsageError::new("sequence lengths must be at least 1").into());
        }
        Ok(vec![shape])
    }
}

/// FlashAttention's benchmark shape at `seqlen`: 16384 tokens, hidden 2048.
pub fn benchmark_shape(seqlen: usize, head_dim: usize, causal: bool) -> AttentionShape {
    let heads = (HIDDEN / head_dim).max(1);
    AttentionShape::uniform(
        TOKENS / seqlen,
        seqlen,
        seqlen,
        heads,
        heads,
        head_dim,
        causal,
    )
}

/// The problem in words and as the key the peers script writes, `{op}/{dtype}/b..-h..`
/// (`op` is `attention` for the forward, `attention_bwd` for the backward).
pub fn describe(shape: &AttentionShape, dtype: Dtype, op: &str) -> (String, String) {
    let lens = |v: &[usize]| -> String {
        if v.iter().all(|&l| l == v[0]) {
            format!("{}", v[0])
        } else {
            v.iter()
                .map(|l| l.to_string())
                .collect::<Vec<_>>()
                .join("+")
        }
    };
    let (lq, lk) = (lens(&shape.seqlens_q), lens(&shape.seqlens_k));
    let mask = if shape.causal { "-causal" } else { "" };
    let key = format!(
        "{op}/{dtype}/b{}-h{}-kv{}-d{}-q{lq}-k{lk}{mask}",
        shape.batch(),
        shape.heads,
        shape.kv_heads,
        shape.head_dim
    );
    let text = format!(
        "batch {} x seqlen {lq}{} x heads {} (kv {}) x d {}{}, {dtype}",
        shape.batch(),
        if lq == lk {
            String::new()
        } else {
            format!(" (keys {lk})")
        },
        shape.heads,
        shape.kv_heads,
        shape.head_dim,
        if shape.causal { ", causal" } else { "" }
    );
    (text, key)
}

/// Whether the f64 reference is cheap enough to check every row: at most `max_work`
/// multiply-adds (rows x keys of the longest sequence x head dim).
fn checks_every_row(shape: &AttentionShape, max_work: usize) -> bool {
    let max_k = shape.seqlens_k.iter().max().copied().unwrap_or(0);
    let work = (shape.total_q() * shape.heads)
        .saturating_mul(max_k)
        .saturating_mul(shape.head_dim);
    work <= max_work
}

/// Every query row when the reference costs at most `max_work` multiply-adds; otherwise a
/// random row in every [`SAMPLED_TILE`]-row tile of every head of every sequence, and the
/// first and last.
pub fn query_rows_to_check(shape: &AttentionShape, max_work: usize, seed: u64) -> Vec<QueryRow> {
    match checks_every_row(shape, max_work) {
        true => shape.all_query_rows(),
        false => shape.sampled_query_rows(SAMPLED_TILE, seed),
    }
}

/// [`query_rows_to_check`] for the keys (dK and dV): every key, or one in every tile.
pub fn key_rows_to_check(shape: &AttentionShape, max_work: usize, seed: u64) -> Vec<KeyRow> {
    match checks_every_row(shape, max_work) {
        true => shape.all_key_rows(),
        false => shape.sampled_key_rows(SAMPLED_TILE, seed),
    }
}

/// The flat indices of the checked query rows' elements in a `[total_q, heads, head_dim]`
/// tensor (Q, O, dO, dQ), row after row: where a sampled reference's values sit.
pub fn query_row_elements(shape: &AttentionShape, rows: &[QueryRow]) -> Vec<usize> {
    let d = shape.head_dim;
    rows.iter()
        .flat_map(|r| (0..d).map(move |c| (r.token * shape.heads + r.head) * d + c))
        .collect()
}

/// The flat indices of the checked key rows' elements in a `[total_k, kv_heads, head_dim]`
/// tensor (dK, dV) that starts `base` elements into its buffer.
pub fn key_row_elements(shape: &AttentionShape, keys: &[KeyRow], base: usize) -> Vec<usize> {
    let d = shape.head_dim;
    keys.iter()
        .flat_map(|r| (0..d).map(move |c| base + (r.token * shape.kv_heads + r.kv_head) * d + c))
        .collect()
}

/// Requests every attention day refuses before opening a GPU, with exit 2 and one `error:`
/// line saying this: `(arguments, what the error must say)`. Each day's `tests/cli.rs`
/// runs them (`testing::assert_all_refused`) beside what only that day refuses.
pub const REFUSED_REQUESTS: &[(&str, &str)] = &[
    ("--seqlen 0", "must be at least 1"),
    ("--seqlen-k 0", "must be at least 1"),
    ("--head-dim 0", "must be at least 1"),
    ("--heads 0", "must be at least 1"),
    ("--kv-heads 0", "must be at least 1"),
    ("--batch 0", "must be at least 1"),
    ("--varlen 0", "must be at least 1"),
    ("--varlen 5,0,3", "must be at least 1"),
    ("--seqlen=-3", "not a whole number"),
    ("--seqlen 1e15", "not a whole number"),
    ("--batch 1000000000000000", "--batch is 1000000000000000"),
    ("--seqlen 1000000000000000", "2^31"),
    ("--seqlen 8 --batch 1 --seqlen-k 1000000000000000", "2^31"),
    (
        "--seqlen 8 --seqlen-k 1000000000000000",
        "too large to address",
    ),
    (
        "--seqlen 1152921504606846976 --batch 64",
        "too large to address",
    ),
    (
        "--varlen 18446744073709551615,1",
        "the query lengths: the sum is too large",
    ),
    ("--heads 70000 --seqlen 8", "65535"),
    ("--head-dim 2048", "--head-dim is 2048"),
    ("--head-dim 96 --kernel fa2_mma", "--head-dim 96"),
    ("--head-dim 96 --sweep", "--head-dim 96"),
    ("--heads 4 --kv-heads 3", "must divide"),
    ("--heads 4 --kv-heads 8", "must divide"),
    ("--dtype f32", "bf16 or f16"),
    ("--varlen 4,5 --seqlen 4", "--varlen replaces"),
    ("--kernel fa3", "no kernel `fa3`"),
];

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Args {
        #[command(flatten)]
        attention: AttentionArgs,
    }

    fn problems(flags: &[&str]) -> Result<Vec<AttentionShape>> {
        let args = Args::try_parse_from(std::iter::once("dayNN").chain(flags.iter().copied()))?;
        args.attention.problems()
    }

    #[test]
    fn the_defaults_are_the_benchmark_targets() {
        let shapes = problems(&[]).unwrap();
        assert_eq!(
            shapes,
            [
                benchmark_shape(4096, 128, false),
                benchmark_shape(4096, 64, false),
                benchmark_shape(4096, 128, true),
            ]
        );
        assert_eq!((shapes[0].batch(), shapes[0].heads), (4, 16));
        assert_eq!(problems(&["--causal"]).unwrap().len(), 2);
        let sweep = problems(&["--sweep", "--head-dim", "64"]).unwrap();
        let lens: Vec<usize> = sweep.iter().map(|s| s.seqlens_q[0]).collect();
        assert_eq!(lens, [512, 1024, 2048, 4096, 8192, 16384]);
        assert!(sweep.iter().all(|s| s.heads == 32 && s.total_q() == TOKENS));
    }

    #[test]
    fn size_flags_build_one_problem_and_refuse_what_cannot_be_built() {
        let one = problems(&["--seqlen", "100", "--kv-heads", "2", "--head-dim", "64"]).unwrap();
        assert_eq!(
            one,
            [AttentionShape::uniform(163, 100, 100, 32, 2, 64, false)]
        );
        let varlen = problems(&["--varlen", "3,5", "--seqlen-k", "7"]).unwrap();
        assert_eq!(
            (varlen[0].seqlens_q.clone(), varlen[0].seqlens_k.clone()),
            (vec![3, 5], vec![7, 7])
        );
        let err = |flags: &[&str]| problems(flags).unwrap_err().to_string();
        assert_eq!(
            err(&["--varlen", "4", "--batch", "2"]),
            "--varlen replaces --seqlen and --batch"
        );
        assert!(err(&["--batch", "70000"]).contains("--batch is 70000"));
    }

    #[test]
    fn keys_and_words_name_every_dimension() {
        let shape = AttentionShape::uniform(4, 4096, 4096, 16, 16, 128, true);
        let (text, key) = describe(&shape, Dtype::Bf16, "attention");
        assert_eq!(key, "attention/bf16/b4-h16-kv16-d128-q4096-k4096-causal");
        assert_eq!(
            text,
            "batch 4 x seqlen 4096 x heads 16 (kv 16) x d 128, causal, bf16"
        );
        let shape = AttentionShape {
            heads: 4,
            kv_heads: 1,
            head_dim: 64,
            seqlens_q: vec![1, 17],
            seqlens_k: vec![5, 5],
            causal: false,
        };
        let (text, key) = describe(&shape, Dtype::F16, "attention_bwd");
        assert_eq!(key, "attention_bwd/f16/b2-h4-kv1-d64-q1+17-k5");
        assert_eq!(
            text,
            "batch 2 x seqlen 1+17 (keys 5) x heads 4 (kv 1) x d 64, f16"
        );
    }

    #[test]
    fn small_problems_check_every_row_and_large_ones_one_in_every_tile() {
        // Day 10's and day 20's limits.
        for max_work in [1 << 28, 1 << 27] {
            let small = AttentionShape::uniform(2, 100, 100, 2, 2, 64, true);
            assert_eq!(query_rows_to_check(&small, max_work, 1).len(), 2 * 100 * 2);
            assert_eq!(key_rows_to_check(&small, max_work, 1), small.all_key_rows());
            let large = benchmark_shape(4096, 128, false);
            let rows = query_rows_to_check(&large, max_work, 1);
            // 64 tiles x 16 heads x 4 sequences, and the first and last.
            assert_eq!(rows.len(), 64 * 16 * 4 + 2);
            assert_eq!(rows, large.sampled_query_rows(SAMPLED_TILE, 1));
            let keys = key_rows_to_check(&large, max_work, 1);
            assert_eq!(keys, large.sampled_key_rows(SAMPLED_TILE, 1));
        }
    }
}
