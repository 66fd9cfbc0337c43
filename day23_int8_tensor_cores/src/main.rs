//! `cargo run --release -p day23`: cuBLASLt and each INT8 tensor-core GEMM version on the day's
//! problems (4096^3 and 8192^3 int8 -> int32, and 4096^3 with per-channel zero points and
//! scales -> bf16), checked against exact CPU references and timed.

use std::process::ExitCode;

use anyhow::Result;
use clap::{Parser, ValueEnum};
use common::UsageError;
use common::cli::{CommonArgs, GemmSizeArgs, bytes_for, check_host_fits, finish_reports, run_main};
use day23::cublaslt::CublasLtInt8;
use day23::problem::{Quant, Shape};
use day23::run::{CUBLASLT, Runner};
use day23::{Int8Gemm, Out, Version, check_k};
use half::bf16;

/// Day 23: INT8 GEMM on tensor cores, C = (A - za)(B - zb)^T exact in int32 (B stored
/// [n, k]), or scale_a scale_b C in bf16.
#[derive(Parser)]
#[command(version, about)]
struct Args {
    #[command(flatten)]
    sizes: GemmSizeArgs,
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

fn main() -> ExitCode {
    run_main(|| run(common::cli::parse_args(&kernel_names())))
}

/// Every version `--kernel` can name, in table order (`--help` lists them).
fn kernel_names() -> Vec<&'static str> {
    let mut names = vec![CUBLASLT];
    names.extend(Version::NAMES);
    names
}

/// The problems to run, each checked before anything is allocated.
fn problems(args: &Args) -> Result<Vec<(Shape, Out, Quant)>> {
    let one = args.sizes.problem().map(|(m, n, k)| Shape {
        m: m as usize,
        n: n as usize,
        k: k as usize,
    });
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
    let runner = Runner {
        gpu: &gpu,
        common: &args.common,
        day: &day,
        cublaslt: cublaslt.as_ref(),
        selected: &selected,
    };
    let mut reports = Vec::new();
    for (shape, out, quant) in &problems {
        reports.push(match out {
            Out::S32 => runner.problem::<i32>(shape, quant)?,
            Out::Bf16 => runner.problem::<bf16>(shape, quant)?,
        });
    }
    finish_reports(&args.common, &reports)
}
