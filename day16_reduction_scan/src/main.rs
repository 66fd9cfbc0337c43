//! `cargo run --release -p day16`: every reduction and scan version on its default problem,
//! checked against the f64 (or exact integer) reference, timed, one table per problem.

use anyhow::Result;
use clap::{Parser, ValueEnum};
use common::cli::{CommonArgs, bytes_for, check_host_fits, run_main};
use common::measure::report::DayReport;
use common::reference::reduce as reference;
use common::session::{Expected, Problem, Session, Version as RunVersion};
use common::{Gpu, UsageError, measure::inputs};
use day16::scan::{ScanElement, ScanReference, ScanScratch, quarter_inputs};
use day16::{
    CountVersion, DotVersion, FLOAT_RANGE, Reductions, ScanVersion, Scans, SegmentVersion,
    SumVersion, keys,
};

/// Day 16: sum, count, dot product, segment sum and the inclusive prefix sum.
#[derive(Parser)]
#[command(version, about)]
struct Args {
    /// Which problems to run (comma-separated); all by default.
    #[arg(long, value_enum, value_delimiter = ',')]
    problem: Vec<Which>,
    /// Elements of every problem (default 2^28: 1 GiB of f32, 20x the L2).
    #[arg(long, default_value_t = day16::DEFAULT_N, value_parser = common::sizes::positive_u64)]
    n: u64,
    /// Segment length of the segment sum; --n must be a multiple of it.
    #[arg(long, default_value_t = 4096, value_parser = common::sizes::positive_u64)]
    segment_len: u64,
    /// The value the count looks for (inputs are 1..=16, so about n / 16 match).
    #[arg(long, default_value_t = 7)]
    value: i32,
    #[command(flatten)]
    common: CommonArgs,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Which {
    Sum,
    Count,
    Dot,
    SegmentSum,
    Scan,
}

fn main() -> std::process::ExitCode {
    run_main(|| run(common::cli::parse_args(&kernel_names())))
}

/// Every version `--kernel` can name, in table order (`--help` lists them).
fn kernel_names() -> Vec<&'static str> {
    let mut names: Vec<&str> = SumVersion::ALL.iter().map(|v| v.name()).collect();
    names.extend(CountVersion::ALL.iter().map(|v| v.name()));
    names.extend(DotVersion::ALL.iter().map(|v| v.name()));
    names.extend(SegmentVersion::ALL.iter().map(|v| v.name()));
    names.extend(ScanVersion::ALL.iter().map(|v| v.name()));
    names
}

fn run(args: Args) -> Result<()> {
    let n = usize::try_from(args.n).map_err(|_| UsageError::new("--n is too large"))?;
    let segment_len = args.segment_len as usize;
    let run_all = args.problem.is_empty();
    let wants = |w: Which| run_all || args.problem.contains(&w);
    if wants(Which::SegmentSum) && !n.is_multiple_of(segment_len) {
        return Err(UsageError::new(format!(
            "--n {n} is not a whole number of segments of --segment-len {segment_len}"
        ))
        .into());
    }
    // The i32 scan's inputs go up to 4: its prefixes could reach 4 n.
    if wants(Which::Scan) && n > i32::MAX as usize / 4 {
        return Err(UsageError::new(format!(
            "--n {n}: the i32 scan's prefix sums (inputs up to 4) could overflow i32; --n must \
             be at most {}",
            i32::MAX / 4
        ))
        .into());
    }
    // An unknown --kernel is refused here, before the GPU is opened.
    let names = |versions: &[&'static str]| args.common.select_versions(versions).map(|_| ());
    if wants(Which::Sum) {
        names(&SumVersion::ALL.iter().map(|v| v.name()).collect::<Vec<_>>())?;
    }
    if wants(Which::Count) {
        names(
            &CountVersion::ALL
                .iter()
                .map(|v| v.name())
                .collect::<Vec<_>>(),
        )?;
    }
    if wants(Which::Dot) {
        names(&DotVersion::ALL.iter().map(|v| v.name()).collect::<Vec<_>>())?;
    }
    if wants(Which::SegmentSum) {
        names(
            &SegmentVersion::ALL
                .iter()
                .map(|v| v.name())
                .collect::<Vec<_>>(),
        )?;
    }
    if wants(Which::Scan) {
        names(
            &ScanVersion::ALL
                .iter()
                .map(|v| v.name())
                .collect::<Vec<_>>(),
        )?;
    }
    // The largest problem's buffers: two f32 inputs of the dot product, or a scan's input and
    // output; host: inputs, the f64 reference and |x| sums, the downloaded output, and the
    // scan's per-output bounds.
    bytes_for("--n", args.n, 8)?;
    check_host_fits("--n", bytes_for("--n", args.n, 4 + 8 + 8 + 4 + 8)?)?;

    let gpu = args.common.open_gpu()?;
    gpu.check_fits("--n", bytes_for("--n", args.n, 8)?)?;
    let reductions = Reductions::load(&gpu)?;
    let scans = Scans::load(&gpu)?;
    let seed = args.common.seed;
    let c = &args.common;

    let mut reports = Vec::new();
    if wants(Which::Sum) {
        reports.push(run_sum(&gpu, &reductions, c, n, seed)?);
    }
    if wants(Which::Count) {
        reports.push(run_count(&gpu, &reductions, c, n, args.value, seed)?);
    }
    if wants(Which::Dot) {
        reports.push(run_dot(&gpu, &reductions, c, n, seed)?);
    }
    if wants(Which::SegmentSum) {
        reports.push(run_segment_sum(&gpu, &reductions, c, n, segment_len, seed)?);
    }
    if wants(Which::Scan) {
        // Quarters of mean 0: every partial sum is an exact f32, so the f32 scan is checked
        // bit for bit too (see `day16::scan::quarter_inputs`).
        let x = quarter_inputs(n, seed);
        reports.push(run_scan(&gpu, &scans, c, &x)?);
        drop(x);
        // Integers -2..=4 (mean 1): exact, so every index is checked to the last element.
        let x: Vec<i32> = inputs::uniform(n, -2.49, 4.49, seed.wrapping_add(1));
        reports.push(run_scan(&gpu, &scans, c, &x)?);
    }
    common::cli::finish_reports(c, &reports)
}

fn problem(title: &'static str, description: String, key: String, bytes: u64) -> Problem {
    Problem {
        day: "day16",
        title,
        // The op leads the description: the index and the README tables name problems by it.
        description: format!("{title}, {description}"),
        key,
        bytes_per_run: bytes,
        flops_per_run: None,
    }
}

fn run_sum(gpu: &Gpu, day: &Reductions, c: &CommonArgs, n: usize, seed: u64) -> Result<DayReport> {
    let names: Vec<&str> = SumVersion::ALL.iter().map(|v| v.name()).collect();
    let selected = c.select_versions(&names)?;
    let x: Vec<f32> = inputs::uniform(n, FLOAT_RANGE.0, FLOAT_RANGE.1, seed);
    let (sum, abs) = (reference::sum(&x), reference::abs_sum(&x));
    let bytes = 4 * n as u64 + 4;
    let mut session = Session::new(
        gpu,
        c,
        problem("sum", format!("n = {n}, f32"), keys::sum(n), bytes),
    )?;
    session.save_input("x", &[n], &x)?;
    session.save_reference(&[1], &[sum])?;
    let x_dev = gpu.upload(&x)?;
    drop(x);
    let mut scratch = day.scratch(gpu, n)?;
    let mut out = gpu.alloc_poisoned::<f32>(1)?;
    for name in selected {
        let version = SumVersion::from_name(name).expect("selected from ALL");
        let tolerance = reference::covering_tolerance(&[sum], &[abs], day.sum_depth(version, n));
        let expected = Expected::full(std::slice::from_ref(&sum), &[1], tolerance);
        let (kernel, shape) = day.sum_plan(version, n);
        let run = RunVersion {
            name,
            kernel: Some((kernel, shape)),
            global_bytes: None,
        };
        session.run_version(run, &mut out, &expected, |out| {
            day.sum(gpu, version, &x_dev, out, &mut scratch)
        })?;
    }
    Ok(session.finish())
}

fn run_count(
    gpu: &Gpu,
    day: &Reductions,
    c: &CommonArgs,
    n: usize,
    value: i32,
    seed: u64,
) -> Result<DayReport> {
    let names: Vec<&str> = CountVersion::ALL.iter().map(|v| v.name()).collect();
    let selected = c.select_versions(&names)?;
    let x: Vec<i32> = inputs::uniform(n, 0.51, 16.49, seed.wrapping_add(2));
    let count = reference::count_equal(&x, value) as f64;
    let bytes = 4 * n as u64 + 4;
    let mut session = Session::new(
        gpu,
        c,
        problem(
            "count",
            format!("n = {n}, i32, elements equal to {value}"),
            keys::count(n),
            bytes,
        ),
    )?;
    session.save_input("x", &[n], &x)?;
    session.save_reference(&[1], &[count])?;
    let x_dev = gpu.upload(&x)?;
    drop(x);
    let mut scratch = day.scratch(gpu, 1)?;
    let mut out = gpu.alloc_poisoned::<u32>(1)?;
    let expected = Expected::full(std::slice::from_ref(&count), &[1], reference::EXACT);
    for name in selected {
        let version = CountVersion::from_name(name).expect("selected from ALL");
        let run = RunVersion {
            name,
            kernel: Some(day.count_plan(version, n)),
            global_bytes: None,
        };
        session.run_version(run, &mut out, &expected, |out| {
            day.count(gpu, version, &x_dev, value, out, &mut scratch)
        })?;
    }
    Ok(session.finish())
}

fn run_dot(gpu: &Gpu, day: &Reductions, c: &CommonArgs, n: usize, seed: u64) -> Result<DayReport> {
    let names: Vec<&str> = DotVersion::ALL.iter().map(|v| v.name()).collect();
    let selected = c.select_versions(&names)?;
    let a: Vec<f32> = inputs::uniform(n, FLOAT_RANGE.0, FLOAT_RANGE.1, seed.wrapping_add(3));
    let b: Vec<f32> = inputs::uniform(n, FLOAT_RANGE.0, FLOAT_RANGE.1, seed.wrapping_add(4));
    let (dot, abs) = reference::dot(&a, &b);
    let bytes = 8 * n as u64 + 4;
    let mut session = Session::new(
        gpu,
        c,
        problem("dot product", format!("n = {n}, f32"), keys::dot(n), bytes),
    )?;
    session.save_input("a", &[n], &a)?;
    session.save_input("b", &[n], &b)?;
    session.save_reference(&[1], &[dot])?;
    let (a_dev, b_dev) = (gpu.upload(&a)?, gpu.upload(&b)?);
    drop((a, b));
    let mut scratch = day.scratch(gpu, 1)?;
    let mut out = gpu.alloc_poisoned::<f32>(1)?;
    for name in selected {
        let version = DotVersion::from_name(name).expect("selected from ALL");
        let tolerance = reference::covering_tolerance(&[dot], &[abs], day.dot_depth(version, n));
        let expected = Expected::full(std::slice::from_ref(&dot), &[1], tolerance);
        let run = RunVersion {
            name,
            kernel: Some(day.dot_plan(version, n)),
            global_bytes: None,
        };
        session.run_version(run, &mut out, &expected, |out| {
            day.dot(gpu, version, &a_dev, &b_dev, out, &mut scratch)
        })?;
    }
    Ok(session.finish())
}

fn run_segment_sum(
    gpu: &Gpu,
    day: &Reductions,
    c: &CommonArgs,
    n: usize,
    len: usize,
    seed: u64,
) -> Result<DayReport> {
    let names: Vec<&str> = SegmentVersion::ALL.iter().map(|v| v.name()).collect();
    let selected = c.select_versions(&names)?;
    let segments = n / len;
    let x: Vec<f32> = inputs::uniform(n, FLOAT_RANGE.0, FLOAT_RANGE.1, seed.wrapping_add(5));
    let (sums, abs) = reference::segment_sums(&x, len);
    let bytes = 4 * (n + segments) as u64;
    let mut session = Session::new(
        gpu,
        c,
        problem(
            "segment sum",
            format!("{segments} segments x {len}, f32"),
            keys::segment_sum(segments, len),
            bytes,
        ),
    )?;
    session.save_input("x", &[segments, len], &x)?;
    session.save_reference(&[segments], &sums)?;
    let x_dev = gpu.upload(&x)?;
    drop(x);
    let mut out = gpu.alloc_poisoned::<f32>(segments)?;
    for name in selected {
        let version = SegmentVersion::from_name(name).expect("selected from ALL");
        let plan = match day.segment_plan(version, segments, len) {
            Ok(plan) => plan,
            Err(e) if e.is::<common::session::Refused>() => {
                session.skip_version(name, &e.to_string());
                continue;
            }
            Err(e) => return Err(e),
        };
        let tolerance = reference::covering_tolerance(&sums, &abs, day.segment_depth(version, len));
        let shape = [segments];
        let expected = Expected::full(&sums, &shape, tolerance);
        let run = RunVersion {
            name,
            kernel: Some(plan),
            global_bytes: None,
        };
        session.run_version(run, &mut out, &expected, |out| {
            day.segment_sum(gpu, version, &x_dev, len, out)
        })?;
    }
    Ok(session.finish())
}

fn run_scan<T: ScanElement>(gpu: &Gpu, day: &Scans, c: &CommonArgs, x: &[T]) -> Result<DayReport> {
    let names: Vec<&str> = ScanVersion::ALL.iter().map(|v| v.name()).collect();
    let selected = c.select_versions(&names)?;
    let n = x.len();
    let reference = ScanReference::new(x);
    let prefix = &reference.prefix;
    if T::DTYPE.is_integer() && prefix.iter().any(|p| p.abs() > i32::MAX as f64) {
        return Err(UsageError::new(format!(
            "--n {n}: the i32 prefix sums overflow i32; take a smaller --n"
        ))
        .into());
    }
    if reference.exact_len() == n {
        eprintln!("scan {}: every output must be exact", T::NAME);
    } else {
        eprintln!(
            "scan {}: the first {} outputs must be exact, the others each within its own bound",
            T::NAME,
            reference.exact_len()
        );
    }
    let bytes = 2 * 4 * n as u64;
    let mut session = Session::new(
        gpu,
        c,
        problem(
            "inclusive scan",
            format!("n = {n}, {}", T::NAME),
            keys::scan(T::NAME, n),
            bytes,
        ),
    )?;
    session.save_input("x", &[n], x)?;
    session.save_reference(&[n], prefix)?;
    let x_dev = gpu.upload(x)?;
    let mut scratch: ScanScratch<T> = day.scratch(gpu, n)?;
    let mut out = gpu.alloc_poisoned::<T>(n)?;
    for name in selected {
        let version = ScanVersion::from_name(name).expect("selected from ALL");
        let run = RunVersion {
            name,
            kernel: Some(day.plan::<T>(version, n)?),
            global_bytes: None,
        };
        let check = |got: &[T]| reference.check(got, version);
        session.run_version_checked(run, &mut out, &[n], check, |out| {
            day.scan(gpu, version, &x_dev, out, &mut scratch)
        })?;
    }
    Ok(session.finish())
}
