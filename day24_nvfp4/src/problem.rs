//! The day's problems for the shared runner of multi-op days ([`common::family::ops`]): the
//! flags, each op's sizes checked before the GPU opens, and each problem's run: inputs, the
//! CPU reference, and every selected version planned once and handed to the session.

use std::cell::OnceCell;
use std::rc::Rc;

use anyhow::{Context, Result};
use common::cli::bytes_for;
use common::family::ops::{Checked, OpList, OpsDay, Run, Selection};
use common::measure::report::DayReport;
use common::measure::{check, inputs, poison_check};
use common::reference::matmul::{
    FULL_REFERENCE_MAX_MACS, RANDOM_SAMPLES, sample_outputs_every_tile,
};
use common::session::{Expected, Version};
use common::{Gpu, Kernel, LaunchShape, Tolerance, sizes};
use half::bf16;

use crate::gemm::{self, Gemm};
use crate::gemv::{self, Gemv, Weights};
use crate::quantize::Quantize;
use crate::reference::{self as fmt, Nvfp4};
use crate::{BLOCK, Nvfp4Dev, check_shape, nvfp4_bytes};

/// Day 24's flags.
#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    ops: OpList,
    /// Rows of the tensor to quantize and dequantize.
    #[arg(long, default_value_t = crate::DEFAULT_QUANTIZE_SHAPE.0 as u64, value_parser = common::sizes::positive_u64)]
    rows: u64,
    /// Columns of that tensor: a multiple of 16.
    #[arg(long, default_value_t = crate::DEFAULT_QUANTIZE_SHAPE.1 as u64, value_parser = common::sizes::positive_u64)]
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
}

/// The tensor the quantize and dequantize problems share, made when the first of them runs.
pub struct Tensor {
    rows: usize,
    cols: usize,
    made: OnceCell<(Vec<bf16>, Nvfp4)>,
}

impl Tensor {
    /// x from `seed` ([`quantize_input`]) and its CPU quantization.
    fn get(&self, seed: u64) -> &(Vec<bf16>, Nvfp4) {
        self.made.get_or_init(|| {
            let x = quantize_input(self.rows * self.cols, seed);
            let q = fmt::quantize(&x, self.rows, self.cols);
            (x, q)
        })
    }
}

/// One problem of the day.
pub enum Problem {
    Quantize(Rc<Tensor>),
    Dequantize(Rc<Tensor>),
    Gemv { n: usize, k: usize },
    Gemm { m: usize, n: usize, k: usize },
}

/// The day for the runner: its three kernel files, loaded.
pub struct Day24 {
    quantize: Quantize,
    gemv: Gemv,
    gemm: Gemm,
}

fn usize_of(v: u64) -> usize {
    usize::try_from(v).unwrap_or(usize::MAX)
}

impl OpsDay for Day24 {
    const DAY: &'static str = "day24";
    const TITLE: &'static str = "nvfp4";
    const ABOUT: &'static str = env!("CARGO_PKG_DESCRIPTION");
    const OPS: &'static [&'static str] = &["quantize", "dequantize", "gemv", "gemm"];
    type Args = Args;
    type Problem = Problem;

    fn versions(op: &str) -> &'static [&'static str] {
        match op {
            "gemv" => &gemv::Version::NAMES,
            "gemm" => &gemm::Version::NAMES,
            "quantize" => &["quantize"],
            _ => &["dequantize"],
        }
    }

    fn asked_ops(args: &Args) -> Vec<&str> {
        args.ops.names()
    }

    fn problems(args: &Args, ops: &Selection) -> Result<Vec<Checked<Problem>>> {
        let mut problems = Vec::new();
        let (rows, cols) = (usize_of(args.rows), usize_of(args.cols));
        if ops.runs("quantize") || ops.runs("dequantize") {
            let what = "--rows x --cols";
            check_shape(what, rows, cols)?;
            let n = (rows * cols) as u64;
            // x, its bf16 copy back, the reference bytes as f64 and check lists; on the GPU x,
            // the codes and scales, and y.
            let (host, device) = (bytes_for(what, n, 2 + 2 + 8 + 16)?, bytes_for(what, n, 5)?);
            let tensor = Rc::new(Tensor {
                rows,
                cols,
                made: OnceCell::new(),
            });
            if ops.runs("quantize") {
                let problem = Problem::Quantize(tensor.clone());
                problems.push(Checked::new("quantize", what, host, device, problem)?);
            }
            if ops.runs("dequantize") {
                let problem = Problem::Dequantize(tensor);
                problems.push(Checked::new("dequantize", what, host, device, problem)?);
            }
        }
        if ops.runs("gemv") {
            let shapes = match (args.n, args.k) {
                (Some(n), Some(k)) => vec![(usize_of(n), usize_of(k))],
                _ => crate::DEFAULT_GEMV_SHAPES.to_vec(),
            };
            for (n, k) in shapes {
                let what = format!("W {n} x {k}");
                check_shape(&what, n, k)?;
                // The bf16 W (and its f32 copy), the NVFP4 W, x and the references.
                let host = sizes::product(&what, &[n, k, 2 + 4 + 1])? as u64;
                let device = bytes_for(&what, (n * k) as u64, 3)?;
                let problem = Problem::Gemv { n, k };
                problems.push(Checked::new("gemv", what, host, device, problem)?);
            }
        }
        if ops.runs("gemm") {
            let shapes: Vec<(usize, usize, usize)> = match (args.n, args.k) {
                (Some(n), Some(k)) => {
                    vec![(usize_of(args.m.unwrap_or(4096)), usize_of(n), usize_of(k))]
                }
                _ => crate::DEFAULT_GEMM_SHAPES
                    .iter()
                    .map(|&(m, n, k)| (args.m.map_or(m, usize_of), n, k))
                    .collect(),
            };
            for (m, n, k) in shapes {
                let what = format!("gemm {m} x {n} x {k}");
                check_shape(&what, n, k)?;
                check_shape(&what, m, k)?;
                gemm::launch_shape(m, n)?;
                let elements = sizes::sum(
                    &what,
                    &[
                        sizes::product(&what, &[m, k])?,
                        sizes::product(&what, &[n, k])?,
                        sizes::product(&what, &[m, n])?,
                    ],
                )? as u64;
                sizes::product(&what, &[m, n, k, 2])?;
                let host = bytes_for(&what, elements, 8)?;
                let device = bytes_for(&what, elements, 4)?;
                let problem = Problem::Gemm { m, n, k };
                problems.push(Checked::new("gemm", what, host, device, problem)?);
            }
        }
        Ok(problems)
    }

    fn load(gpu: &Gpu) -> Result<Self> {
        Ok(Self {
            quantize: Quantize::load(gpu)?,
            gemv: Gemv::load(gpu)?,
            gemm: Gemm::load(gpu)?,
        })
    }

    fn run(&self, run: &Run, problem: Problem) -> Result<DayReport> {
        match problem {
            Problem::Quantize(t) => {
                let (x, q) = t.get(run.seed());
                quantize(run, &self.quantize, x, q)
            }
            Problem::Dequantize(t) => dequantize(run, &self.quantize, &t.get(run.seed()).1),
            Problem::Gemv { n, k } => gemv(run, &self.gemv, n, k),
            Problem::Gemm { m, n, k } => gemm(run, &self.gemm, m, n, k),
        }
    }
}

/// Uniform in [-4, 4) with one value in 61 made 20x larger: blocks with and without an
/// outlier get different scales, and the tensor's amax is set by the outliers.
pub fn quantize_input(n: usize, seed: u64) -> Vec<bf16> {
    let mut x: Vec<bf16> = inputs::uniform(n, -4.0, 4.0, seed);
    for v in x.iter_mut().step_by(61) {
        *v = bf16::from_f32(v.to_f32() * 20.0);
    }
    x
}

/// The GEMV key peers and reports share.
pub fn gemv_key(n: usize, k: usize) -> String {
    format!("nvfp4_gemv/bf16/{n}x{k}")
}

fn version<'a>(name: &'a str, kernel: &'a Kernel, shape: LaunchShape) -> Version<'a> {
    Version {
        name,
        kernel: Some((kernel, shape)),
        global_bytes: None,
    }
}

fn as_f64(bytes: &[u8]) -> Vec<f64> {
    bytes.iter().map(|&b| f64::from(b)).collect()
}

fn quantize(run: &Run, day: &Quantize, x: &[bf16], q: &Nvfp4) -> Result<DayReport> {
    let gpu = run.gpu;
    let (rows, cols) = (q.rows, q.cols);
    let n = rows * cols;
    // A packed byte may legitimately equal the u8 poison: those are checked after a zero
    // fill instead (`common::measure::poison_check`).
    let split = poison_check::split::<u8>(&as_f64(&q.packed));
    let shape = [rows, cols / 2];
    let expected = Expected::exact_unless_poison(&split, &shape);
    let mut session = run.session(run.problem(
        format!(
            "{rows} x {cols} bf16 -> NVFP4 (codes, e4m3 scale per 16, tensor scale {:.6e})",
            q.tensor_scale
        ),
        format!("nvfp4_quantize/bf16/{rows}x{cols}"),
        // Least traffic: x read once (2 bytes a value), codes and scales written once.
        // The amax pass reads x a second time: the price of a per-tensor scale.
        2 * n as u64 + nvfp4_bytes(rows, cols),
    ))?;
    session.save_input("x", &[rows, cols], x)?;
    let x_dev = gpu.upload(x)?;
    let mut packed = gpu.alloc_poisoned::<u8>(n / 2)?;
    let mut plan = day.plan_quantize(gpu, rows, cols)?;
    let mut launch = |p: &mut _| plan.launch(gpu, &x_dev, p);
    split.require_written(gpu, &mut packed, &mut launch, "quantize")?;
    gpu.poison(&mut plan.scales)?;
    gpu.poison(&mut plan.tensor_scale)?;
    let (kernel, launch_shape) = (plan.kernel, plan.shape);
    session.run_version(
        version("quantize", kernel, launch_shape),
        &mut packed,
        &expected,
        |p| plan.launch(gpu, &x_dev, p),
    )?;
    let got = gpu.download(&plan.scales)?;
    let scales = check::compare(
        &got,
        &as_f64(&q.scales),
        &[rows, cols / BLOCK],
        Tolerance::EXACT,
    );
    session.check_also("quantize", "e4m3 scales", scales);
    let got = gpu.download(&plan.tensor_scale)?;
    let ts = check::compare(&got, &[f64::from(q.tensor_scale)], &[1], Tolerance::EXACT);
    session.check_also("quantize", "tensor scale", ts);
    Ok(session.finish())
}

fn dequantize(run: &Run, day: &Quantize, q: &Nvfp4) -> Result<DayReport> {
    let gpu = run.gpu;
    let (rows, cols) = (q.rows, q.cols);
    let reference: Vec<f64> = fmt::dequantize(q).iter().map(|v| v.to_f64()).collect();
    let shape = [rows, cols];
    let expected = Expected::full(&reference, &shape, Tolerance::EXACT);
    let mut session = run.session(run.problem(
        format!("{rows} x {cols} NVFP4 -> bf16, (code x scale) x tensor scale"),
        format!("nvfp4_dequantize/bf16/{rows}x{cols}"),
        nvfp4_bytes(rows, cols) + 2 * (rows * cols) as u64,
    ))?;
    session.save_reference(&shape, &reference)?;
    let w = Nvfp4Dev::upload(gpu, q)?;
    let mut y = gpu.alloc_poisoned::<bf16>(rows * cols)?;
    let plan = day.plan_dequantize(rows, cols)?;
    session.run_version(
        version("dequantize", plan.kernel, plan.shape),
        &mut y,
        &expected,
        |y| plan.launch(gpu, &w, y),
    )?;
    Ok(session.finish())
}

fn gemv(run: &Run, day: &Gemv, n: usize, k: usize) -> Result<DayReport> {
    let (gpu, seed) = (run.gpu, run.seed());
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
    let mut session = run.session(run.problem(
        format!(
            "GEMV y = W x, W {n} x {k} NVFP4 (bf16_warp: the same shape in bf16; its GB/s \
             counts the NVFP4 bytes), x bf16, y f32"
        ),
        gemv_key(n, k),
        // Least traffic of the NVFP4 GEMV: codes and scales once, x and y once.
        nvfp4_bytes(n, k) + x_bytes,
    ))?;
    session.save_input("x", &[k], &x)?;
    if run.common.save.is_some() {
        // For verify/: the weights before the tensor scale (exact in f32), and the scale.
        session.save_input("w_unscaled", &[n, k], &w.unscaled())?;
        session.save_input("tensor_scale", &[1], &[w.tensor_scale])?;
    }
    session.save_reference(&out_shape, &y_nvfp4)?;
    let x_dev = gpu.upload(&x)?;
    let mut y = gpu.alloc_poisoned::<f32>(n)?;
    for &name in run.versions {
        let v = gemv::Version::from_name(name).expect("one of the op's versions");
        let plan = day.plan(v, n, k)?;
        let mut row = version(name, plan.kernel, plan.shape);
        if v == gemv::Version::Bf16Warp {
            let w_dev = gpu.upload(&w_bf16)?;
            row.global_bytes = Some(2 * (n * k) as u64 + x_bytes);
            session.run_version(row, &mut y, &expected_bf16, |y| {
                plan.launch(gpu, Weights::Bf16(&w_dev), &x_dev, y)
            })?;
        } else {
            let w_dev = Nvfp4Dev::upload(gpu, &w)?;
            session.run_version(row, &mut y, &expected_nvfp4, |y| {
                plan.launch(gpu, Weights::Nvfp4(&w_dev), &x_dev, y)
            })?;
        }
    }
    Ok(session.finish())
}

fn gemm(run: &Run, day: &Gemm, m: usize, n: usize, k: usize) -> Result<DayReport> {
    let (gpu, seed) = (run.gpu, run.seed());
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
    let mut problem = run.problem(
        format!(
            "GEMM C = A W^T, A {m} x {k} bf16, W {n} x {k} NVFP4 decoded to bf16 (in shared \
             memory for mma_bf16, in registers for wgmma_rs), C f32 ({})",
            if at.len() == m * n {
                "every output checked"
            } else {
                "sampled outputs checked"
            }
        ),
        format!("nvfp4_gemm/bf16/{m}x{n}x{k}"),
        2 * (m * k) as u64 + nvfp4_bytes(n, k) + 4 * (m * n) as u64,
    );
    problem.flops_per_run = Some(2 * m as u64 * n as u64 * k as u64);
    let mut session = run.session(problem)?;
    let a_dev = gpu.upload(&a)?;
    let w_dev = Nvfp4Dev::upload(gpu, &w)?;
    let mut c = gpu.alloc_poisoned::<f32>(m * n)?;
    for &name in run.versions {
        let v = gemm::Version::from_name(name).expect("one of the op's versions");
        let plan = day.plan(gpu, v, &a_dev, m, n, k);
        let Some(plan) = session
            .plan_or_skip(name, plan)
            .with_context(|| format!("planning `{name}` for gemm"))?
        else {
            continue;
        };
        session.run_version(
            version(name, plan.kernel, plan.shape),
            &mut c,
            &expected,
            |c| plan.launch(gpu, &a_dev, &w_dev, c),
        )?;
    }
    Ok(session.finish())
}
