//! What the FlashAttention days (10: forward, 20: backward) share: their problem flags, the
//! benchmark shapes, the problems built from the flags and refused before the GPU opens, the
//! problem in words and as the peers' key, the rows a check of a large problem compares, the
//! runner that drives a day over its problems and plots its sweep, and the GPU tests' grid of
//! shapes.
//!
//! A day implements [`AttentionDay`] (its checks before the GPU opens, and how it checks and
//! times its versions on one problem); its `main` flattens [`AttentionArgs`] beside
//! `CommonArgs` and hands both to [`run`].
//!
//! Its files: `inputs` (the random tensors), `kernels` (what the launchers share: dtype names,
//! `fa_hopper`'s refusals), `problems` (the flags, the benchmark shapes, the problems and the
//! rows to check), `runner` (a day over its problems, and the sweep's plot), `test_grid` (the GPU
//! tests' shapes, and their run over every version).

mod inputs;
mod kernels;
mod problems;
mod runner;
mod test_grid;

use std::path::PathBuf;

use anyhow::Result;
use half::{bf16, f16};

use crate::cli::{CommonArgs, finish_reports};
use crate::dtype::Dtype;
use crate::element::Element;
use crate::gpu::Gpu;
use crate::measure::plot::LinePlot;
use crate::measure::report::DayReport;
use crate::reference::attention::{AttentionShape, KeyRow, QueryRow};
use crate::session::{Problem, Session};
use crate::sizes::{self, positive};
use crate::{UsageError, measure::sweep};

pub use inputs::*;
pub use kernels::*;
pub use problems::*;
pub use runner::*;
pub use test_grid::*;

/// FlashAttention's benchmark: batch x seqlen = 16384 tokens, hidden 2048.
pub const TOKENS: usize = 16384;
pub const HIDDEN: usize = 2048;
/// The most sequences a batch can have (the grid's limit), checked before the lengths are
/// built.
pub const MAX_BATCH: usize = 65535;
/// On large problems, one query row (and, for dK and dV, one key row) is checked in every tile
/// of this many rows of every head of every sequence: the smallest tiles of any version of
/// either day (`fa2_mma`'s 64, 64 x 64 backward), so every block of every version, the second
/// and later waves of a grid and every work item of `fa_hopper`'s persistent grid included,
/// has checked outputs.
pub const SAMPLED_TILE: usize = 64;

/// An attention day: what it refuses before the GPU opens, and how it checks and times its
/// versions on one problem. The runner ([`run`]) does the rest.
pub trait AttentionDay: Sized {
    /// Package name, `day10`.
    const DAY: &'static str;
    const TITLE: &'static str;
    /// How the TFLOP/s count (the y axis of the sweep's plot).
    const FLOPS: &'static str;

    /// Version names (`--kernel`), in table order.
    const VERSIONS: &'static [&'static str];

    /// Refuses a problem none of `versions` can take; for every problem, before the GPU opens.
    fn check_shape(shape: &AttentionShape, versions: &[&str]) -> Result<()>;

    /// Checks and times every version of `run` on one problem stored as `T`.
    fn run_problem<T: Element>(&self, run: &Run, shape: &AttentionShape) -> Result<DayReport>;

    /// Problems the day's run without size flags adds after the benchmark shapes (day 10: a
    /// prefill as a server runs it).
    fn more_targets() -> Vec<AttentionShape> {
        Vec::new()
    }
}
