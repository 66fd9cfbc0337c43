//! `cargo run --release -p day15`: per-tensor INT8 quantization (symmetric int8, asymmetric
//! uint8), dequantization and the INT8 matmul, each version checked exactly against the CPU
//! reference, then timed.

use std::process::ExitCode;

use anyhow::{Result, bail};
use clap::Parser;
use common::cli::{CommonArgs, bytes_for, check_host_fits, finish_reports, run_main};
use common::measure::poison_check;
use common::measure::report::DayReport;
use common::reference::quantize::{self as qref, QuantParams};
use common::session::{Expected, Problem, Session, Version as RunVersion};
use common::{Element, Gpu, Tolerance, UsageError, measure::inputs, sizes};
use cudarc::driver::CudaSlice;
use day15::int8_matmul::{self, Int8Matmul, Shape};
use day15::quantize::{Quantize, Scheme, Version};

const OPS: &[&str] = &["quantize_sym", "quantize_asym", "dequantize", "int8_matmul"];
const DEQUANTIZE_VERSION: &str = "vec4";

/// Day 15: per-tensor INT8 quantization and an INT8 matmul.
#[derive(Parser)]
#[command(version, about)]
struct Args {
    /// Which problems to run (comma-separated): quantize_sym, quantize_asym, dequantize,
    /// int8_matmul. All by default.
    #[arg(long, value_delimiter = ',', value_name = "OP[,OP]")]
    op: Vec<String>,
    /// Rows of the tensor to quantize (its elements are rows x cols; the scale is per tensor).
    #[arg(long, default_value_t = day15::DEFAULT_ROWS, value_parser = common::sizes::positive_u64)]
    rows: u64,
    #[arg(long, default_value_t = day15::DEFAULT_COLS, value_parser = common::sizes::positive_u64)]
    cols: u64,
    /// INT8 matmul sizes: A is m x k, B is k x n (stored transposed), C is m x n int32.
    #[arg(long, default_value_t = 4096, value_parser = common::sizes::positive_u64)]
    m: u64,
    #[arg(long, default_value_t = 4096, value_parser = common::sizes::positive_u64)]
    n: u64,
    #[arg(long, default_value_t = 4096, value_parser = common::sizes::positive_u64)]
    k: u64,
    /// Zero points of A and B in the INT8 matmul (int8 range).
    #[arg(long, default_value_t = -3, allow_negative_numbers = true)]
    za: i32,
    #[arg(long, default_value_t = 7, allow_negative_numbers = true)]
    zb: i32,
    #[command(flatten)]
    common: CommonArgs,
}

fn main() -> ExitCode {
    run_main(|| run(common::cli::parse_args(&kernel_names())))
}

/// Every version `--kernel` can name, in table order (`--help` lists them).
fn kernel_names() -> Vec<&'static str> {
    let mut names: Vec<&str> = Version::ALL.iter().map(|v| v.name()).collect();
    names.push(DEQUANTIZE_VERSION);
    names.extend(int8_matmul::Version::ALL.iter().map(|v| v.name()));
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
    // --kernel names any version of any op; each problem runs those it has.
    args.common.select_versions(&kernel_names())?;
    let selected =
        |name: &str| args.common.kernel.is_empty() || args.common.kernel.iter().any(|k| k == name);

    // A --kernel choice must leave each op asked for something to run.
    let quantize_versions: Vec<&str> = Version::ALL.iter().map(|v| v.name()).collect();
    let matmul_versions: Vec<&str> = int8_matmul::Version::ALL.iter().map(|v| v.name()).collect();
    let versions_of = |op: &str| -> Vec<&str> {
        match op {
            "dequantize" => vec![DEQUANTIZE_VERSION],
            "int8_matmul" => matmul_versions.clone(),
            _ => quantize_versions.clone(),
        }
    };
    let runs = |op: &str| wants(op) && versions_of(op).iter().any(|v| selected(v));
    for op in &args.op {
        if !runs(op) {
            return Err(UsageError::new(format!(
                "--kernel {}: {op} has none of these versions; it has: {}",
                args.common.kernel.join(","),
                versions_of(op).join(", ")
            ))
            .into());
        }
    }
    let elementwise = ["quantize_sym", "quantize_asym", "dequantize"]
        .into_iter()
        .any(runs);

    // Every size is checked here, before the GPU is opened.
    if !(-128..=127).contains(&args.za) || !(-128..=127).contains(&args.zb) {
        bail!(UsageError::new(
            "--za and --zb must be in the int8 range -128..=127"
        ));
    }
    let (rows, cols) = (args.rows as usize, args.cols as usize);
    // The elements of the quantize problems (none when only the matmul runs).
    let n = if elementwise {
        sizes::product("--rows x --cols", &[rows, cols])?
    } else {
        0
    };
    if elementwise {
        // x (f32), q, y, the f64 reference and the check's index lists (two u64 per element).
        check_host_fits(
            "--rows x --cols",
            bytes_for("--rows x --cols", n as u64, 4 + 1 + 4 + 8 + 16)?,
        )?;
    }
    let shape = Shape {
        m: args.m as usize,
        n: args.n as usize,
        k: args.k as usize,
    };
    if runs("int8_matmul") {
        shape.validate()?;
        check_host_fits("--m --n --k", shape.host_bytes()?)?;
    }

    let gpu = args.common.open_gpu()?;
    if elementwise {
        // x, q and y of the elementwise problems at once.
        gpu.check_fits(
            "--rows x --cols",
            bytes_for("--rows x --cols", n as u64, 4 + 1 + 4)?,
        )?;
    }
    if runs("int8_matmul") {
        gpu.check_fits("--m --n --k", shape.bytes())?;
    }
    let day = Quantize::load(&gpu)?;
    let mut reports = Vec::new();
    let x: Vec<f32> = if elementwise {
        inputs::uniform(n, -3.0, 5.0, args.common.seed)
    } else {
        Vec::new()
    };

    for scheme in Scheme::ALL {
        let op = format!("quantize_{}", scheme.name());
        if !wants(&op) {
            continue;
        }
        let versions: Vec<Version> = Version::ALL
            .into_iter()
            .filter(|v| selected(v.name()))
            .collect();
        if versions.is_empty() {
            continue;
        }
        let report = match scheme {
            Scheme::Sym => {
                let (p, q) = qref::quantize_sym(&x);
                quantize_problem(
                    &gpu,
                    &args.common,
                    &day,
                    scheme,
                    &versions,
                    &x,
                    (rows, cols),
                    p,
                    &q,
                )?
            }
            Scheme::Asym => {
                let (p, q) = qref::quantize_asym(&x);
                quantize_problem(
                    &gpu,
                    &args.common,
                    &day,
                    scheme,
                    &versions,
                    &x,
                    (rows, cols),
                    p,
                    &q,
                )?
            }
        };
        reports.push(report);
    }
    if wants("dequantize") && selected(DEQUANTIZE_VERSION) {
        let (p, q) = qref::quantize_sym(&x);
        reports.push(dequantize_problem(
            &gpu,
            &args.common,
            &day,
            &q,
            (rows, cols),
            p,
        )?);
        let (p, q) = qref::quantize_asym(&x);
        reports.push(dequantize_problem(
            &gpu,
            &args.common,
            &day,
            &q,
            (rows, cols),
            p,
        )?);
    }
    if wants("int8_matmul") {
        let versions: Vec<int8_matmul::Version> = int8_matmul::Version::ALL
            .into_iter()
            .filter(|v| selected(v.name()))
            .collect();
        if !versions.is_empty() {
            reports.push(matmul_problem(&gpu, &args, shape, &versions)?);
        }
    }
    finish_reports(&args.common, &reports)
}

/// One quantize problem: every version against the exact reference `q` (checked twice where
/// a value equals the poison), and the scale it wrote.
#[allow(clippy::too_many_arguments)]
fn quantize_problem<Q: Element>(
    gpu: &Gpu,
    common: &CommonArgs,
    day: &Quantize,
    scheme: Scheme,
    versions: &[Version],
    x: &[f32],
    (rows, cols): (usize, usize),
    params: QuantParams,
    q: &[Q],
) -> Result<DayReport> {
    let n = x.len();
    let reference = qref::as_f64(q);
    let shape = [rows, cols];
    let split = poison_check::split::<Q>(&reference);
    let expected = Expected {
        values: &split.checked_values,
        shape: &shape,
        tolerance: Tolerance::new(0.0, 0.0),
        at: Some(&split.checked_at),
    };
    let mut session = Session::new(
        gpu,
        common,
        Problem {
            day: "day15",
            title: "int8 quantization",
            description: format!(
                "{rows} x {cols} f32 -> {} per tensor ({}), scale {:.6e}, zero point {}",
                scheme.storage(),
                scheme.name(),
                params.scale,
                params.zero_point
            ),
            key: format!("quantize_{}/f32/{rows}x{cols}", scheme.name()),
            // Least traffic: x read once, q written once. The reduction's extra read of x is
            // not counted: it is the price of a per-tensor scale (see the README).
            bytes_per_run: 5 * n as u64,
            flops_per_run: None,
        },
    )?;
    session.save_input("x", &shape, x)?;
    session.save_reference(&shape, &reference)?;
    let x_dev = gpu.upload(x)?;
    let mut out = gpu.alloc_poisoned::<Q>(n)?;
    let mut params_dev = gpu.alloc_poisoned::<f32>(2)?;
    for &version in versions {
        let mut plan = day.plan(gpu, scheme, version, n)?;
        let mut launch = |out: &mut CudaSlice<Q>| plan.launch(gpu, &x_dev, out, &mut params_dev);
        let unwritten =
            poison_check::verify_poison_valued(gpu, &mut out, &split.poison_valued, &mut launch)?;
        if unwritten > 0 {
            bail!(
                "{}: {unwritten} of the {} elements whose value is the poison were never written",
                version.name(),
                split.poison_valued.len()
            );
        }
        let (kernel, launch_shape) = plan.kernel();
        let run = RunVersion {
            name: version.name(),
            kernel: Some((kernel, launch_shape)),
            global_bytes: None,
        };
        session.run_version(run, &mut out, &expected, |out| {
            plan.launch(gpu, &x_dev, out, &mut params_dev)
        })?;
        // After the runs `session` launched: the poison check above launches only when some
        // element's value is the poison (never for symmetric int8, whose range stops at -127).
        let got = gpu.download(&params_dev)?;
        if got[0] != params.scale || got[1] != params.zero_point as f32 {
            bail!(
                "{}: scale and zero point {:?}, the CPU reference has {:?}",
                version.name(),
                got,
                params
            );
        }
    }
    Ok(session.finish())
}

/// Dequantizes the reference's `q` with its parameters; the f32 product is exact to compare.
fn dequantize_problem<Q: Element>(
    gpu: &Gpu,
    common: &CommonArgs,
    day: &Quantize,
    q: &[Q],
    (rows, cols): (usize, usize),
    params: QuantParams,
) -> Result<DayReport> {
    let n = q.len();
    let reference: Vec<f64> = qref::dequantize(q, params)
        .iter()
        .map(|&v| f64::from(v))
        .collect();
    let shape = [rows, cols];
    let expected = Expected::full(&reference, &shape, Tolerance::new(0.0, 0.0));
    let mut session = Session::new(
        gpu,
        common,
        Problem {
            day: "day15",
            title: "int8 quantization",
            description: format!(
                "{rows} x {cols} {} -> f32, (q - {}) x {:.6e}",
                Q::NAME,
                params.zero_point,
                params.scale
            ),
            key: format!("dequantize/{}/{rows}x{cols}", Q::NAME),
            bytes_per_run: 5 * n as u64,
            flops_per_run: None,
        },
    )?;
    session.save_input("q", &shape, q)?;
    session.save_input("params", &[2], &[params.scale, params.zero_point as f32])?;
    session.save_reference(&shape, &reference)?;
    let q_dev = gpu.upload(q)?;
    let params_dev = gpu.upload(&[params.scale, params.zero_point as f32])?;
    let mut out = gpu.alloc_poisoned::<f32>(n)?;
    let scheme = if Q::NAME == "i8" {
        Scheme::Sym
    } else {
        Scheme::Asym
    };
    let (kernel, launch_shape) = day.dequantize_kernel(scheme, n)?;
    let run = RunVersion {
        name: DEQUANTIZE_VERSION,
        kernel: Some((kernel, launch_shape)),
        global_bytes: None,
    };
    session.run_version(run, &mut out, &expected, |out| {
        day.dequantize(gpu, &q_dev, &params_dev, out)
    })?;
    Ok(session.finish())
}

/// The INT8 matmul: exact against an i64 reference, in full for small problems and at
/// sampled outputs (edges included) for large ones.
fn matmul_problem(
    gpu: &Gpu,
    args: &Args,
    s: Shape,
    versions: &[int8_matmul::Version],
) -> Result<DayReport> {
    use common::reference::matmul::{FULL_REFERENCE_MAX_MACS, RANDOM_SAMPLES, sample_outputs};
    let Shape { m, n, k } = s;
    let seed = args.common.seed;
    let a: Vec<i8> = inputs::uniform(m * k, -128.0, 127.0, seed.wrapping_add(10));
    let b_t: Vec<i8> = inputs::uniform(n * k, -128.0, 127.0, seed.wrapping_add(11));
    let (za, zb) = (args.za, args.zb);
    let at = if m * n * k <= FULL_REFERENCE_MAX_MACS {
        None
    } else {
        Some(sample_outputs(m, n, RANDOM_SAMPLES, seed.wrapping_add(12)))
    };
    let values: Vec<f64> = match &at {
        None => qref::int8_matmul(&a, &b_t, za, zb, m, n, k),
        Some(at) => qref::int8_matmul_at(&a, &b_t, za, zb, m, n, k, at),
    }
    .into_iter()
    .map(|v| v as f64)
    .collect();
    let out_shape = [m, n];
    let expected = Expected {
        values: &values,
        shape: &out_shape,
        tolerance: Tolerance::new(0.0, 0.0),
        at: at.as_deref(),
    };
    let mut session = Session::new(
        gpu,
        &args.common,
        Problem {
            day: "day15",
            title: "int8 quantization",
            description: format!(
                "int8 matmul {m} x {n} x {k}, zero points {za}, {zb}, int32 out ({})",
                if at.is_some() {
                    "sampled outputs checked"
                } else {
                    "every output checked"
                }
            ),
            key: format!("int8_matmul/i8/{m}x{n}x{k}"),
            bytes_per_run: s.bytes(),
            flops_per_run: Some(s.ops()),
        },
    )?;
    session.save_input("a", &[m, k], &a)?;
    session.save_input("b_t", &[n, k], &b_t)?;
    if at.is_none() {
        session.save_reference(&out_shape, &values)?;
    }
    let day = Int8Matmul::load(gpu)?;
    let a_dev = gpu.upload(&a)?;
    let b_dev = gpu.upload(&b_t)?;
    let mut c = gpu.alloc_poisoned::<i32>(m * n)?;
    for &version in versions {
        let run = RunVersion {
            name: version.name(),
            kernel: Some((day.kernel(version), day.shape(version, s))),
            global_bytes: None,
        };
        session.run_version(run, &mut c, &expected, |c| {
            day.launch(gpu, version, &a_dev, &b_dev, c, za, zb, s)
        })?;
    }
    Ok(session.finish())
}
