//! The day's run (`common::family::ops`, with one op): its flags, its three default problems
//! or the one `--rows --width --k` give, and how each version is checked bit for bit (values
//! and indices) and timed.

use anyhow::{Context, Result};
use clap::ValueEnum;
use common::family::ops::{Checked, OpsDay, Run, Selection};
use common::measure::report::DayReport;
use common::{Gpu, measure::inputs, sizes};
use half::bf16;

use crate::reference::{self, TopkValue};
use crate::{Shape, TopK, VERSIONS};

/// The day's flags beside the common ones.
#[derive(clap::Args)]
pub struct Args {
    /// Rows (with --width and --k, replaces the three default problems).
    #[arg(long, requires_all = ["width", "k"], value_parser = sizes::positive)]
    pub rows: Option<usize>,
    /// Elements per row, at most 1048576.
    #[arg(long, requires_all = ["rows", "k"], value_parser = sizes::positive)]
    pub width: Option<usize>,
    /// How many of each row's largest to return, at most 1024 and at most --width.
    #[arg(long, requires_all = ["rows", "width"], value_parser = sizes::positive)]
    pub k: Option<usize>,
    /// Storage type of the input and the values (with --rows).
    #[arg(long, value_enum, default_value_t = Dtype::F32)]
    pub dtype: Dtype,
}

/// The storage types the kernels take.
#[derive(Clone, Copy, PartialEq, Eq, Debug, ValueEnum)]
pub enum Dtype {
    F32,
    Bf16,
}

impl Dtype {
    fn size(self) -> usize {
        match self {
            Dtype::F32 => 4,
            Dtype::Bf16 => 2,
        }
    }
}

/// Many rows of a mid-size vocabulary (4096 rows of 32768, k 64), a batch of 64 over
/// Llama 3's 128256-token vocabulary in bf16 (top-50 sampling), and 16 rows of 1M with k 1024.
pub const DEFAULT_PROBLEMS: [(usize, usize, usize, Dtype); 3] = [
    (4096, 32768, 64, Dtype::F32),
    (64, 128_256, 50, Dtype::Bf16),
    (16, 1 << 20, 1024, Dtype::F32),
];

/// The day's one op.
const TOPK: &str = "topk";

impl OpsDay for TopK {
    common::day_header!("topk");
    const OPS: &'static [&'static str] = &[TOPK];
    type Args = Args;
    type Problem = (Shape, Dtype);

    fn versions(_: &str) -> &'static [&'static str] {
        VERSIONS
    }

    /// The day has no `--op`: it always runs top-k.
    fn asked_ops(_: &Args) -> Vec<&str> {
        Vec::new()
    }

    fn problems(args: &Args, _: &Selection) -> Result<Vec<Checked<(Shape, Dtype)>>> {
        let requested = match (args.rows, args.width, args.k) {
            (Some(rows), Some(width), Some(k)) => vec![(rows, width, k, args.dtype)],
            _ => DEFAULT_PROBLEMS.to_vec(),
        };
        let mut problems = Vec::with_capacity(requested.len());
        for (rows, width, k, dtype) in requested {
            let shape = Shape::new(rows, width, k)?;
            let what = format!("{rows} x {width}, k {k}");
            // The input; the reference's (key, column) pairs of one row; indices and values of
            // the reference and of one download.
            let host = sizes::sum(
                &what,
                &[
                    sizes::product(&what, &[shape.elements(), dtype.size()])?,
                    sizes::product(&what, &[width, 8])?,
                    sizes::product(&what, &[shape.outputs(), 2 * (4 + dtype.size())])?,
                ],
            )?;
            let device = shape.bytes_per_run(dtype.size());
            problems.push(Checked::new(
                TOPK,
                what,
                host as u64,
                device,
                (shape, dtype),
            )?);
        }
        Ok(problems)
    }

    fn load(gpu: &Gpu) -> Result<Self> {
        TopK::load(gpu)
    }

    fn run(&self, run: &Run, (shape, dtype): (Shape, Dtype)) -> Result<DayReport> {
        match dtype {
            Dtype::F32 => self.problem::<f32>(run, shape),
            Dtype::Bf16 => self.problem::<bf16>(run, shape),
        }
    }
}

impl TopK {
    fn problem<T: TopkValue>(&self, run: &Run, shape: Shape) -> Result<DayReport> {
        let gpu = run.gpu;
        // Logits: uniform in [-4, 4) with rare outliers of 20 to 60, as a sampler sees them;
        // in bf16 (8 bits of mantissa) many values repeat, so the top k of a long row has ties.
        let x: Vec<T> = inputs::logits(shape.elements(), run.seed());
        let expected_indices = reference::top_k_indices(&x, shape.width, shape.k);
        let expected_values = reference::gather(&x, shape.width, shape.k, &expected_indices);
        let (rows, width, k) = (shape.rows, shape.width, shape.k);
        let mut session = run.session(run.problem(
            format!("{rows} x {width}, k {k}, {}", T::NAME),
            shape.key(T::NAME),
            shape.bytes_per_run(T::DTYPE.size()),
        ))?;
        let out_shape = [rows, k];
        session.save_input("x", &[rows, width], &x)?;
        // The reference of the checked output, the values (the indices are checked beside
        // them).
        let as_f64: Vec<f64> = expected_values.iter().map(|v| v.to_f64()).collect();
        session.save_reference(&out_shape, &as_f64)?;
        let x_dev = gpu.upload(&x)?;
        drop(x);
        let mut values = gpu.alloc_poisoned::<T>(shape.outputs())?;
        let mut indices = gpu.alloc_poisoned::<u32>(shape.outputs())?;
        for &name in run.versions {
            let plan = self.plan::<T>(gpu, name, shape);
            let Some(mut plan) = session
                .plan_or_skip(name, plan)
                .with_context(|| format!("planning `{name}` for {TOPK}"))?
            else {
                continue;
            };
            // Poisoned before the checked run; every later run writes the same indices, so one
            // the kernel never writes is still poison when they are read below.
            gpu.poison(&mut indices)?;
            let version = plan.version(name);
            let launch = &mut plan.launch;
            session.run_version_checked(
                version,
                &mut values,
                &out_shape,
                |got| reference::compare_values(got, &expected_values, &out_shape),
                |values| launch(&x_dev, values, &mut indices),
            )?;
            let got = gpu.download(&indices)?;
            let check = reference::compare_indices(&got, &expected_indices, &out_shape);
            session.check_also(name, "indices", check);
        }
        Ok(session.finish())
    }
}
