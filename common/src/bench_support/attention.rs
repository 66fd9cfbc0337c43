//! The attention days' default problem. Their launchers are the days' own (day 10's forward,
//! day 20's backward) and their inputs `family::attention::random_qkv` / `random_d_o`, so each
//! day's bench builds its cases from these.

use anyhow::{Context, Result};

use super::defaults;
use crate::family::attention::AttentionArgs;
use crate::reference::attention::AttentionShape;

/// The first problem `cargo run -p day10` (or day20) runs without flags: FlashAttention's
/// benchmark shape at 4096, head dim 128, no mask.
pub fn attention_default_problem() -> Result<AttentionShape> {
    defaults::<AttentionArgs>()?
        .problems()?
        .into_iter()
        .next()
        .context("the attention days have a default problem")
}
