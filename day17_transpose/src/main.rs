//! `cargo run --release -p day17`: matrix copy, transpose and array reversal, every version
//! checked bit for bit against the CPU, then timed.

use std::process::ExitCode;

use anyhow::Result;
use clap::Parser;
use common::cli::{CommonArgs, bytes_for, check_host_fits, finish_reports, run_main};
use common::measure::report::DayReport;
use common::reference::transpose as reference;
use common::session::{Expected, Problem, Refused, Session, Version as RunVersion};
use common::{Gpu, Tolerance, UsageError, measure::inputs, sizes};
use day17::{COPY_VERSION, Day17, Reverse, Transpose};

const OPS: &[&str] = &["copy", "transpose", "reverse"];
/// Data movement only: every value must arrive unchanged.
const EXACT: Tolerance = Tolerance::new(0.0, 0.0);

/// Day 17: matrix copy, transpose and array reversal, f32.
#[derive(Parser)]
#[command(version, about)]
struct Args {
    /// Which problems to run (comma-separated): copy, transpose, reverse. All by default.
    #[arg(long, value_delimiter = ',', value_name = "OP[,OP]")]
    op: Vec<String>,
    /// Rows and columns of the matrix to copy and transpose (default: 1 GiB of f32).
    #[arg(long, default_value_t = day17::DEFAULT_ROWS, value_parser = common::sizes::positive_u64)]
    rows: u64,
    #[arg(long, default_value_t = day17::DEFAULT_COLS, value_parser = common::sizes::positive_u64)]
    cols: u64,
    /// Length of the array to reverse (default 2^26: 256 MiB, far larger than L2).
    #[arg(long, default_value_t = 1 << 26, value_parser = common::sizes::positive_u64)]
    n: u64,
    #[command(flatten)]
    common: CommonArgs,
}

fn main() -> ExitCode {
    run_main(|| run(common::cli::parse_args(&kernel_names())))
}

/// Every version `--kernel` can name, in table order (`--help` lists them).
fn kernel_names() -> Vec<&'static str> {
    let mut names = vec![COPY_VERSION];
    names.extend(Transpose::ALL.iter().map(|v| v.name()));
    names.extend(Reverse::ALL.iter().map(|v| v.name()));
    // Reversal and transpose both have a `naive`: --kernel naive runs both.
    names.sort_unstable();
    names.dedup();
    names
}

fn run(args: Args) -> Result<()> {
    for op in &args.op {
        if !OPS.contains(&op.as_str()) {
            return Err(UsageError::new(format!(
                "there is no op `{op}` here; choose from: {}",
                OPS.join(", ")
            ))
            .into());
        }
    }
    let wants = |op: &str| args.op.is_empty() || args.op.iter().any(|o| o == op);
    args.common.select_versions(&kernel_names())?;
    let selected =
        |name: &str| args.common.kernel.is_empty() || args.common.kernel.iter().any(|k| k == name);

    // What runs: each op asked for with the versions --kernel leaves it.
    let copy = wants("copy") && selected(COPY_VERSION);
    let transposes: Vec<Transpose> = Transpose::ALL
        .into_iter()
        .filter(|v| wants("transpose") && selected(v.name()))
        .collect();
    let reversals: Vec<Reverse> = Reverse::ALL
        .into_iter()
        .filter(|v| wants("reverse") && selected(v.name()))
        .collect();
    for (op, runs, has) in [
        ("copy", copy, vec![COPY_VERSION]),
        (
            "transpose",
            !transposes.is_empty(),
            Transpose::ALL.iter().map(|v| v.name()).collect(),
        ),
        (
            "reverse",
            !reversals.is_empty(),
            Reverse::ALL.iter().map(|v| v.name()).collect(),
        ),
    ] {
        if args.op.iter().any(|o| o == op) && !runs {
            return Err(UsageError::new(format!(
                "--kernel {}: {op} has none of these versions; it has: {}",
                args.common.kernel.join(","),
                has.join(", ")
            ))
            .into());
        }
    }

    // Every size is checked here, before the GPU is opened.
    let (rows, cols, n) = (args.rows as usize, args.cols as usize, args.n as usize);
    let matrix = if copy || !transposes.is_empty() {
        let matrix = sizes::product("--rows x --cols", &[rows, cols])? as u64;
        // x and the output as f32, the f64 reference.
        check_host_fits(
            "--rows x --cols",
            bytes_for("--rows x --cols", matrix, 4 + 4 + 8)?,
        )?;
        Some(bytes_for("--rows x --cols", matrix, 8)?)
    } else {
        None
    };
    if !transposes.is_empty()
        && transposes
            .iter()
            .all(|v| v.check_shape(rows, cols).is_err())
    {
        let why = transposes[0].check_shape(rows, cols).unwrap_err();
        return Err(UsageError::new(format!("no transpose version takes {why}")).into());
    }
    let reverse = if reversals.is_empty() {
        None
    } else {
        check_host_fits("--n", bytes_for("--n", args.n, 4 + 4 + 8)?)?;
        Some(bytes_for("--n", args.n, 8)?)
    };

    let gpu = args.common.open_gpu()?;
    if let Some(bytes) = matrix {
        gpu.check_fits("--rows x --cols", bytes)?;
    }
    if let Some(bytes) = reverse {
        gpu.check_fits("--n", bytes)?;
    }
    let day = Day17::load(&gpu)?;
    let mut reports = Vec::new();
    if matrix.is_some() {
        let x: Vec<f32> = inputs::uniform(rows * cols, -1.0, 1.0, args.common.seed);
        if copy {
            reports.push(copy_problem(&gpu, &args.common, &day, &x, rows, cols)?);
        }
        if !transposes.is_empty() {
            reports.push(transpose_problem(
                &gpu,
                &args.common,
                &day,
                &x,
                rows,
                cols,
                &transposes,
            )?);
        }
    }
    if !reversals.is_empty() {
        reports.push(reverse_problem(&gpu, &args.common, &day, n, &reversals)?);
    }
    finish_reports(&args.common, &reports)
}

fn problem(key: String, description: String, bytes: u64) -> Problem {
    Problem {
        day: "day17",
        title: "transpose",
        description,
        key,
        bytes_per_run: bytes,
        flops_per_run: None,
    }
}

fn copy_problem(
    gpu: &Gpu,
    common: &CommonArgs,
    day: &Day17,
    x: &[f32],
    rows: usize,
    cols: usize,
) -> Result<DayReport> {
    let n = x.len();
    let want: Vec<f64> = x.iter().map(|&v| f64::from(v)).collect();
    let shape = [rows, cols];
    let expected = Expected::full(&want, &shape, EXACT);
    let mut session = Session::new(
        gpu,
        common,
        problem(
            format!("copy/f32/{rows}x{cols}"),
            format!("{rows} x {cols}, f32, copy"),
            8 * n as u64,
        ),
    )?;
    session.save_input("x", &shape, x)?;
    session.save_reference(&shape, &want)?;
    let x_dev = gpu.upload(x)?;
    let mut out = gpu.alloc_poisoned::<f32>(n)?;
    let run = RunVersion {
        name: COPY_VERSION,
        kernel: Some(day.copy_kernel(n)?),
        global_bytes: None,
    };
    session.run_version(run, &mut out, &expected, |out| day.copy(gpu, &x_dev, out))?;
    Ok(session.finish())
}

fn transpose_problem(
    gpu: &Gpu,
    common: &CommonArgs,
    day: &Day17,
    x: &[f32],
    rows: usize,
    cols: usize,
    versions: &[Transpose],
) -> Result<DayReport> {
    let n = x.len();
    let want: Vec<f64> = reference::transpose(x, rows, cols)
        .into_iter()
        .map(f64::from)
        .collect();
    let out_shape = [cols, rows];
    let expected = Expected::full(&want, &out_shape, EXACT);
    let mut session = Session::new(
        gpu,
        common,
        problem(
            format!("transpose/f32/{rows}x{cols}"),
            format!("{rows} x {cols}, f32, transpose"),
            8 * n as u64,
        ),
    )?;
    session.save_input("x", &[rows, cols], x)?;
    session.save_reference(&out_shape, &want)?;
    let x_dev = gpu.upload(x)?;
    let mut out = gpu.alloc_poisoned::<f32>(n)?;
    for &version in versions {
        let kernel = match day.transpose_kernel(version, rows, cols) {
            Ok(k) => k,
            Err(e) if e.is::<Refused>() => {
                session.skip_version(version.name(), &e.to_string());
                continue;
            }
            Err(e) => return Err(e),
        };
        let run = RunVersion {
            name: version.name(),
            kernel: Some(kernel),
            global_bytes: None,
        };
        session.run_version(run, &mut out, &expected, |out| {
            day.transpose(gpu, version, &x_dev, out, rows, cols)
        })?;
    }
    Ok(session.finish())
}

fn reverse_problem(
    gpu: &Gpu,
    common: &CommonArgs,
    day: &Day17,
    n: usize,
    versions: &[Reverse],
) -> Result<DayReport> {
    let x: Vec<f32> = inputs::uniform(n, -1.0, 1.0, common.seed.wrapping_add(1));
    let want: Vec<f64> = reference::reverse(&x).into_iter().map(f64::from).collect();
    let shape = [n];
    let expected = Expected::full(&want, &shape, EXACT);
    let mut session = Session::new(
        gpu,
        common,
        problem(
            format!("reverse/f32/{n}"),
            format!("n = {n}, f32, reverse"),
            8 * n as u64,
        ),
    )?;
    session.save_input("x", &shape, &x)?;
    session.save_reference(&shape, &want)?;
    let x_dev = gpu.upload(&x)?;
    let mut out = gpu.alloc_poisoned::<f32>(n)?;
    for &version in versions {
        let run = RunVersion {
            name: version.name(),
            kernel: Some(day.reverse_kernel(version, n)?),
            global_bytes: None,
        };
        if version == Reverse::InplaceVec4 {
            // The check poisons the buffer, so the first launch copies x into it before
            // reversing it in place. The timed launches then reverse whatever the buffer
            // holds (x and its reverse in turn): the same work, without the copy.
            let mut first = true;
            session.run_version(run, &mut out, &expected, |out| {
                if std::mem::take(&mut first) {
                    gpu.stream.memcpy_dtod(&x_dev, out)?;
                }
                day.reverse_inplace(gpu, out)
            })?;
        } else {
            session.run_version(run, &mut out, &expected, |out| {
                day.reverse(gpu, version, &x_dev, out)
            })?;
        }
    }
    Ok(session.finish())
}
