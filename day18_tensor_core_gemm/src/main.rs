//! `cargo run --release -p day18`: cuBLAS and every tensor-core GEMM version on the day's
//! problems (bf16 4096 and 8192, and an odd shape), checked against an f64 CPU reference and
//! timed; `--a` / `--b` choose how the operands are stored; `--sweep` plots TFLOP/s against
//! size beside torch.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use clap::{Parser, ValueEnum};
use common::UsageError;
use common::cli::{CommonArgs, GemmSizeArgs, bytes_for, check_host_fits, finish_reports, run_main};
use common::dtype::Dtype;
use common::gpu::cublas::{Cublas, Stored};
use common::gpu::cublaslt::CublasLt;
use day18::run::{CUBLAS, Runner, plot_sweep};
use day18::{GemmShape, Layout, TensorCoreGemm, Version};
use half::{bf16, f16};

/// Day 18: GEMM on tensor cores, C = op(A) op(B) (by default A B^T, B stored [n, k]), bf16
/// or f16.
#[derive(Parser)]
#[command(version, about)]
struct Args {
    #[command(flatten)]
    sizes: GemmSizeArgs,
    /// Independent products in one call (batched GEMM, operands back to back).
    #[arg(long, default_value_t = 1)]
    batch: usize,
    #[arg(long, value_enum, default_value_t = Dtype::Bf16)]
    dtype: Dtype,
    /// How A is stored: as-is ([m, k], K-major) or transposed ([k, m], M-major).
    #[arg(long, value_enum, default_value_t = StoredArg::AsIs)]
    a: StoredArg,
    /// How B is stored: as-is ([k, n], N-major) or transposed ([n, k], K-major: a linear
    /// layer's weight, the default).
    #[arg(long, value_enum, default_value_t = StoredArg::Transposed)]
    b: StoredArg,
    /// FP8 operands (e4m3, f32 accumulation, bf16 out): the FP8 versions beside cuBLASLt's FP8
    /// GEMM, layout nt only, instead of --dtype (the default run has both).
    #[arg(long, conflicts_with_all = ["sweep", "batch", "a", "b", "dtype"])]
    fp8: bool,
    /// Square sizes 1024 to 8192 in steps of 512, plotted to --plot.
    #[arg(long, conflicts_with_all = ["size", "m", "n", "k"])]
    sweep: bool,
    /// The linear layers of an 8B language model on 8192 tokens: m = 8192 with (n, k) =
    /// (4096, 4096), (14336, 4096), (4096, 14336) and (128256, 4096).
    #[arg(long, conflicts_with_all = ["size", "m", "n", "k", "sweep", "fp8"])]
    llm: bool,
    #[arg(long, default_value = "sweep.svg")]
    plot: PathBuf,
    #[command(flatten)]
    common: CommonArgs,
}

/// `common::gpu::cublas::Stored` on the command line.
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum StoredArg {
    AsIs,
    Transposed,
}

impl From<StoredArg> for Stored {
    fn from(s: StoredArg) -> Self {
        match s {
            StoredArg::AsIs => Stored::AsIs,
            StoredArg::Transposed => Stored::Transposed,
        }
    }
}

fn main() -> ExitCode {
    run_main(|| run(common::cli::parse_args(&kernel_names())))
}

/// Every version `--kernel` can name, in table order (`--help` lists them).
fn kernel_names() -> Vec<&'static str> {
    let mut names = vec![CUBLAS];
    names.extend(Version::NAMES);
    names
}

/// The problems of the flags, each checked before anything is allocated.
fn problems(args: &Args) -> Result<Vec<GemmShape>> {
    let shapes = if args.sweep {
        GemmShape::SWEEP_SIZES.map(GemmShape::square).to_vec()
    } else if args.llm {
        GemmShape::LLM.to_vec()
    } else if let Some((m, n, k)) = args.sizes.problem() {
        vec![GemmShape::rect(m as usize, n as usize, k as usize)]
    } else {
        GemmShape::DEFAULTS.to_vec()
    };
    let layout = layout(args);
    let shapes: Vec<GemmShape> = shapes
        .into_iter()
        .map(|s| GemmShape {
            batch: args.batch,
            layout,
            ..s
        })
        .collect();
    for s in &shapes {
        s.validate(args.dtype)?;
    }
    Ok(shapes)
}

fn layout(args: &Args) -> Layout {
    Layout {
        a: args.a.into(),
        b: args.b.into(),
    }
}

fn run(args: Args) -> Result<()> {
    if !matches!(args.dtype, Dtype::Bf16 | Dtype::F16) {
        return Err(UsageError::new(format!(
            "the tensor-core GEMM takes bf16 or f16, not {}",
            args.dtype
        ))
        .into());
    }
    let selected = args.common.select_versions(&kernel_names())?;
    let default_run = !args.sweep && !args.llm && !args.sizes.given();
    let (shapes, fp8_shapes) = if args.fp8 {
        (Vec::new(), problems(&args)?)
    } else if default_run {
        (problems(&args)?, GemmShape::FP8_DEFAULTS.to_vec())
    } else {
        (problems(&args)?, Vec::new())
    };
    let elem = args.dtype.size() as u64;
    for s in &shapes {
        let elements = s.a_len() as u64 + s.b_len() as u64 + s.c_len() as u64;
        check_host_fits(
            &s.describe(args.dtype),
            bytes_for("the matrices", elements, elem)?,
        )?;
    }
    let gpu = args.common.open_gpu()?;
    for s in &shapes {
        gpu.check_fits(&s.describe(args.dtype), s.min_bytes(args.dtype))?;
    }
    let cublas = Cublas::open(&gpu)?;
    let day = TensorCoreGemm::load(&gpu)?;
    let lt = if fp8_shapes.is_empty() || !selected.contains(&CUBLAS) {
        None
    } else {
        Some(CublasLt::open(&gpu)?)
    };
    let runner = Runner {
        gpu: &gpu,
        common: &args.common,
        day: &day,
        cublas: &cublas,
        lt: lt.as_ref(),
        selected: &selected,
        quiet: args.sweep,
    };
    let mut reports = Vec::new();
    for shape in &shapes {
        reports.push(match args.dtype {
            Dtype::Bf16 => runner.problem::<bf16>(shape)?,
            Dtype::F16 => runner.problem::<f16>(shape)?,
            other => unreachable!("{other} was refused before the GPU was opened"),
        });
    }
    for shape in &fp8_shapes {
        reports.push(runner.fp8_problem(shape)?);
    }
    if args.sweep {
        let sizes = shapes.iter().map(|s| s.k);
        plot_sweep(&args.plot, layout(&args), args.dtype, &gpu, &reports, sizes)?;
    }
    finish_reports(&args.common, &reports)
}
