//! The attention days' default problem and inputs. Their launchers are the days' own (day 10's
//! forward, day 20's backward), so each day's bench builds its cases from these.

use anyhow::{Context, Result};

use super::defaults;
use crate::element::Element;
use crate::family::attention::AttentionArgs;
use crate::measure::inputs;
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

/// Q, K and V as the days' `main`s make them from `seed`: Q and K uniform in [-2, 2) (scores
/// with a standard deviation of 4/3, rows peaked enough that a wrong max shows), V in [-1, 1).
pub fn attention_qkv<T: Element>(shape: &AttentionShape, seed: u64) -> (Vec<T>, Vec<T>, Vec<T>) {
    let d = shape.head_dim;
    let q_len = shape.total_q() * shape.heads * d;
    let k_len = shape.total_k() * shape.kv_heads * d;
    (
        inputs::uniform(q_len, -2.0, 2.0, seed),
        inputs::uniform(k_len, -2.0, 2.0, seed.wrapping_add(1)),
        inputs::uniform(k_len, -1.0, 1.0, seed.wrapping_add(2)),
    )
}

/// The backward's upstream gradient dO as day 20's `main` makes it: uniform in [-1, 1).
pub fn attention_d_o<T: Element>(shape: &AttentionShape, seed: u64) -> Vec<T> {
    let q_len = shape.total_q() * shape.heads * shape.head_dim;
    inputs::uniform(q_len, -1.0, 1.0, seed.wrapping_add(3))
}
