//! The day's problems for the shared runner of multi-op days ([`common::family::ops`]): the
//! flags, the sizes checked before the GPU opens, and each op's run: its inputs, its f64
//! reference and every selected version, planned once for the problem's size and then run by
//! the session.

use anyhow::{Context, Result};
use clap::ValueEnum;
use common::cli::bytes_for;
use common::family::ops::{Checked, OpsDay, Run, Selection};
use common::measure::inputs;
use common::measure::report::DayReport;
use common::session::{Expected, Problem as Described, Session, Version};
use common::{Gpu, Kernel, LaunchShape, Tolerance, UsageError};

use crate::reduce::{self, CountVersion, DotVersion, Reductions, SegmentVersion, SumVersion};
use crate::scan::{ScanElement, ScanReference, ScanVersion, Scans, quarter_inputs};
use crate::{FLOAT_RANGE, keys, reference};

/// Day 16's flags.
#[derive(clap::Args)]
pub struct Args {
    /// Which problems to run (comma-separated); all by default.
    #[arg(long, value_enum, value_delimiter = ',')]
    problem: Vec<Which>,
    /// Elements of every problem (default 2^28: 1 GiB of f32, 20x the L2).
    #[arg(long, default_value_t = crate::DEFAULT_N, value_parser = common::sizes::positive_u64)]
    n: u64,
    /// Segment length of the segment sum; --n must be a multiple of it.
    #[arg(long, default_value_t = 4096, value_parser = common::sizes::positive_u64)]
    segment_len: u64,
    /// The value the count looks for (inputs are 1..=16, so about n / 16 match).
    #[arg(long, default_value_t = 7)]
    value: i32,
}

/// The ops, as `--problem` names them.
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Which {
    Sum,
    Count,
    Dot,
    SegmentSum,
    Scan,
}

impl Which {
    fn name(self) -> &'static str {
        match self {
            Which::Sum => "sum",
            Which::Count => "count",
            Which::Dot => "dot",
            Which::SegmentSum => "segment-sum",
            Which::Scan => "scan",
        }
    }
}

/// One problem of the day.
pub enum Problem {
    Sum {
        n: usize,
    },
    Count {
        n: usize,
        value: i32,
    },
    Dot {
        n: usize,
    },
    SegmentSum {
        n: usize,
        len: usize,
    },
    /// The f32 scan of quarters, then the i32 scan of integers -2..=4.
    ScanF32 {
        n: usize,
    },
    ScanI32 {
        n: usize,
    },
}

/// The day for the runner: both kernel files, loaded.
pub struct Day16 {
    reductions: Reductions,
    scans: Scans,
}

impl OpsDay for Day16 {
    const DAY: &'static str = "day16";
    /// Each problem is titled by its op instead.
    const TITLE: &'static str = "reduction and scan";
    const ABOUT: &'static str = env!("CARGO_PKG_DESCRIPTION");
    const OPS: &'static [&'static str] = &["sum", "count", "dot", "segment-sum", "scan"];
    type Args = Args;
    type Problem = Problem;

    fn versions(op: &str) -> &'static [&'static str] {
        match op {
            "sum" => &SumVersion::NAMES,
            "count" => &CountVersion::NAMES,
            "dot" => &DotVersion::NAMES,
            "segment-sum" => &SegmentVersion::NAMES,
            _ => &ScanVersion::NAMES,
        }
    }

    fn asked_ops(args: &Args) -> Vec<&str> {
        args.problem.iter().map(|w| w.name()).collect()
    }

    fn problems(args: &Args, ops: &Selection) -> Result<Vec<Checked<Problem>>> {
        let n = usize::try_from(args.n).map_err(|_| UsageError::new("--n is too large"))?;
        let len = args.segment_len as usize;
        if ops.runs("segment-sum") && !n.is_multiple_of(len) {
            return Err(UsageError::new(format!(
                "--n {n} is not a whole number of segments of --segment-len {len}"
            ))
            .into());
        }
        // The i32 scan's inputs go up to 4: its prefixes could reach 4 n.
        if ops.runs("scan") && n > i32::MAX as usize / 4 {
            return Err(UsageError::new(format!(
                "--n {n}: the i32 scan's prefix sums (inputs up to 4) could overflow i32; --n \
                 must be at most {}",
                i32::MAX / 4
            ))
            .into());
        }
        // The largest problem's buffers: two f32 inputs of the dot product, or a scan's input
        // and output; host: inputs, the f64 reference and |x| sums, the downloaded output, and
        // the scan's per-output bounds.
        let device = bytes_for("--n", args.n, 8)?;
        let host = bytes_for("--n", args.n, 4 + 8 + 8 + 4 + 8)?;
        let value = args.value;
        let problems = [
            ("sum", Problem::Sum { n }),
            ("count", Problem::Count { n, value }),
            ("dot", Problem::Dot { n }),
            ("segment-sum", Problem::SegmentSum { n, len }),
            ("scan", Problem::ScanF32 { n }),
            ("scan", Problem::ScanI32 { n }),
        ];
        problems
            .into_iter()
            .filter(|(op, _)| ops.runs(op))
            .map(|(op, problem)| Ok(Checked::new(op, "--n", host, device, problem)?))
            .collect()
    }

    fn load(gpu: &Gpu) -> Result<Self> {
        Ok(Self {
            reductions: Reductions::load(gpu)?,
            scans: Scans::load(gpu)?,
        })
    }

    fn run(&self, run: &Run, problem: Problem) -> Result<DayReport> {
        let day = &self.reductions;
        match problem {
            Problem::Sum { n } => sum(run, day, n),
            Problem::Count { n, value } => count(run, day, n, value),
            Problem::Dot { n } => dot(run, day, n),
            Problem::SegmentSum { n, len } => segment_sum(run, day, n, len),
            // Quarters of mean 0: every partial sum is an exact f32, so the f32 scan is
            // checked bit for bit too (see `quarter_inputs`).
            Problem::ScanF32 { n } => scan(run, &self.scans, &quarter_inputs(n, run.seed())),
            Problem::ScanI32 { n } => {
                // Integers -2..=4 (mean 1): exact, so every index is checked to the last
                // element.
                let x: Vec<i32> = inputs::uniform(n, -2.49, 4.49, run.seed().wrapping_add(1));
                scan(run, &self.scans, &x)
            }
        }
    }
}

/// The session of one problem, titled by its op.
fn session<'r>(
    run: &Run<'r>,
    title: &'static str,
    description: String,
    key: String,
    bytes: u64,
) -> Result<Session<'r>> {
    // The op leads the description: the index and the day's tables name problems by it.
    let mut problem: Described = run.problem(format!("{title}, {description}"), key, bytes);
    problem.title = title;
    run.session(problem)
}

fn version<'a>(name: &'a str, kernel: &'a Kernel, shape: LaunchShape) -> Version<'a> {
    Version {
        name,
        kernel: Some((kernel, shape)),
        global_bytes: None,
    }
}

/// One reduced value and the check of a version whose order rounds `depth` times.
fn one_output(value: &f64, tolerance: Tolerance) -> Expected<'_> {
    Expected::full(std::slice::from_ref(value), &[1], tolerance)
}

/// The sum of `n` floats of [`FLOAT_RANGE`].
fn sum(run: &Run, day: &Reductions, n: usize) -> Result<DayReport> {
    let gpu = run.gpu;
    let x: Vec<f32> = inputs::uniform(n, FLOAT_RANGE.0, FLOAT_RANGE.1, run.seed());
    let (sum, abs) = (reference::sum(&x), reference::abs_sum(&x));
    let bytes = 4 * n as u64 + 4;
    let key = keys::sum(n);
    let mut session = session(run, "sum", format!("n = {n}, f32"), key, bytes)?;
    session.save_input("x", &[n], &x)?;
    session.save_reference(&[1], &[sum])?;
    let x_dev = gpu.upload(&x)?;
    drop(x);
    let mut out = gpu.alloc_poisoned::<f32>(1)?;
    for &name in run.versions {
        let v = SumVersion::from_name(name).expect("one of the op's versions");
        let mut plan = day.plan_sum(gpu, v, n)?;
        let expected = one_output(&sum, reduce::tolerance(&[sum], &[abs], plan.depth));
        session.run_version(
            version(name, plan.kernel, plan.shape),
            &mut out,
            &expected,
            |out| plan.launch(gpu, &x_dev, out),
        )?;
    }
    Ok(session.finish())
}

/// How many of `n` integers 1..=16 equal `value`.
fn count(run: &Run, day: &Reductions, n: usize, value: i32) -> Result<DayReport> {
    let gpu = run.gpu;
    let x: Vec<i32> = inputs::uniform(n, 0.51, 16.49, run.seed().wrapping_add(2));
    let count = reference::count_equal(&x, value) as f64;
    let bytes = 4 * n as u64 + 4;
    let description = format!("n = {n}, i32, elements equal to {value}");
    let mut session = session(run, "count", description, keys::count(n), bytes)?;
    session.save_input("x", &[n], &x)?;
    session.save_reference(&[1], &[count])?;
    let x_dev = gpu.upload(&x)?;
    drop(x);
    let mut out = gpu.alloc_poisoned::<u32>(1)?;
    let expected = one_output(&count, Tolerance::EXACT);
    for &name in run.versions {
        let v = CountVersion::from_name(name).expect("one of the op's versions");
        let mut plan = day.plan_count(gpu, v, n)?;
        session.run_version(
            version(name, plan.kernel, plan.shape),
            &mut out,
            &expected,
            |out| plan.launch(gpu, &x_dev, value, out),
        )?;
    }
    Ok(session.finish())
}

/// The dot product of two vectors of `n` floats of [`FLOAT_RANGE`].
fn dot(run: &Run, day: &Reductions, n: usize) -> Result<DayReport> {
    let (gpu, seed) = (run.gpu, run.seed());
    let a: Vec<f32> = inputs::uniform(n, FLOAT_RANGE.0, FLOAT_RANGE.1, seed.wrapping_add(3));
    let b: Vec<f32> = inputs::uniform(n, FLOAT_RANGE.0, FLOAT_RANGE.1, seed.wrapping_add(4));
    let (dot, abs) = reference::dot(&a, &b);
    let bytes = 8 * n as u64 + 4;
    let key = keys::dot(n);
    let title = "dot product";
    let mut session = session(run, title, format!("n = {n}, f32"), key, bytes)?;
    session.save_input("a", &[n], &a)?;
    session.save_input("b", &[n], &b)?;
    session.save_reference(&[1], &[dot])?;
    let (a_dev, b_dev) = (gpu.upload(&a)?, gpu.upload(&b)?);
    drop((a, b));
    let mut out = gpu.alloc_poisoned::<f32>(1)?;
    for &name in run.versions {
        let v = DotVersion::from_name(name).expect("one of the op's versions");
        let mut plan = day.plan_dot(gpu, v, n)?;
        let expected = one_output(&dot, reduce::tolerance(&[dot], &[abs], plan.depth));
        session.run_version(
            version(name, plan.kernel, plan.shape),
            &mut out,
            &expected,
            |out| plan.launch(gpu, &a_dev, &b_dev, out),
        )?;
    }
    Ok(session.finish())
}

/// The sums of `n / len` segments of `len` floats of [`FLOAT_RANGE`].
fn segment_sum(run: &Run, day: &Reductions, n: usize, len: usize) -> Result<DayReport> {
    let gpu = run.gpu;
    let segments = n / len;
    let seed = run.seed().wrapping_add(5);
    let x: Vec<f32> = inputs::uniform(n, FLOAT_RANGE.0, FLOAT_RANGE.1, seed);
    let (sums, abs) = reference::segment_sums(&x, len);
    let bytes = 4 * (n + segments) as u64;
    let description = format!("{segments} segments x {len}, f32");
    let key = keys::segment_sum(segments, len);
    let mut session = session(run, "segment sum", description, key, bytes)?;
    session.save_input("x", &[segments, len], &x)?;
    session.save_reference(&[segments], &sums)?;
    let x_dev = gpu.upload(&x)?;
    drop(x);
    let mut out = gpu.alloc_poisoned::<f32>(segments)?;
    let shape = [segments];
    for &name in run.versions {
        let v = SegmentVersion::from_name(name).expect("one of the op's versions");
        let planned = day.plan_segment(v, segments, len);
        let Some(plan) = session
            .plan_or_skip(name, planned)
            .with_context(|| format!("planning `{name}` for segment sum"))?
        else {
            continue;
        };
        let expected = Expected::full(&sums, &shape, reduce::tolerance(&sums, &abs, plan.depth));
        session.run_version(
            version(name, plan.kernel, plan.shape),
            &mut out,
            &expected,
            |out| plan.launch(gpu, &x_dev, out),
        )?;
    }
    Ok(session.finish())
}

/// The inclusive scan of `x`, each output exact where the scan cannot round and otherwise
/// within its own bound ([`ScanReference`]).
fn scan<T: ScanElement>(run: &Run, day: &Scans, x: &[T]) -> Result<DayReport> {
    let gpu = run.gpu;
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
    let description = format!("n = {n}, {}", T::NAME);
    let key = keys::scan(T::NAME, n);
    let mut session = session(run, "inclusive scan", description, key, bytes)?;
    session.save_input("x", &[n], x)?;
    session.save_reference(&[n], prefix)?;
    let x_dev = gpu.upload(x)?;
    let mut out = gpu.alloc_poisoned::<T>(n)?;
    for &name in run.versions {
        let v = ScanVersion::from_name(name).expect("one of the op's versions");
        let mut plan = day.plan::<T>(gpu, v, n)?;
        let check = |got: &[T]| reference.check(got, v);
        session.run_version_checked(
            version(name, plan.kernel, plan.shape),
            &mut out,
            &[n],
            check,
            |out| plan.launch(gpu, &x_dev, out),
        )?;
    }
    Ok(session.finish())
}
