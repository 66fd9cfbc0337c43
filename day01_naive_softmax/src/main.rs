//! `cargo run --release -p day01`: check the one-thread-per-row softmax against the CPU
//! reference, time it, and print the table.

use std::process::ExitCode;

use anyhow::Result;
use clap::Parser;
use common::cli::{CommonArgs, bytes_for, check_host_fits, run_main};
use common::session::{Expected, Problem, Session, Version};
use common::{Gpu, inputs, reference};
use day01::{NaiveSoftmax, VERSIONS};

/// Day 1: naive softmax, one thread per row, f32.
#[derive(Parser)]
#[command(version, about)]
struct Args {
    /// Rows of the matrix (one softmax each).
    #[arg(long, default_value_t = 32768, value_parser = clap::value_parser!(u64).range(1..))]
    rows: u64,
    /// Columns (the length of each softmax).
    #[arg(long, default_value_t = 4096, value_parser = clap::value_parser!(u64).range(1..))]
    cols: u64,
    #[command(flatten)]
    common: CommonArgs,
}

fn main() -> ExitCode {
    run_main(|| run(Args::parse()))
}

fn run(args: Args) -> Result<()> {
    let selected = args.common.select_versions(VERSIONS)?;
    let elements = args
        .rows
        .checked_mul(args.cols)
        .ok_or_else(|| common::UsageError::new("--rows x --cols overflows"))?;
    // Input and output in f32 on the device; on the host also the f64 reference.
    let device_bytes = bytes_for("--rows x --cols", elements, 2 * 4)?;
    check_host_fits(
        "--rows x --cols",
        bytes_for("--rows x --cols", elements, 2 * 4 + 8)?,
    )?;

    let gpu = Gpu::open(args.common.device)?;
    gpu.check_fits("--rows x --cols", device_bytes)?;
    let day = NaiveSoftmax::load(&gpu)?;

    let (rows, cols) = (args.rows as usize, args.cols as usize);
    let x: Vec<f32> = inputs::logits(rows * cols, args.common.seed);
    let reference = reference::softmax::softmax_rows(&x, rows, cols);
    let expected = Expected {
        values: &reference,
        shape: &[rows, cols],
        tolerance: day01::tolerance(cols),
    };

    let mut session = Session::new(
        &gpu,
        &args.common,
        Problem {
            day: "day01",
            title: "naive softmax",
            description: format!("{rows} x {cols}, f32"),
            key: common::softmax::key(common::dtype::Dtype::F32, rows, cols),
            bytes_per_run: device_bytes,
        },
    )?;
    session.save_input("x", &[rows, cols], &x)?;
    session.save_reference(&[rows, cols], &reference)?;

    let x_dev = gpu.upload(&x)?;
    let mut out = gpu.alloc_poisoned::<f32>(rows * cols)?;
    for name in selected {
        let version = Version {
            name,
            kernel: day.kernel(),
            shape: day.shape(rows),
        };
        session.run_version(version, &mut out, &expected, |out| {
            day.launch(&gpu, &x_dev, out, rows, cols)
        })?;
    }
    let report = session.finish();
    common::cli::finish_reports(&args.common, &[report])
}
