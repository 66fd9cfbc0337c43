//! The day's run (`common::family::ops`): its flags, its three problems (copy and transpose
//! of one matrix, reversal of an array), and how each is checked bit for bit and timed.

use std::cell::OnceCell;
use std::rc::Rc;

use anyhow::{Context, Result};
use common::cli::bytes_for;
use common::family::ops::{Checked, OpList, OpsDay, Run, Selection};
use common::measure::report::DayReport;
use common::session::{Expected, Version};
use common::{Gpu, Tolerance, UsageError, measure::inputs, sizes};

use crate::{COPY_VERSION, DEFAULT_COLS, DEFAULT_ROWS, Day17, Reverse, Transpose, reference};

/// The day's flags beside the common ones.
#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub op: OpList,
    /// Rows and columns of the matrix to copy and transpose (default: 1 GiB of f32).
    #[arg(long, default_value_t = DEFAULT_ROWS, value_parser = sizes::positive_u64)]
    pub rows: u64,
    #[arg(long, default_value_t = DEFAULT_COLS, value_parser = sizes::positive_u64)]
    pub cols: u64,
    /// Length of the array to reverse (default 2^26: 256 MiB, far larger than L2).
    #[arg(long, default_value_t = 1 << 26, value_parser = sizes::positive_u64)]
    pub n: u64,
}

/// One problem of the run.
pub enum Problem {
    Copy(Matrix),
    Transpose(Matrix),
    Reverse { n: usize },
}

/// The matrix the copy and the transpose share: made once, by whichever runs first, and
/// freed when both are done.
pub struct Matrix {
    rows: usize,
    cols: usize,
    x: Rc<OnceCell<Vec<f32>>>,
}

impl Matrix {
    fn x(&self, seed: u64) -> &[f32] {
        self.x
            .get_or_init(|| inputs::uniform(self.rows * self.cols, -1.0, 1.0, seed))
    }
}

impl OpsDay for Day17 {
    common::day_header!("transpose");
    const OPS: &'static [&'static str] = &["copy", "transpose", "reverse"];
    type Args = Args;
    type Problem = Problem;

    fn versions(op: &str) -> &'static [&'static str] {
        match op {
            "copy" => &[COPY_VERSION],
            "transpose" => &Transpose::NAMES,
            _ => &Reverse::NAMES,
        }
    }

    /// In alphabetical order: reversal and transpose both have a `naive`, and `--kernel
    /// naive` runs both.
    fn kernel_names() -> Vec<&'static str> {
        let mut names: Vec<&str> = Self::OPS
            .iter()
            .flat_map(|op| Self::versions(op))
            .copied()
            .collect();
        names.sort_unstable();
        names.dedup();
        names
    }

    fn asked_ops(args: &Args) -> Vec<&str> {
        args.op.names()
    }

    fn problems(args: &Args, ops: &Selection) -> Result<Vec<Checked<Problem>>> {
        let (rows, cols) = (args.rows as usize, args.cols as usize);
        let x = Rc::new(OnceCell::new());
        let mut problems = Vec::new();
        for op in ["copy", "transpose"].into_iter().filter(|op| ops.runs(op)) {
            let what = "--rows x --cols";
            let elements = sizes::product(what, &[rows, cols])? as u64;
            // x and the output as f32, the f64 reference; x and the output on the GPU.
            let (host, device) = (
                bytes_for(what, elements, 16)?,
                bytes_for(what, elements, 8)?,
            );
            let matrix = Matrix {
                rows,
                cols,
                x: Rc::clone(&x),
            };
            let problem = match op {
                "copy" => Problem::Copy(matrix),
                _ => Problem::Transpose(matrix),
            };
            problems.push(Checked::new(op, what, host, device, problem)?);
        }
        let transposes = ops.versions("transpose");
        if let Some(first) = transposes.first() {
            let version = |name| Transpose::from_name(name).expect("a transpose version");
            if transposes
                .iter()
                .all(|&v| version(v).check_shape(rows, cols).is_err())
            {
                let why = version(first).check_shape(rows, cols).unwrap_err();
                return Err(UsageError::new(format!("no transpose version takes {why}")).into());
            }
        }
        if ops.runs("reverse") {
            let (host, device) = (bytes_for("--n", args.n, 16)?, bytes_for("--n", args.n, 8)?);
            let n = args.n as usize;
            problems.push(Checked::new(
                "reverse",
                "--n",
                host,
                device,
                Problem::Reverse { n },
            )?);
        }
        Ok(problems)
    }

    fn load(gpu: &Gpu) -> Result<Self> {
        Day17::load(gpu)
    }

    fn run(&self, run: &Run, problem: Problem) -> Result<DayReport> {
        match problem {
            Problem::Copy(m) => matrix(self, run, &m, false),
            Problem::Transpose(m) => matrix(self, run, &m, true),
            Problem::Reverse { n } => reverse(self, run, n),
        }
    }
}

fn as_f64(values: &[f32]) -> Vec<f64> {
    values.iter().map(|&v| f64::from(v)).collect()
}

/// The copy (`transpose` false: the ceiling the transposes are measured against) or the
/// transposes of one matrix.
fn matrix(day: &Day17, run: &Run, m: &Matrix, transpose: bool) -> Result<DayReport> {
    let (gpu, rows, cols) = (run.gpu, m.rows, m.cols);
    let x = m.x(run.seed());
    let n = x.len();
    let (op, want, out_shape) = if transpose {
        let want = as_f64(&reference::transpose(x, rows, cols));
        ("transpose", want, [cols, rows])
    } else {
        ("copy", as_f64(x), [rows, cols])
    };
    let expected = Expected::full(&want, &out_shape, Tolerance::EXACT);
    let mut session = run.session(run.problem(
        format!("{rows} x {cols}, f32, {op}"),
        format!("{op}/f32/{rows}x{cols}"),
        8 * n as u64,
    ))?;
    session.save_input("x", &[rows, cols], x)?;
    session.save_reference(&out_shape, &want)?;
    let x_dev = gpu.upload(x)?;
    let mut out = gpu.alloc_poisoned::<f32>(n)?;
    for &name in run.versions {
        let plan = if transpose {
            let version = Transpose::from_name(name).expect("a transpose");
            day.plan_transpose(version, rows, cols)
        } else {
            day.plan_copy(n)
        };
        let planned = session.plan_or_skip(name, plan);
        let Some(plan) = planned.with_context(|| format!("planning `{name}` for {op}"))? else {
            continue;
        };
        session.run_version(
            Version::of(name, plan.kernel, plan.shape),
            &mut out,
            &expected,
            |out| plan.launch(gpu, &x_dev, out),
        )?;
    }
    Ok(session.finish())
}

fn reverse(day: &Day17, run: &Run, n: usize) -> Result<DayReport> {
    let gpu = run.gpu;
    let x: Vec<f32> = inputs::uniform(n, -1.0, 1.0, run.seed().wrapping_add(1));
    let want = as_f64(&reference::reverse(&x));
    let shape = [n];
    let expected = Expected::full(&want, &shape, Tolerance::EXACT);
    let mut session = run.session(run.problem(
        format!("n = {n}, f32, reverse"),
        format!("reverse/f32/{n}"),
        8 * n as u64,
    ))?;
    session.save_input("x", &shape, &x)?;
    session.save_reference(&shape, &want)?;
    let x_dev = gpu.upload(&x)?;
    let mut out = gpu.alloc_poisoned::<f32>(n)?;
    for &name in run.versions {
        let version = Reverse::from_name(name).expect("a reversal version");
        let plan = day.plan_reverse(version, n);
        let planned = session.plan_or_skip(name, plan);
        let Some(plan) = planned.with_context(|| format!("planning `{name}` for reverse"))? else {
            continue;
        };
        let run_version = Version::of(name, plan.kernel, plan.shape);
        if version == Reverse::InplaceVec4 {
            // The check poisons the buffer, so the first launch copies x into it before
            // reversing it in place. The timed launches then reverse whatever the buffer
            // holds (x and its reverse in turn): the same work, without the copy.
            let mut first = true;
            session.run_version(run_version, &mut out, &expected, |out| {
                if std::mem::take(&mut first) {
                    gpu.stream.memcpy_dtod(&x_dev, out)?;
                }
                plan.launch_inplace(gpu, out)
            })?;
        } else {
            session.run_version(run_version, &mut out, &expected, |out| {
                plan.launch(gpu, &x_dev, out)
            })?;
        }
    }
    Ok(session.finish())
}
