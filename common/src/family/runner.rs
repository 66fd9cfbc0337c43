//! What the family runners share. Those of the one-problem families (softmax, matmul): the
//! GPU, opened once every problem's sizes were checked, and the progress bar of a sweep. Every
//! family: a problem titled by its day; softmax and norm: `--rows` and `--cols` as sizes. A
//! version's plan or its refusal is
//! [`Session::plan_or_skip`](crate::session::Session::plan_or_skip)'s.

use anyhow::Result;
use indicatif::{ProgressBar, ProgressStyle};

use crate::cli::CommonArgs;
use crate::gpu::Gpu;
use crate::session::Problem;

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

/// A problem of the day `day` (titled `title`), counted in bytes; a day that counts FLOPs sets
/// `flops_per_run` on it.
pub fn day_problem(
    day: &'static str,
    title: &'static str,
    description: String,
    key: String,
    bytes_per_run: u64,
) -> Problem {
    Problem {
        day,
        title,
        description,
        key,
        bytes_per_run,
        flops_per_run: None,
    }
}

/// `--rows` and `--cols` as sizes on this host, or the usage error that names the one too large.
pub fn rows_cols(rows: u64, cols: u64) -> Result<(usize, usize)> {
    let to_usize = |v: u64| {
        usize::try_from(v).map_err(|_| crate::UsageError::new(format!("{v} is too large")))
    };
    Ok((to_usize(rows)?, to_usize(cols)?))
}

/// The size flags of a row-wise day (softmax, the norms): rows and columns, given together, and
/// the storage type.
#[derive(clap::Args, Debug, Clone)]
pub struct RowsArgs {
    /// Rows, each normalized on its own. With --cols, replaces the day's default problems.
    #[arg(long, requires = "cols", value_parser = crate::sizes::positive_u64)]
    pub rows: Option<u64>,
    /// Columns: the length of each row.
    #[arg(long, requires = "rows", value_parser = crate::sizes::positive_u64)]
    pub cols: Option<u64>,
    /// Storage type (math is f32 whatever it is); default: that of each default problem.
    #[arg(long, value_enum)]
    pub dtype: Option<crate::dtype::Dtype>,
}

/// What every row-wise day refuses of [`RowsArgs`] before any GPU is opened, `(arguments,
/// what the error must say)`: its tests add the family's own cases.
pub const ROWS_REFUSED: &[(&str, &str)] = &[
    ("--rows 0 --cols 4", "'--rows <ROWS>': must be at least 1"),
    ("--rows 4 --cols 0", "'--cols <COLS>': must be at least 1"),
    (
        "--rows 18446744073709551615 --cols 4",
        "--rows x --cols: 18446744073709551615 x 4 is too large",
    ),
    (
        "--rows 4294967296 --cols 4294967296",
        "4294967296 x 4294967296 is too large to address",
    ),
    ("--rows 1000000000000000 --cols 1", "of host memory"),
    (
        "--rows 4",
        "the following required arguments were not provided",
    ),
];
