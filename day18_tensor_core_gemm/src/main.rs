//! `cargo run --release -p day18`: cuBLAS and every tensor-core GEMM version on the day's
//! problems (bf16 4096 and 8192, and an odd shape), checked against an f64 CPU reference and
//! timed; `--a` / `--b` choose how the operands are stored; `--sweep` plots TFLOP/s against
//! size beside torch.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use clap::{Parser, ValueEnum};
use common::cli::{CommonArgs, bytes_for, check_host_fits, finish_reports, run_main};
use common::dtype::Dtype;
use common::element::Element;
use common::family::matmul::SWEEP_SIZES;
use common::gpu::cublas::{Cublas, Stored};
use common::gpu::cublaslt::{CublasLt, LtProduct};
use common::measure::plot::LinePlot;
use common::measure::report::DayReport;
use common::reference::matmul as reference;
use common::session::{Expected, Problem, Refused, Session, Version as RunVersion};
use common::{Gpu, UsageError, measure::inputs, measure::sweep};
use day18::{GemmShape, Layout, TensorCoreGemm, Version, fp8};
use half::{bf16, f16};

/// Day 18: GEMM on tensor cores, C = op(A) op(B) (by default A B^T, B stored [n, k]), bf16
/// or f16.
#[derive(Parser)]
#[command(version, about)]
struct Args {
    /// A square problem m = n = k = SIZE, instead of the day's default problems.
    #[arg(long, conflicts_with_all = ["m", "n", "k"])]
    size: Option<usize>,
    /// Rows of A and C (with --n and --k).
    #[arg(long, requires_all = ["n", "k"])]
    m: Option<usize>,
    /// Columns of op(B) and of C.
    #[arg(long, requires_all = ["m", "k"])]
    n: Option<usize>,
    /// The length of each dot product.
    #[arg(long, requires_all = ["m", "n"])]
    k: Option<usize>,
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
    /// Square sizes 256 to 8192, plotted to --plot.
    #[arg(long, conflicts_with_all = ["size", "m", "n", "k"])]
    sweep: bool,
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

/// The ceiling row.
const CUBLAS: &str = "cublas";
/// The FP8 tables' ceiling row (selected with `cublas`).
const CUBLASLT: &str = "cublaslt";
/// The FP8 problems of the default run: the two square sizes the bf16 table leads with.
const FP8_DEFAULT_SIZES: [usize; 2] = [4096, 8192];
/// Outputs up to this many multiply-adds are all checked; beyond, a sample.
const FULL_CHECK_MACS: usize = 1 << 28;

fn main() -> ExitCode {
    run_main(|| run(common::cli::parse_args(&kernel_names())))
}

/// Every version `--kernel` can name, in table order (`--help` lists them).
fn kernel_names() -> Vec<&'static str> {
    let mut names = vec![CUBLAS];
    names.extend(Version::ALL.iter().map(|v| v.name()));
    names
}

fn problems(args: &Args) -> Result<Vec<GemmShape>> {
    let batch = args.batch;
    let layout = Layout {
        a: args.a.into(),
        b: args.b.into(),
    };
    let shapes = if args.sweep {
        SWEEP_SIZES.iter().map(|&s| GemmShape::square(s)).collect()
    } else if let Some(s) = args.size {
        vec![GemmShape::square(s)]
    } else if let (Some(m), Some(n), Some(k)) = (args.m, args.n, args.k) {
        vec![GemmShape {
            m,
            n,
            k,
            ..GemmShape::square(1)
        }]
    } else {
        // The two square sizes peers are usually quoted at, and an odd one whose k no
        // cp.async/TMA version takes.
        vec![
            GemmShape::square(4096),
            GemmShape::square(8192),
            GemmShape {
                m: 1000,
                n: 1001,
                k: 999,
                ..GemmShape::square(1)
            },
        ]
    };
    let shapes: Vec<GemmShape> = shapes
        .into_iter()
        .map(|s| GemmShape { batch, layout, ..s })
        .collect();
    for s in &shapes {
        if s.m == 0 || s.n == 0 || s.k == 0 || s.batch == 0 {
            return Err(UsageError::new("m, n, k and --batch must be at least 1").into());
        }
        if [s.m, s.n, s.k, s.batch]
            .iter()
            .any(|&d| d > i32::MAX as usize)
        {
            return Err(UsageError::new("dimensions must be below 2^31").into());
        }
        // batch x m x k and the rest: checked, before any of them is used.
        s.check_sizes(args.dtype)?;
    }
    Ok(shapes)
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
    let default_run = !args.sweep && args.size.is_none() && args.m.is_none();
    let fp8_shapes = if args.fp8 {
        problems(&args)?
    } else if default_run {
        FP8_DEFAULT_SIZES.map(GemmShape::square).to_vec()
    } else {
        Vec::new()
    };
    let shapes = if args.fp8 {
        Vec::new()
    } else {
        problems(&args)?
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
    let mut reports = Vec::new();
    let lt = if fp8_shapes.is_empty() || !selected.contains(&CUBLAS) {
        None
    } else {
        Some(CublasLt::open(&gpu)?)
    };
    for shape in &shapes {
        let report = match args.dtype {
            Dtype::Bf16 => run_problem::<bf16>(&gpu, &cublas, &day, &args, shape, &selected)?,
            Dtype::F16 => run_problem::<f16>(&gpu, &cublas, &day, &args, shape, &selected)?,
            other => unreachable!("{other} was refused before the GPU was opened"),
        };
        reports.push(report);
    }
    for shape in &fp8_shapes {
        reports.push(run_fp8_problem(
            &gpu,
            lt.as_ref(),
            &day,
            &args,
            shape,
            &selected,
        )?);
    }
    if args.sweep {
        plot_sweep(&args, &gpu, &reports)?;
    }
    finish_reports(&args.common, &reports)
}

/// The outputs checked: all of them for small problems; otherwise the edges and random
/// outputs of the first and the last product (`sample_outputs`), and in every product two
/// outputs of every 128 x 128 output tile (`tile_outputs`: a random one and the tile's last):
/// every tile of every version (128 x 128 for mma.sync, 128 x 256 for wgmma, whichever wave of
/// a persistent kernel computes it) is looked at.
fn checked_outputs(shape: &GemmShape, seed: u64) -> Option<Vec<usize>> {
    let GemmShape { m, n, k, batch, .. } = *shape;
    if batch * m * n * k <= FULL_CHECK_MACS {
        return None;
    }
    let one = reference::sample_outputs(m, n, reference::RANDOM_SAMPLES, seed);
    let mut at = one.clone();
    if batch > 1 {
        at.extend(one.iter().map(|i| i + (batch - 1) * m * n));
    }
    for z in 0..batch {
        let tiles = reference::tile_outputs(m, n, seed.wrapping_add(1 + z as u64));
        at.extend(tiles.iter().map(|i| i + z * m * n));
    }
    at.sort_unstable();
    at.dedup();
    Some(at)
}

fn run_problem<T: Element>(
    gpu: &Gpu,
    cublas: &Cublas,
    day: &TensorCoreGemm,
    args: &Args,
    shape: &GemmShape,
    selected: &[&str],
) -> Result<DayReport> {
    let seed = args.common.seed;
    let a: Vec<T> = inputs::uniform(shape.a_len(), -1.0, 1.0, seed);
    let b: Vec<T> = inputs::uniform(shape.b_len(), -1.0, 1.0, seed.wrapping_add(1));
    let at = checked_outputs(shape, seed.wrapping_add(2));
    let g = shape.gemm_ex();
    let expected_values = match &at {
        Some(at) => reference::gemm_ex_at(&a, &b, None, &g, at),
        None => reference::gemm_ex(&a, &b, None, &g),
    };
    let unit_roundoff = match T::DTYPE {
        Dtype::F16 => 2f64.powi(-11),
        _ => 2f64.powi(-8),
    };
    let out_shape = [shape.batch, shape.m, shape.n];
    let expected = Expected {
        values: &expected_values,
        shape: &out_shape,
        tolerance: reference::tolerance_stored_in(shape.k, unit_roundoff),
        at: at.as_deref(),
    };
    let checked = match &at {
        None => "every output checked".to_string(),
        Some(at) => format!("{} sampled outputs checked", at.len()),
    };
    let mut session = Session::new(
        gpu,
        &args.common,
        Problem {
            day: "day18",
            title: "tensor-core GEMM",
            description: format!("{} ({checked})", shape.describe(T::DTYPE)),
            key: shape.key(T::DTYPE),
            bytes_per_run: shape.min_bytes(T::DTYPE),
            flops_per_run: Some(shape.flops()),
        },
    )?
    .with_ceiling(CUBLAS);
    if args.sweep {
        session = session.quiet();
    }
    let (a_rows, a_cols) = if shape.layout.a_mn_major() {
        (shape.k, shape.m)
    } else {
        (shape.m, shape.k)
    };
    let (b_rows, b_cols) = if shape.layout.b_mn_major() {
        (shape.k, shape.n)
    } else {
        (shape.n, shape.k)
    };
    session.save_input("a", &[shape.batch, a_rows, a_cols], &a)?;
    session.save_input("b", &[shape.batch, b_rows, b_cols], &b)?;
    let (a_dev, b_dev) = (gpu.upload(&a)?, gpu.upload(&b)?);
    drop((a, b));
    let mut c = gpu.alloc_poisoned::<T>(shape.c_len())?;

    if selected.contains(&CUBLAS) {
        // The same layout (by default B stored [n, k]: the transposed right operand).
        let run = RunVersion {
            name: CUBLAS,
            kernel: None,
            global_bytes: None,
        };
        session.run_version(run, &mut c, &expected, |c| {
            cublas.gemm_ex::<T, T, _, _, _>(&g, &a_dev, &b_dev, c)
        })?;
    }
    for &name in selected.iter().filter(|&&n| n != CUBLAS) {
        let version = Version::from_name(name).expect("selected from Version::ALL");
        let (kernel, launch) = match day.plan::<T>(version, &g) {
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
            day.gemm(gpu, version, &g, &a_dev, &b_dev, c)
        })?;
    }
    Ok(session.finish())
}

/// One FP8 problem, `C (bf16) = A B^T` with A `[m, k]` and B `[n, k]` e4m3: cuBLASLt's FP8
/// GEMM (fast accumulation) as the ceiling, then the FP8 versions; checked like the bf16
/// problems (every output, or every 128 x 128 tile's samples) with [`fp8::tolerance`].
fn run_fp8_problem(
    gpu: &Gpu,
    lt: Option<&CublasLt>,
    day: &TensorCoreGemm,
    args: &Args,
    shape: &GemmShape,
    selected: &[&str],
) -> Result<DayReport> {
    let GemmShape { m, n, k, .. } = *shape;
    let seed = args.common.seed;
    let a = fp8::uniform_e4m3(m * k, seed);
    let b = fp8::uniform_e4m3(n * k, seed.wrapping_add(1));
    let at = checked_outputs(shape, seed.wrapping_add(2));
    let all: Vec<usize>;
    let outputs = match &at {
        Some(at) => at.as_slice(),
        None => {
            all = (0..m * n).collect();
            &all
        }
    };
    let expected_values = fp8::reference_at(&fp8::decode(&a), &fp8::decode(&b), n, k, 1.0, outputs);
    let out_shape = [1, m, n];
    let expected = Expected {
        values: &expected_values,
        shape: &out_shape,
        tolerance: fp8::tolerance(k),
        at: at.as_deref(),
    };
    let checked = match &at {
        None => "every output checked".to_string(),
        Some(at) => format!("{} sampled outputs checked", at.len()),
    };
    let mut session = Session::new(
        gpu,
        &args.common,
        Problem {
            day: "day18",
            title: "tensor-core GEMM",
            description: format!(
                "{m} x {n} x {k} (m x n x k), C = A B^T (A [m, k], B [n, k]), FP8 e4m3 in, f32 \
                 accumulation, bf16 out ({checked})"
            ),
            key: format!("gemm/e4m3/{m}x{n}x{k}"),
            bytes_per_run: ((m * k + n * k) + 2 * m * n) as u64,
            flops_per_run: Some(shape.flops()),
        },
    )?
    .with_ceiling(CUBLASLT);
    session.save_input("a", &[m, k], &a)?;
    session.save_input("b", &[n, k], &b)?;
    let (a_dev, b_dev) = (gpu.upload(&a)?, gpu.upload(&b)?);
    drop((a, b));
    let mut c = gpu.alloc_poisoned::<bf16>(m * n)?;
    let g = shape.gemm_ex();

    if let Some(lt) = lt {
        let run = RunVersion {
            name: CUBLASLT,
            kernel: None,
            global_bytes: None,
        };
        match lt.plan(LtProduct::E4m3ToBf16, m, n, k) {
            Ok(plan) => session.run_version(run, &mut c, &expected, |c| {
                lt.run_fp8(gpu, &plan, &a_dev, &b_dev, c, 1.0)
            })?,
            Err(e) if e.is::<Refused>() => session.skip_version(CUBLASLT, &e.to_string()),
            Err(e) => return Err(e),
        }
    }
    for version in Version::FP8 {
        if !selected.contains(&version.name()) {
            continue;
        }
        let (kernel, launch) = match day.plan_fp8(version, &g) {
            Ok(plan) => plan,
            Err(e) if e.is::<Refused>() => {
                session.skip_version(version.name(), &e.to_string());
                continue;
            }
            Err(e) => return Err(e),
        };
        let run = RunVersion {
            name: version.name(),
            kernel: Some((kernel, launch)),
            global_bytes: None,
        };
        session.run_version(run, &mut c, &expected, |c| {
            day.gemm_fp8(gpu, version, &g, &a_dev, &b_dev, c)
        })?;
    }
    Ok(session.finish())
}

/// TFLOP/s against size for each version and each peer, and the summary table.
fn plot_sweep(args: &Args, gpu: &Gpu, reports: &[DayReport]) -> Result<()> {
    let mut series = sweep::version_series(
        reports,
        sweep::row_versions(reports),
        sweep::last_dimension,
        |row| row.tflops,
    );
    series.extend(sweep::peer_series(
        reports,
        " (peer)",
        sweep::last_dimension,
        sweep::peer_tflops,
    ));
    let title = format!(
        "day18 tensor-core GEMM, {}, {}, {}",
        Layout {
            a: args.a.into(),
            b: args.b.into()
        }
        .describe(),
        args.dtype,
        gpu.info.name
    );
    let line_plot = LinePlot {
        title: &title,
        x_label: "m = n = k",
        y_label: "TFLOP/s (2 m n k)",
        log2_x: true,
        series: &series,
        hlines: &[],
    };
    sweep::publish(&args.plot, &line_plot, "size", "TFLOP/s", 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The sampled check looks at every output tile of every product, whatever the wave of a
    /// persistent kernel that computes it: 8192^2 is 64 x 32 = 2048 wgmma tiles (15.5 waves of
    /// 132 SMs), which 4096 random samples alone leave some of unchecked.
    #[test]
    fn the_sampled_check_covers_every_output_tile() {
        for shape in [
            GemmShape::square(8192),
            GemmShape {
                m: 1000,
                n: 3001,
                k: 999,
                batch: 3,
                layout: day18::Layout::NT,
            },
        ] {
            let at = checked_outputs(&shape, 7).expect("sampled at this size");
            let GemmShape { m, n, batch, .. } = shape;
            let (rows, cols) = (m.div_ceil(128), n.div_ceil(256));
            let mut seen = vec![false; batch * rows * cols];
            for &flat in &at {
                let (z, i, j) = (flat / (m * n), flat / n % m, flat % n);
                seen[(z * rows + i / 128) * cols + j / 256] = true;
            }
            let missing = seen.iter().filter(|s| !**s).count();
            assert_eq!(missing, 0, "{shape:?}: {missing} tiles never sampled");
            assert!(at.windows(2).all(|w| w[0] < w[1]), "sorted and unique");
        }
    }
}
