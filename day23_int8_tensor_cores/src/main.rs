//! `cargo run --release -p day23`: cuBLASLt and each INT8 tensor-core GEMM version on the day's
//! problems (4096^3 and 8192^3 int8 -> int32, and 4096^3 with per-channel zero points and
//! scales -> bf16), checked against exact CPU references and timed.

use std::process::ExitCode;

use anyhow::Result;
use clap::{Parser, ValueEnum};
use common::cli::{CommonArgs, bytes_for, check_host_fits, finish_reports, run_main};
use common::element::as_type_mut;
use common::measure::report::DayReport;
use common::session::{Expected, Problem, Refused, Session, Version as RunVersion};
use common::{Gpu, Tolerance, UsageError, measure::inputs};
use day23::cublaslt::CublasLtInt8;
use day23::problem::{self, DeviceOperands, Quant, Shape};
use day23::{Int8Gemm, Out, OutElement, Version, check_k};
use half::bf16;

/// Day 23: INT8 GEMM on tensor cores, C = (A - za)(B - zb)^T exact in int32 (B stored
/// [n, k]), or scale_a scale_b C in bf16.
#[derive(Parser)]
#[command(version, about)]
struct Args {
    /// A square problem m = n = k = SIZE, instead of the day's default problems.
    #[arg(long, conflicts_with_all = ["m", "n", "k"])]
    size: Option<usize>,
    /// Rows of A and C (with --n and --k).
    #[arg(long, requires_all = ["n", "k"])]
    m: Option<usize>,
    /// Rows of B (output channels), columns of C.
    #[arg(long, requires_all = ["m", "k"])]
    n: Option<usize>,
    /// The length of each dot product (a multiple of 16).
    #[arg(long, requires_all = ["m", "n"])]
    k: Option<usize>,
    /// The output of a --size / --m problem: exact int32, or scaled to bf16.
    #[arg(long, value_enum, default_value_t = OutArg::S32)]
    out: OutArg,
    /// Zero point of A (per tensor, int8 range).
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    za: i32,
    /// Zero point of B (per tensor, int8 range; see --per-channel).
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    zb: i32,
    /// B's zero points and scales per output channel (random, from --seed) instead of --zb.
    #[arg(long)]
    per_channel: bool,
    #[command(flatten)]
    common: CommonArgs,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum OutArg {
    S32,
    Bf16,
}

/// The ceiling row.
const CUBLASLT: &str = "cublaslt";

fn main() -> ExitCode {
    run_main(|| run(common::cli::parse_args(&kernel_names())))
}

/// Every version `--kernel` can name, in table order (`--help` lists them).
fn kernel_names() -> Vec<&'static str> {
    let mut names = vec![CUBLASLT];
    names.extend(Version::ALL.iter().map(|v| v.name()));
    names
}

/// The problems to run, each checked before anything is allocated.
fn problems(args: &Args) -> Result<Vec<(Shape, Out, Quant)>> {
    let one = if let Some(s) = args.size {
        Some(Shape::square(s))
    } else if let (Some(m), Some(n), Some(k)) = (args.m, args.n, args.k) {
        Some(Shape { m, n, k })
    } else {
        None
    };
    let problems = match one {
        Some(shape) => {
            shape.validate()?;
            let quant = if args.per_channel {
                Quant::per_channel(args.za, shape.n, args.common.seed.wrapping_add(3))
            } else {
                Quant::per_tensor(args.za, args.zb)
            };
            let out = match args.out {
                OutArg::S32 => Out::S32,
                OutArg::Bf16 => Out::Bf16,
            };
            vec![(shape, out, quant)]
        }
        None => {
            if args.za != 0 || args.zb != 0 || args.per_channel || args.out != OutArg::S32 {
                return Err(UsageError::new(
                    "--za, --zb, --per-channel and --out choose one problem: give --size or \
                     --m --n --k with them",
                )
                .into());
            }
            // torch._int_mm's problem (square int8 in, int32 out), and a quantized linear
            // layer's: per-channel weight zero points and scales, bf16 out.
            let s = Shape::square(4096);
            vec![
                (s, Out::S32, Quant::none()),
                (Shape::square(8192), Out::S32, Quant::none()),
                (
                    s,
                    Out::Bf16,
                    Quant::per_channel(-3, s.n, args.common.seed.wrapping_add(3)),
                ),
            ]
        }
    };
    for (shape, _, quant) in &problems {
        shape.validate()?;
        quant.validate(shape.n)?;
        check_k(shape.k, quant.has_zero_points())?;
    }
    Ok(problems)
}

fn run(args: Args) -> Result<()> {
    let selected = args.common.select_versions(&kernel_names())?;
    let problems = problems(&args)?;
    for (s, out, _) in &problems {
        // A, B, C as downloaded, and the reference (f64 plus the i64 it came from) of at most
        // every output.
        let what = format!("{} x {} x {}", s.m, s.n, s.k);
        let c = bytes_for(&what, (s.m * s.n) as u64, 4 + 24)?;
        check_host_fits(&what, s.bytes(*out) + c)?;
    }
    let gpu = args.common.open_gpu()?;
    for (s, out, _) in &problems {
        gpu.check_fits(&format!("{} x {} x {}", s.m, s.n, s.k), s.bytes(*out))?;
    }
    let day = Int8Gemm::load(&gpu)?;
    let cublaslt = if selected.contains(&CUBLASLT) {
        Some(CublasLtInt8::open(&gpu)?)
    } else {
        None
    };
    let mut reports = Vec::new();
    for (shape, out, quant) in &problems {
        let ctx = Context {
            gpu: &gpu,
            day: &day,
            cublaslt: cublaslt.as_ref(),
            args: &args,
            selected: &selected,
        };
        reports.push(match out {
            Out::S32 => run_problem::<i32>(&ctx, shape, quant)?,
            Out::Bf16 => run_problem::<bf16>(&ctx, shape, quant)?,
        });
    }
    finish_reports(&args.common, &reports)
}

struct Context<'a> {
    gpu: &'a Gpu,
    day: &'a Int8Gemm,
    cublaslt: Option<&'a CublasLtInt8>,
    args: &'a Args,
    selected: &'a [&'a str],
}

fn run_problem<T: OutElement>(ctx: &Context, shape: &Shape, quant: &Quant) -> Result<DayReport> {
    let gpu = ctx.gpu;
    let seed = ctx.args.common.seed;
    let Shape { m, n, k } = *shape;
    let a: Vec<i8> = inputs::uniform(m * k, -128.0, 127.0, seed.wrapping_add(10));
    let b: Vec<i8> = inputs::uniform(n * k, -128.0, 127.0, seed.wrapping_add(11));
    let sampled = problem::checked_outputs(shape, seed.wrapping_add(12));
    let all: Vec<usize>;
    let at: &[usize] = match &sampled {
        Some(at) => at,
        None => {
            all = (0..m * n).collect();
            &all
        }
    };
    let (values, tolerance) = match T::OUT {
        Out::S32 => (
            problem::reference_s32(&a, &b, quant, shape, at)
                .into_iter()
                .map(|v| v as f64)
                .collect::<Vec<f64>>(),
            Tolerance::new(0.0, 0.0),
        ),
        Out::Bf16 => (
            problem::reference_bf16(&a, &b, quant, shape, at),
            problem::bf16_tolerance(),
        ),
    };
    let out_shape = [m, n];
    let expected = Expected {
        values: &values,
        shape: &out_shape,
        tolerance,
        at: sampled.as_deref(),
    };
    let checked = match &sampled {
        None => "every output checked".to_string(),
        Some(at) => format!("{} sampled outputs checked", at.len()),
    };
    let mut session = Session::new(
        gpu,
        &ctx.args.common,
        Problem {
            day: "day23",
            title: "INT8 tensor-core GEMM",
            description: format!(
                "{m} x {n} x {k} (m x n x k), C = A B^T (A [m, k], B [n, k] int8), {} ({checked})",
                quant.describe(T::OUT)
            ),
            key: shape.key(T::OUT, quant),
            bytes_per_run: shape.bytes(T::OUT),
            flops_per_run: Some(shape.ops()),
        },
    )?
    .with_ceiling(CUBLASLT);
    session.save_input("a", &[m, k], &a)?;
    session.save_input("b", &[n, k], &b)?;
    session.save_input("zb", &[quant.zb.len()], &quant.zb)?;
    session.save_input("scale_a", &[1], &[quant.scale_a])?;
    session.save_input("scale_b", &[quant.scale_b.len()], &quant.scale_b)?;
    if sampled.is_none() {
        session.save_reference(&out_shape, &values)?;
    }
    let mut ops = DeviceOperands::upload(gpu, *shape, &a, &b, quant)?;
    drop((a, b));
    let mut c = gpu.alloc_poisoned::<T>(m * n)?;

    if ctx.selected.contains(&CUBLASLT) {
        match (ctx.cublaslt, T::OUT, quant.has_zero_points()) {
            (Some(lt), Out::S32, false) => match lt.plan(m, n, k) {
                Ok(plan) => {
                    let run = RunVersion {
                        name: CUBLASLT,
                        kernel: None,
                        global_bytes: None,
                    };
                    session.run_version(run, &mut c, &expected, |c| {
                        let c = as_type_mut::<T, i32>(c).expect("Out::S32 is i32");
                        lt.run(gpu, &plan, &ops.a, &ops.b, c)
                    })?;
                }
                Err(e) if e.is::<Refused>() => session.skip_version(CUBLASLT, &e.to_string()),
                Err(e) => return Err(e),
            },
            _ => session.skip_version(
                CUBLASLT,
                "computes the plain int32 A B^T: no zero points, no scaled bf16 output",
            ),
        }
    }
    for &name in ctx.selected.iter().filter(|&&n| n != CUBLASLT) {
        let version = Version::from_name(name).expect("selected from Version::ALL");
        let (kernel, launch) = match ctx.day.plan(version, T::OUT, shape) {
            Ok(plan) => plan,
            Err(e) if e.is::<Refused>() => {
                session.skip_version(name, &e.to_string());
                continue;
            }
            Err(e) => return Err(e),
        };
        let run = RunVersion {
            name,
            kernel: Some((kernel, launch)),
            global_bytes: None,
        };
        session.run_version(run, &mut c, &expected, |c| {
            ctx.day.run(gpu, version, &mut ops, c)
        })?;
    }
    Ok(session.finish())
}
