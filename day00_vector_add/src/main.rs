//! `cargo run --release -p day00`: check every vector-add version against the CPU reference,
//! time it, and print the table.

use std::process::ExitCode;

use anyhow::Result;
use clap::Parser;
use common::cli::{CommonArgs, bytes_for, check_host_fits, run_main};
use common::session::{Expected, Problem, Session, Version as RunVersion};
use common::{Tolerance, measure::inputs};
use day00::{VectorAdd, Version};

/// Day 0: vector addition, out = a + b, f32.
#[derive(Parser)]
#[command(version, about)]
struct Args {
    /// Number of elements (default 2^26: three 256 MiB arrays, far larger than L2).
    #[arg(long, default_value_t = 1 << 26, value_parser = common::sizes::positive_u64)]
    n: u64,
    #[command(flatten)]
    common: CommonArgs,
}

/// a + b in f32 is the correctly rounded sum: within half an ulp (2^-24 relative) of the f64
/// reference.
const TOLERANCE: Tolerance = Tolerance::new(0.0, 6e-8);

fn main() -> ExitCode {
    run_main(|| run(common::cli::parse_args(&kernel_names())))
}

/// Every version `--kernel` can name, in table order (`--help` lists them).
fn kernel_names() -> Vec<&'static str> {
    Version::NAMES.to_vec()
}

fn run(args: Args) -> Result<()> {
    let selected = args.common.select_versions(&kernel_names())?;
    let n = args.n;
    let device_bytes = bytes_for("--n", n, 3 * 4)?;
    // a, b and one output as f32, and the f64 reference.
    check_host_fits("--n", bytes_for("--n", n, 3 * 4 + 8)?)?;

    let gpu = args.common.open_gpu()?;
    gpu.check_fits("--n", device_bytes)?;
    let day = VectorAdd::load(&gpu)?;

    let n = n as usize;
    let seed = args.common.seed;
    let a: Vec<f32> = inputs::uniform(n, -1.0, 1.0, seed);
    let b: Vec<f32> = inputs::uniform(n, -1.0, 1.0, seed.wrapping_add(1));
    let reference = day00::reference::vector_add(&a, &b);
    let out_shape = [n];
    let expected = Expected::full(&reference, &out_shape, TOLERANCE);

    let mut session = Session::new(
        &gpu,
        &args.common,
        Problem {
            day: "day00",
            title: "vector add",
            description: format!("n = {n}, f32"),
            key: format!("vector_add/f32/{n}"),
            bytes_per_run: device_bytes,
            flops_per_run: None,
        },
    )?;
    session.save_input("a", &[n], &a)?;
    session.save_input("b", &[n], &b)?;
    session.save_reference(&[n], &reference)?;

    let a_dev = gpu.upload(&a)?;
    let b_dev = gpu.upload(&b)?;
    let mut out = gpu.alloc_poisoned::<f32>(n)?;
    for name in selected {
        let version = Version::from_name(name).expect("selected from Version::ALL");
        let run = RunVersion {
            name,
            kernel: Some((day.kernel(version), day.shape(version, n))),
            global_bytes: None,
        };
        session.run_version(run, &mut out, &expected, |out| {
            day.launch(&gpu, version, &a_dev, &b_dev, out)
        })?;
    }
    let report = session.finish();
    common::cli::finish_reports(&args.common, &[report])
}
