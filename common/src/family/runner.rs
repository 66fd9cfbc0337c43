//! What the runners of the one-problem families (softmax, matmul) share: the GPU, opened once
//! every problem's sizes were checked, and the progress bar of a sweep. A version's plan or
//! its refusal is [`Session::plan_or_skip`](crate::session::Session::plan_or_skip)'s.

use anyhow::Result;
use indicatif::{ProgressBar, ProgressStyle};

use crate::cli::CommonArgs;
use crate::gpu::Gpu;

/// Opens the GPU the common flags name and checks that every problem fits in its memory:
/// `(the problem in words, the device bytes it needs)`, each refused with its own words.
pub fn open_gpu_for(common: &CommonArgs, problems: &[(String, u64)]) -> Result<Gpu> {
    let gpu = common.open_gpu()?;
    for (what, bytes) in problems {
        gpu.check_fits(what, *bytes)?;
    }
    Ok(gpu)
}

/// A bar of `steps` (one a version and problem), drawn on stderr when it is a terminal and
/// `show` is set (the sweeps, whose many problems print no tables); hidden otherwise.
pub fn progress_bar(show: bool, steps: usize) -> ProgressBar {
    if !show {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(steps as u64);
    bar.set_style(
        ProgressStyle::with_template("{bar:40} {pos}/{len} {msg} [{elapsed}]")
            .expect("a valid template"),
    );
    bar
}
