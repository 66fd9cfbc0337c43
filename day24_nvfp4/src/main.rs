//! `cargo run --release -p day24`: NVFP4 quantize and dequantize (checked byte for byte
//! against the CPU reference), the GEMV on packed weights next to a bf16 GEMV of the same
//! shape, and the GEMM through bf16 tensor cores; each checked, then timed.

use anyhow::{Result, bail};
use clap::Parser;
use common::cli::{CommonArgs, bytes_for, check_host_fits, finish_reports, run_main};
use common::measure::check;
use common::measure::poison_check;
use common::measure::report::DayReport;
use common::reference::matmul::{
    FULL_REFERENCE_MAX_MACS, RANDOM_SAMPLES, sample_outputs_every_tile,
};
use common::reference::nvfp4::{self as fmt, Nvfp4};
use common::session::{Expected, Problem, Refused, Session, Version};
use common::{Gpu, Tolerance, UsageError, measure::inputs, sizes};
use cudarc::driver::CudaSlice;
use day24::gemm::{self, Gemm};
use day24::gemv::{self, Gemv};
use day24::quantize::Quantize;
use day24::{BLOCK, Nvfp4Dev, check_shape, nvfp4_bytes};
use half::bf16;

const OPS: &[&str] = &["quantize", "dequantize", "gemv", "gemm"];

/// Day 24: NVFP4 on a GPU without FP4 tensor cores.
#[derive(Parser)]
#[command(version, about)]
struct Args {
    /// Which problems to run (comma-separated): quantize, dequantize, gemv, gemm. All by
    /// default.
    #[arg(long, value_delimiter = ',', value_name = "OP[,OP]")]
    op: Vec<String>,
    /// Rows of the tensor to quantize and dequantize.
    #[arg(long, default_value_t = day24::DEFAULT_QUANTIZE_SHAPE.0 as u64, value_parser = common::sizes::positive_u64)]
    rows: u64,
    /// Columns of that tensor: a multiple of 16.
    #[arg(long, default_value_t = day24::DEFAULT_QUANTIZE_SHAPE.1 as u64, value_parser = common::sizes::positive_u64)]
    cols: u64,
    /// Rows of W (GEMV and GEMM; with --k replaces the default shapes).
    #[arg(long, requires = "k", value_parser = common::sizes::positive_u64)]
    n: Option<u64>,
    /// Columns of W, the length of x: a multiple of 16.
    #[arg(long, requires = "n", value_parser = common::sizes::positive_u64)]
    k: Option<u64>,
    /// Rows of A in the GEMM (4096 with --n and --k; alone, it replaces the default problems'
    /// m).
    #[arg(long, value_parser = common::sizes::positive_u64)]
    m: Option<u64>,
    #[command(flatten)]
    common: CommonArgs,
}

fn main() -> std::process::ExitCode {
    run_main(|| run(common::cli::parse_args(&kernel_names())))
}

/// Every version `--kernel` can name, in table order (`--help` lists them).
fn kernel_names() -> Vec<&'static str> {
    let mut names: Vec<&str> = vec!["quantize", "dequantize"];
    names.extend(gemv::VERSIONS);
    names.extend(gemm::VERSIONS);
    names
}

fn usize_of(v: u64) -> usize {
    usize::try_from(v).unwrap_or(usize::MAX)
}

fn run(args: Args) -> Result<()> {
    for op in &args.op {
        if !OPS.contains(&op.as_str()) {
            bail!(UsageError::new(format!(
                "there is no op `{op}` here; choose from: {}",
                OPS.join(", ")
            )));
        }
    }
    let wants = |op: &str| args.op.is_empty() || args.op.iter().any(|o| o == op);
    args.common.select_versions(&kernel_names())?;
    let selected =
        |name: &str| args.common.kernel.is_empty() || args.common.kernel.iter().any(|k| k == name);
    let versions_of = |op: &str| -> Vec<&'static str> {
        match op {
            "gemv" => gemv::VERSIONS.to_vec(),
            "gemm" => gemm::VERSIONS.to_vec(),
            "quantize" => vec!["quantize"],
            _ => vec!["dequantize"],
        }
    };
    let runs = |op: &str| wants(op) && versions_of(op).iter().any(|v| selected(v));
    for op in &args.op {
        if !runs(op) {
            bail!(UsageError::new(format!(
                "--kernel {}: {op} has none of these versions; it has: {}",
                args.common.kernel.join(","),
                versions_of(op).join(", ")
            )));
        }
    }

    // Every size is checked here, before the GPU is opened.
    let (rows, cols) = (usize_of(args.rows), usize_of(args.cols));
    let elementwise = runs("quantize") || runs("dequantize");
    let mut device_bytes: Vec<(String, u64)> = Vec::new();
    if elementwise {
        check_shape("--rows x --cols", rows, cols)?;
        let n = (rows * cols) as u64;
        // x, its bf16 copy back, the reference bytes as f64 and check lists.
        check_host_fits(
            "--rows x --cols",
            bytes_for("--rows x --cols", n, 2 + 2 + 8 + 16)?,
        )?;
        device_bytes.push((
            "--rows x --cols".into(),
            bytes_for("--rows x --cols", n, 5)?,
        ));
    }
    let gemv_shapes: Vec<(usize, usize)> = match (args.n, args.k) {
        (Some(n), Some(k)) => vec![(usize_of(n), usize_of(k))],
        _ => day24::DEFAULT_GEMV_SHAPES.to_vec(),
    };
    if runs("gemv") {
        for &(n, k) in &gemv_shapes {
            let what = format!("W {n} x {k}");
            check_shape(&what, n, k)?;
            // The bf16 W (and its f32 copy), the NVFP4 W, x and the references.
            let host = sizes::product(&what, &[n, k, 2 + 4 + 1])?;
            check_host_fits(&what, host as u64)?;
            device_bytes.push((what.clone(), bytes_for(&what, (n * k) as u64, 3)?));
        }
    }
    let gemm_shapes: Vec<(usize, usize, usize)> = match (args.n, args.k) {
        (Some(n), Some(k)) => vec![(usize_of(args.m.unwrap_or(4096)), usize_of(n), usize_of(k))],
        _ => day24::DEFAULT_GEMM_SHAPES
            .iter()
            .map(|&(m, n, k)| (args.m.map_or(m, usize_of), n, k))
            .collect(),
    };
    if runs("gemm") {
        for &(gm, gn, gk) in &gemm_shapes {
            let what = format!("gemm {gm} x {gn} x {gk}");
            check_shape(&what, gn, gk)?;
            check_shape(&what, gm, gk)?;
            gemm::launch_shape(gm, gn)?;
            let elements = sizes::sum(
                &what,
                &[
                    sizes::product(&what, &[gm, gk])?,
                    sizes::product(&what, &[gn, gk])?,
                    sizes::product(&what, &[gm, gn])?,
                ],
            )?;
            sizes::product(&what, &[gm, gn, gk, 2])?;
            check_host_fits(&what, bytes_for(&what, elements as u64, 8)?)?;
            device_bytes.push((what.clone(), bytes_for(&what, elements as u64, 4)?));
        }
    }

    let gpu = args.common.open_gpu()?;
    for (what, bytes) in &device_bytes {
        gpu.check_fits(what, *bytes)?;
    }
    let mut reports = Vec::new();
    if elementwise {
        let day = Quantize::load(&gpu)?;
        let x = quantize_input(rows * cols, args.common.seed);
        let q = fmt::quantize(&x, rows, cols);
        if runs("quantize") {
            reports.push(quantize_problem(&gpu, &args.common, &day, &x, &q)?);
        }
        if runs("dequantize") {
            reports.push(dequantize_problem(&gpu, &args.common, &day, &q)?);
        }
    }
    if runs("gemv") {
        let day = Gemv::load(&gpu)?;
        let versions: Vec<&str> = gemv::VERSIONS
            .iter()
            .copied()
            .filter(|v| selected(v))
            .collect();
        for &(n, k) in &gemv_shapes {
            reports.push(gemv_problem(&gpu, &args.common, &day, &versions, n, k)?);
        }
    }
    if runs("gemm") {
        let versions: Vec<&str> = gemm::VERSIONS
            .iter()
            .copied()
            .filter(|v| selected(v))
            .collect();
        for &shape in &gemm_shapes {
            reports.push(gemm_problem(&gpu, &args.common, &versions, shape)?);
        }
    }
    finish_reports(&args.common, &reports)
}

/// Uniform in [-4, 4) with one value in 61 made 20x larger: blocks with and without an
/// outlier get different scales, and the tensor's amax is set by the outliers.
fn quantize_input(n: usize, seed: u64) -> Vec<bf16> {
    let mut x: Vec<bf16> = inputs::uniform(n, -4.0, 4.0, seed);
    for v in x.iter_mut().step_by(61) {
        *v = bf16::from_f32(v.to_f32() * 20.0);
    }
    x
}

fn quantize_problem(
    gpu: &Gpu,
    common: &CommonArgs,
    day: &Quantize,
    x: &[bf16],
    q: &Nvfp4,
) -> Result<DayReport> {
    let (rows, cols) = (q.rows, q.cols);
    let n = rows * cols;
    let reference: Vec<f64> = q.packed.iter().map(|&b| f64::from(b)).collect();
    // A packed byte may legitimately equal the u8 poison: those are checked after a zero
    // fill instead (`common::measure::poison_check`).
    let split = poison_check::split::<u8>(&reference);
    let shape = [rows, cols / 2];
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
            day: "day24",
            title: "nvfp4",
            description: format!(
                "{rows} x {cols} bf16 -> NVFP4 (codes, e4m3 scale per 16, tensor scale {:.6e})",
                q.tensor_scale
            ),
            key: format!("nvfp4_quantize/bf16/{rows}x{cols}"),
            // Least traffic: x read once (2 bytes a value), codes and scales written once.
            // The amax pass reads x a second time: the price of a per-tensor scale.
            bytes_per_run: 2 * n as u64 + nvfp4_bytes(rows, cols),
            flops_per_run: None,
        },
    )?;
    session.save_input("x", &[rows, cols], x)?;
    let x_dev = gpu.upload(x)?;
    let mut packed = gpu.alloc_poisoned::<u8>(n / 2)?;
    let mut scales = gpu.alloc_poisoned::<u8>(n / BLOCK)?;
    let mut ts = gpu.alloc_poisoned::<f32>(1)?;
    let mut amax = gpu.alloc_poisoned::<u32>(1)?;
    let mut launch = |p: &mut CudaSlice<u8>| {
        day.quantize(
            gpu,
            &x_dev,
            (rows, cols),
            p,
            &mut scales,
            &mut ts,
            &mut amax,
        )
    };
    let unwritten =
        poison_check::verify_poison_valued(gpu, &mut packed, &split.poison_valued, &mut launch)?;
    if unwritten > 0 {
        bail!("quantize: {unwritten} packed bytes whose value is the poison were never written");
    }
    gpu.poison(&mut scales)?;
    gpu.poison(&mut ts)?;
    let (kernel, launch_shape) = day.quantize_kernel(rows, cols)?;
    session.run_version(
        Version {
            name: "quantize",
            kernel: Some((kernel, launch_shape)),
            global_bytes: None,
        },
        &mut packed,
        &expected,
        |p| {
            day.quantize(
                gpu,
                &x_dev,
                (rows, cols),
                p,
                &mut scales,
                &mut ts,
                &mut amax,
            )
        },
    )?;
    let scale_ref: Vec<f64> = q.scales.iter().map(|&b| f64::from(b)).collect();
    let got = gpu.download(&scales)?;
    let exact = Tolerance::new(0.0, 0.0);
    session.check_also(
        "quantize",
        "e4m3 scales",
        check::compare(&got, &scale_ref, &[rows, cols / BLOCK], exact),
    );
    let got = gpu.download(&ts)?;
    session.check_also(
        "quantize",
        "tensor scale",
        check::compare(&got, &[f64::from(q.tensor_scale)], &[1], exact),
    );
    Ok(session.finish())
}

fn dequantize_problem(
    gpu: &Gpu,
    common: &CommonArgs,
    day: &Quantize,
    q: &Nvfp4,
) -> Result<DayReport> {
    let (rows, cols) = (q.rows, q.cols);
    let reference: Vec<f64> = fmt::dequantize(q).iter().map(|v| v.to_f64()).collect();
    let shape = [rows, cols];
    let expected = Expected::full(&reference, &shape, Tolerance::new(0.0, 0.0));
    let mut session = Session::new(
        gpu,
        common,
        Problem {
            day: "day24",
            title: "nvfp4",
            description: format!("{rows} x {cols} NVFP4 -> bf16, (code x scale) x tensor scale"),
            key: format!("nvfp4_dequantize/bf16/{rows}x{cols}"),
            bytes_per_run: nvfp4_bytes(rows, cols) + 2 * (rows * cols) as u64,
            flops_per_run: None,
        },
    )?;
    session.save_reference(&shape, &reference)?;
    let w = Nvfp4Dev::upload(gpu, q)?;
    let mut y = gpu.alloc_poisoned::<bf16>(rows * cols)?;
    let (kernel, launch_shape) = day.dequantize_kernel(rows, cols)?;
    session.run_version(
        Version {
            name: "dequantize",
            kernel: Some((kernel, launch_shape)),
            global_bytes: None,
        },
        &mut y,
        &expected,
        |y| day.dequantize(gpu, &w, y),
    )?;
    Ok(session.finish())
}

/// The GEMV key peers and reports share.
pub fn gemv_key(n: usize, k: usize) -> String {
    format!("nvfp4_gemv/bf16/{n}x{k}")
}

fn gemv_problem(
    gpu: &Gpu,
    common: &CommonArgs,
    day: &Gemv,
    versions: &[&str],
    n: usize,
    k: usize,
) -> Result<DayReport> {
    let seed = common.seed;
    // W as a layer's weights would be: bf16, then quantized. x in [-1, 1).
    let w_bf16: Vec<bf16> = inputs::uniform(n * k, -1.0, 1.0, seed.wrapping_add(20));
    let x: Vec<bf16> = inputs::uniform(k, -1.0, 1.0, seed.wrapping_add(21));
    let w = fmt::quantize(&w_bf16, n, k);
    let (y_nvfp4, mag_nvfp4) = fmt::gemv(&w, &x);
    let (y_bf16, mag_bf16) = common::reference::gemv::gemv(&w_bf16, &x, n, k);
    let max = |m: &[f64]| m.iter().copied().fold(0.0, f64::max);
    let out_shape = [n];
    let expected_nvfp4 = Expected::full(&y_nvfp4, &out_shape, gemv::tolerance(k, max(&mag_nvfp4)));
    let expected_bf16 = Expected::full(&y_bf16, &out_shape, gemv::tolerance(k, max(&mag_bf16)));
    let x_bytes = 2 * k as u64 + 4 * n as u64;
    let mut session = Session::new(
        gpu,
        common,
        Problem {
            day: "day24",
            title: "nvfp4",
            description: format!(
                "GEMV y = W x, W {n} x {k} NVFP4 (bf16_warp: the same shape in bf16; its GB/s \
                 counts the NVFP4 bytes), x bf16, y f32"
            ),
            key: gemv_key(n, k),
            // Least traffic of the NVFP4 GEMV: codes and scales once, x and y once.
            bytes_per_run: nvfp4_bytes(n, k) + x_bytes,
            flops_per_run: None,
        },
    )?;
    session.save_input("x", &[k], &x)?;
    if common.save.is_some() {
        // For verify/: the weights before the tensor scale (exact in f32), and the scale.
        session.save_input("w_unscaled", &[n, k], &w.unscaled())?;
        session.save_input("tensor_scale", &[1], &[w.tensor_scale])?;
    }
    session.save_reference(&out_shape, &y_nvfp4)?;
    let x_dev = gpu.upload(&x)?;
    let mut y = gpu.alloc_poisoned::<f32>(n)?;
    for &name in versions {
        let (kernel, shape) = day.kernel(name, n, k)?;
        if name == "bf16_warp" {
            let w_dev = gpu.upload(&w_bf16)?;
            session.run_version(
                Version {
                    name,
                    kernel: Some((kernel, shape)),
                    global_bytes: Some(2 * (n * k) as u64 + x_bytes),
                },
                &mut y,
                &expected_bf16,
                |y| day.bf16(gpu, &w_dev, &x_dev, y, (n, k)),
            )?;
        } else {
            let w_dev = Nvfp4Dev::upload(gpu, &w)?;
            session.run_version(
                Version {
                    name,
                    kernel: Some((kernel, shape)),
                    global_bytes: None,
                },
                &mut y,
                &expected_nvfp4,
                |y| day.nvfp4(gpu, name, &w_dev, &x_dev, y),
            )?;
        }
    }
    Ok(session.finish())
}

fn gemm_problem(
    gpu: &Gpu,
    common: &CommonArgs,
    versions: &[&str],
    (m, n, k): (usize, usize, usize),
) -> Result<DayReport> {
    let seed = common.seed;
    let a: Vec<bf16> = inputs::uniform(m * k, -1.0, 1.0, seed.wrapping_add(30));
    let w_bf16: Vec<bf16> = inputs::uniform(n * k, -1.0, 1.0, seed.wrapping_add(31));
    let w = fmt::quantize(&w_bf16, n, k);
    drop(w_bf16);
    // Every output, or the edges, random ones and two in every output tile of either version.
    let at: Vec<usize> = if m * n * k <= FULL_REFERENCE_MAX_MACS {
        (0..m * n).collect()
    } else {
        sample_outputs_every_tile(m, n, RANDOM_SAMPLES, seed.wrapping_add(32))
    };
    let (values, _) = fmt::gemm_at(&a, &w, m, &at);
    let out_shape = [m, n];
    let expected = Expected {
        values: &values,
        shape: &out_shape,
        tolerance: gemm::tolerance(k),
        at: Some(&at),
    };
    let mut session = Session::new(
        gpu,
        common,
        Problem {
            day: "day24",
            title: "nvfp4",
            description: format!(
                "GEMM C = A W^T, A {m} x {k} bf16, W {n} x {k} NVFP4 decoded to bf16 (in shared \
                 memory for mma_bf16, in registers for wgmma_rs), C f32 ({})",
                if at.len() == m * n {
                    "every output checked"
                } else {
                    "sampled outputs checked"
                }
            ),
            key: format!("nvfp4_gemm/bf16/{m}x{n}x{k}"),
            bytes_per_run: 2 * (m * k) as u64 + nvfp4_bytes(n, k) + 4 * (m * n) as u64,
            flops_per_run: Some(2 * m as u64 * n as u64 * k as u64),
        },
    )?;
    let day = Gemm::load(gpu)?;
    let a_dev = gpu.upload(&a)?;
    let w_dev = Nvfp4Dev::upload(gpu, &w)?;
    let mut c = gpu.alloc_poisoned::<f32>(m * n)?;
    for &name in versions {
        let (kernel, shape) = match day.kernel(name, m, n, k) {
            Ok(plan) => plan,
            Err(e) if e.is::<Refused>() => {
                session.skip_version(name, &e.to_string());
                continue;
            }
            Err(e) => return Err(e),
        };
        session.run_version(
            Version {
                name,
                kernel: Some((kernel, shape)),
                global_bytes: None,
            },
            &mut c,
            &expected,
            |c| day.launch(gpu, name, &a_dev, &w_dev, c, m),
        )?;
    }
    Ok(session.finish())
}
