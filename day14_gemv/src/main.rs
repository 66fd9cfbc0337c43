//! `cargo run --release -p day14`: check every GEMV version against the f64 reference on the
//! day's three shapes (or `--m --n`), time it, print the tables.

use anyhow::Result;
use clap::Parser;
use common::cli::{CommonArgs, check_host_fits, finish_reports, run_main};
use common::measure::report::DayReport;
use common::session::{Expected, Problem, Refused, Session, Version};
use common::{Gpu, measure::inputs, reference, sizes};
use day14::{DEFAULT_SHAPES, Gemv, VERSIONS};

/// Day 14: f32 GEMV, y = A x, A row-major m x n.
#[derive(Parser)]
#[command(version, about)]
struct Args {
    /// Rows of A (with --n, replaces the three default shapes).
    #[arg(long, requires = "n", value_parser = common::sizes::positive_u64)]
    m: Option<u64>,
    /// Columns of A (the length of x).
    #[arg(long, requires = "m", value_parser = common::sizes::positive_u64)]
    n: Option<u64>,
    #[command(flatten)]
    common: CommonArgs,
}

fn main() -> std::process::ExitCode {
    run_main(|| run(common::cli::parse_args(&kernel_names())))
}

/// Every version `--kernel` can name, in table order (`--help` lists them).
fn kernel_names() -> Vec<&'static str> {
    VERSIONS.to_vec()
}

/// The key peers and reports share: `gemv/f32/8192x8192`.
pub fn key(m: usize, n: usize) -> String {
    format!("gemv/f32/{m}x{n}")
}

/// Least traffic: A read once, x read once, y written once (x is read by every row, but after
/// the first it comes from L2; only A has to stream from HBM).
fn bytes_per_run(m: usize, n: usize) -> u64 {
    4 * (m as u64 * n as u64 + n as u64 + m as u64)
}

fn run(args: Args) -> Result<()> {
    let versions = args.common.select_versions(VERSIONS)?;
    let shapes: Vec<(u64, u64)> = match (args.m, args.n) {
        (Some(m), Some(n)) => vec![(m, n)],
        _ => DEFAULT_SHAPES
            .iter()
            .map(|&(m, n)| (m as u64, n as u64))
            .collect(),
    };
    // Every size is checked here, before the GPU is opened.
    let mut device_bytes = Vec::with_capacity(shapes.len());
    for &(m, n) in &shapes {
        let (m, n) = (m as usize, n as usize);
        let what = "--m x --n";
        let elements = sizes::product(what, &[m, n])?;
        // A and x as f32 on the host; y, its reference and magnitudes as f64.
        let host = sizes::sum(
            what,
            &[
                sizes::product(what, &[m, n, 4])?,
                sizes::product("--n", &[n, 4])?,
                sizes::product("--m", &[m, 3 * 8])?,
            ],
        )?;
        check_host_fits(&format!("{m} x {n}"), host as u64)?;
        // A, x, y and split_row's partial sums (m * n / 512): twice the least traffic.
        let traffic = sizes::sum(what, &[elements, n, m])?;
        device_bytes.push(sizes::product(what, &[traffic, 4, 2])? as u64);
    }
    let gpu = args.common.open_gpu()?;
    for (&(m, n), &device) in shapes.iter().zip(&device_bytes) {
        gpu.check_fits(&format!("{m} x {n}"), device)?;
    }
    let day = Gemv::load(&gpu)?;
    let mut reports = Vec::new();
    for &(m, n) in &shapes {
        reports.push(problem(
            &gpu,
            &day,
            &args.common,
            &versions,
            m as usize,
            n as usize,
        )?);
    }
    finish_reports(&args.common, &reports)
}

fn problem(
    gpu: &Gpu,
    day: &Gemv,
    common: &CommonArgs,
    versions: &[&str],
    m: usize,
    n: usize,
) -> Result<DayReport> {
    let a: Vec<f32> = inputs::uniform(m * n, -1.0, 1.0, common.seed);
    let x: Vec<f32> = inputs::uniform(n, -1.0, 1.0, common.seed.wrapping_add(1));
    let (reference, magnitudes) = reference::gemv::gemv(&a, &x, m, n);
    let max_magnitude = magnitudes.iter().copied().fold(0.0, f64::max);
    let mut session = Session::new(
        gpu,
        common,
        Problem {
            day: "day14",
            title: "gemv",
            description: format!("{m} x {n}, f32"),
            key: key(m, n),
            bytes_per_run: bytes_per_run(m, n),
            flops_per_run: None,
        },
    )?;
    session.save_input("a", &[m, n], &a)?;
    session.save_input("x", &[n], &x)?;
    let a_dev = gpu.upload(&a)?;
    let x_dev = gpu.upload(&x)?;
    drop(a);
    let mut y = gpu.alloc_poisoned::<f32>(m)?;
    let out_shape = [m];
    for &name in versions {
        let mut plan = match day.plan(gpu, name, m, n) {
            Ok(plan) => plan,
            Err(e) if e.is::<Refused>() => {
                session.skip_version(name, &e.to_string());
                continue;
            }
            Err(e) => return Err(e),
        };
        let expected = Expected::full(&reference, &out_shape, plan.tolerance(max_magnitude));
        let version = Version {
            name,
            kernel: Some((plan.kernel, plan.shape)),
            global_bytes: None,
        };
        let launch = &mut plan.launch;
        session.run_version(version, &mut y, &expected, |y| launch(&a_dev, &x_dev, y))?;
    }
    session.save_reference(&out_shape, &reference)?;
    Ok(session.finish())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_count_a_x_and_y_once() {
        assert_eq!(bytes_per_run(8192, 8192), 4 * (8192 * 8192 + 2 * 8192));
        assert_eq!(key(64, 1 << 20), "gemv/f32/64x1048576");
    }
}
