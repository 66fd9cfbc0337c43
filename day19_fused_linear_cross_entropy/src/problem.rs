//! The day's problems: default sizes, the loss's options, random inputs, and cross-entropy
//! alone with its f64 reference.

use anyhow::{Result, bail};
use half::bf16;

use crate::fused::Shape;
use crate::reference::{self, CeOptions, CeOutput};

/// The default `--tokens`, `--hidden` and `--vocab` (main.rs, and the bench).
pub const DEFAULT_TOKENS: u64 = 8192;
pub const DEFAULT_HIDDEN: u64 = 4096;
pub const DEFAULT_VOCAB: u64 = 128256;

/// Refuses options the math does not define.
pub fn validate_options(opts: &CeOptions) -> Result<()> {
    if !(0.0..=1.0).contains(&opts.label_smoothing) {
        bail!(
            "label smoothing must be in [0, 1], not {}",
            opts.label_smoothing
        );
    }
    if !opts.z_loss.is_finite() || opts.z_loss < 0.0 {
        bail!(
            "the z-loss coefficient must be finite and >= 0, not {}",
            opts.z_loss
        );
    }
    Ok(())
}

/// Random problem inputs: H uniform in [-1, 1); W uniform in +-6/sqrt(Hd), so that the logits
/// have a standard deviation of about 2 whatever Hd (a peaked but not one-hot softmax);
/// targets uniform in [0, V), a fraction `ignore_fraction` of them the ignore index.
pub fn make_inputs(
    shape: Shape,
    ignore_fraction: f64,
    ignore_index: i32,
    seed: u64,
) -> (Vec<bf16>, Vec<bf16>, Vec<i32>) {
    let w_scale = 6.0 / (shape.hidden as f64).sqrt();
    let h = common::measure::inputs::uniform(shape.tokens * shape.hidden, -1.0, 1.0, seed);
    let w = common::measure::inputs::uniform(
        shape.vocab * shape.hidden,
        -w_scale,
        w_scale,
        seed.wrapping_add(1),
    );
    let targets = make_targets(
        shape.tokens,
        shape.vocab,
        ignore_fraction,
        ignore_index,
        seed,
    );
    (h, w, targets)
}

/// `rows` targets uniform in [0, V), each replaced by `ignore_index` with probability
/// `ignore_fraction`.
pub fn make_targets(
    rows: usize,
    vocab: usize,
    ignore_fraction: f64,
    ignore_index: i32,
    seed: u64,
) -> Vec<i32> {
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed.wrapping_add(2));
    (0..rows)
        .map(|_| {
            let y = rng.random_range(0..vocab) as i32;
            if rng.random_bool(ignore_fraction.clamp(0.0, 1.0)) {
                ignore_index
            } else {
                y
            }
        })
        .collect()
}

/// Cross-entropy alone on `rows x vocab` random logits (with outliers), its targets and its
/// f64 reference.
pub struct CeProblem {
    pub logits: Vec<bf16>,
    pub targets: Vec<i32>,
    pub expected: CeOutput,
    /// 1/N over the targets not ignored (0 when all are), which scales the gradient.
    pub inv_count: f64,
}

impl CeProblem {
    /// The logits from `logits_seed`, the targets ([`make_targets`]) from `targets_seed`.
    pub fn new(
        rows: usize,
        vocab: usize,
        ignore_fraction: f64,
        opts: &CeOptions,
        logits_seed: u64,
        targets_seed: u64,
    ) -> Self {
        let logits: Vec<bf16> = common::measure::inputs::logits(rows * vocab, logits_seed);
        let targets = make_targets(
            rows,
            vocab,
            ignore_fraction,
            opts.ignore_index,
            targets_seed,
        );
        let expected = reference::cross_entropy(&logits, &targets, rows, vocab, opts);
        let valid = reference::count_valid(&targets, vocab, opts);
        let inv_count = if valid == 0 { 0.0 } else { 1.0 / valid as f64 };
        Self {
            logits,
            targets,
            expected,
            inv_count,
        }
    }
}
