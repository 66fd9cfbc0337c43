//! `cargo run --release -p day22`: every top-k version on the three default problems (or
//! `--rows --width --k`), checked bit for bit against the CPU reference, timed, one table each.

use anyhow::Result;
use clap::{Parser, ValueEnum};
use common::cli::{CommonArgs, check_host_fits, finish_reports, run_main};
use common::measure::report::DayReport;
use common::reference::topk::{self as reference, TopkValue};
use common::session::{Problem, Refused, Session, Version};
use common::{Gpu, measure::inputs, sizes};
use day22::{Shape, TopK, VERSIONS};
use half::bf16;

/// Day 22: per-row top-k values and indices (descending; ties to the lower column; NaN above
/// +inf; -0.0 below +0.0).
#[derive(Parser)]
#[command(version, about)]
struct Args {
    /// Rows (with --width and --k, replaces the three default problems).
    #[arg(long, requires_all = ["width", "k"], value_parser = sizes::positive)]
    rows: Option<usize>,
    /// Elements per row, at most 1048576.
    #[arg(long, requires_all = ["rows", "k"], value_parser = sizes::positive)]
    width: Option<usize>,
    /// How many of each row's largest to return, at most 1024 and at most --width.
    #[arg(long, requires_all = ["rows", "width"], value_parser = sizes::positive)]
    k: Option<usize>,
    /// Storage type of the input and the values (with --rows).
    #[arg(long, value_enum, default_value_t = Dtype::F32)]
    dtype: Dtype,
    #[command(flatten)]
    common: CommonArgs,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug, ValueEnum)]
enum Dtype {
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
const DEFAULT_PROBLEMS: [(usize, usize, usize, Dtype); 3] = [
    (4096, 32768, 64, Dtype::F32),
    (64, 128_256, 50, Dtype::Bf16),
    (16, 1 << 20, 1024, Dtype::F32),
];

fn main() -> std::process::ExitCode {
    run_main(|| run(common::cli::parse_args(&kernel_names())))
}

/// Every version `--kernel` can name, in table order (`--help` lists them).
fn kernel_names() -> Vec<&'static str> {
    VERSIONS.to_vec()
}

fn run(args: Args) -> Result<()> {
    let versions = args.common.select_versions(VERSIONS)?;
    let requested: Vec<(usize, usize, usize, Dtype)> = match (args.rows, args.width, args.k) {
        (Some(rows), Some(width), Some(k)) => vec![(rows, width, k, args.dtype)],
        _ => DEFAULT_PROBLEMS.to_vec(),
    };
    // Every size is checked here, before the GPU is opened.
    let mut problems = Vec::with_capacity(requested.len());
    for &(rows, width, k, dtype) in &requested {
        let shape = Shape::new(rows, width, k)?;
        let what = format!("{rows} x {width}, k {k}");
        // The input; the reference's (key, column) pairs of one row; indices and values of the
        // reference and of one download.
        let host = sizes::sum(
            &what,
            &[
                sizes::product(&what, &[shape.elements(), dtype.size()])?,
                sizes::product(&what, &[width, 8])?,
                sizes::product(&what, &[shape.outputs(), 2 * (4 + dtype.size())])?,
            ],
        )?;
        check_host_fits(&what, host as u64)?;
        problems.push((shape, dtype, shape.bytes_per_run(dtype.size())));
    }
    let gpu = args.common.open_gpu()?;
    for (shape, _, bytes) in &problems {
        let what = format!("{} x {}, k {}", shape.rows, shape.width, shape.k);
        gpu.check_fits(&what, *bytes)?;
    }
    let day = TopK::load(&gpu)?;
    let mut reports = Vec::new();
    for &(shape, dtype, _) in &problems {
        let report = match dtype {
            Dtype::F32 => problem::<f32>(&gpu, &day, &args.common, &versions, shape)?,
            Dtype::Bf16 => problem::<bf16>(&gpu, &day, &args.common, &versions, shape)?,
        };
        reports.push(report);
    }
    finish_reports(&args.common, &reports)
}

fn problem<T: TopkValue>(
    gpu: &Gpu,
    day: &TopK,
    common: &CommonArgs,
    versions: &[&str],
    shape: Shape,
) -> Result<DayReport> {
    // Logits: uniform in [-4, 4) with rare outliers of 20 to 60, as a sampler sees them; in
    // bf16 (8 bits of mantissa) many values repeat, so the top k of a long row has ties.
    let x: Vec<T> = inputs::logits(shape.elements(), common.seed);
    let expected_indices = reference::top_k_indices(&x, shape.width, shape.k);
    let expected_values = reference::gather(&x, shape.width, shape.k, &expected_indices);
    let mut session = Session::new(
        gpu,
        common,
        Problem {
            day: "day22",
            title: "topk",
            description: format!(
                "{} x {}, k {}, {}",
                shape.rows,
                shape.width,
                shape.k,
                T::NAME
            ),
            key: shape.key(T::NAME),
            bytes_per_run: shape.bytes_per_run(T::DTYPE.size()),
            flops_per_run: None,
        },
    )?;
    let out_shape = [shape.rows, shape.k];
    session.save_input("x", &[shape.rows, shape.width], &x)?;
    // The reference of the checked output, the values (the indices are checked beside them).
    let as_f64: Vec<f64> = expected_values.iter().map(|v| v.to_f64()).collect();
    session.save_reference(&out_shape, &as_f64)?;
    let x_dev = gpu.upload(&x)?;
    drop(x);
    let mut values = gpu.alloc_poisoned::<T>(shape.outputs())?;
    let mut indices = gpu.alloc_poisoned::<u32>(shape.outputs())?;
    for &name in versions {
        let mut plan = match day.plan::<T>(gpu, name, shape) {
            Ok(plan) => plan,
            Err(e) if e.is::<Refused>() => {
                session.skip_version(name, &e.to_string());
                continue;
            }
            Err(e) => return Err(e),
        };
        // Poisoned before the checked run; every later run writes the same indices, so one
        // the kernel never writes is still poison when they are read below.
        gpu.poison(&mut indices)?;
        let version = Version {
            name,
            kernel: Some((plan.kernel, plan.shape)),
            global_bytes: None,
        };
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
