//! The day's problems for the shared runner of multi-op days ([`common::family::ops`]): the
//! flags, each op's sizes checked before the GPU opens, and each problem's run: inputs, the
//! exact CPU reference, and every selected version planned once and handed to the session.

use std::cell::OnceCell;
use std::rc::Rc;

use anyhow::{Result, bail};
use common::cli::bytes_for;
use common::family::ops::{Checked, OpList, OpsDay, Run, Selection};
use common::measure::report::DayReport;
use common::measure::{inputs, poison_check};
use common::reference::quantize::{self as qref, QuantParams};
use common::session::{Expected, Version as Row};
use common::{Element, Gpu, Kernel, LaunchShape, Tolerance, UsageError, sizes};

use crate::int8_matmul::{self, Int8Matmul, Shape};
use crate::quantize::{Quantize, Scheme, Version};

/// The one dequantize version.
pub const DEQUANTIZE_VERSION: &str = "vec4";

/// Day 15's flags.
#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    ops: OpList,
    /// Rows of the tensor to quantize (its elements are rows x cols; the scale is per tensor).
    #[arg(long, default_value_t = crate::DEFAULT_ROWS, value_parser = common::sizes::positive_u64)]
    rows: u64,
    #[arg(long, default_value_t = crate::DEFAULT_COLS, value_parser = common::sizes::positive_u64)]
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
}

/// The tensor the quantize and dequantize problems share, made when the first of them runs.
pub struct Tensor {
    rows: usize,
    cols: usize,
    x: OnceCell<Vec<f32>>,
}

impl Tensor {
    /// Uniform in [-3, 5) from `seed`: the range is not symmetric about 0.
    fn get(&self, seed: u64) -> &[f32] {
        self.x
            .get_or_init(|| inputs::uniform(self.rows * self.cols, -3.0, 5.0, seed))
    }
}

/// One problem of the day.
pub enum Problem {
    Quantize(Scheme, Rc<Tensor>),
    /// The reference's q of this scheme, dequantized.
    Dequantize(Scheme, Rc<Tensor>),
    Matmul {
        shape: Shape,
        za: i32,
        zb: i32,
    },
}

/// The day for the runner: both kernel files, loaded.
pub struct Day15 {
    quantize: Quantize,
    matmul: Int8Matmul,
}

impl OpsDay for Day15 {
    const DAY: &'static str = "day15";
    const TITLE: &'static str = "int8 quantization";
    const ABOUT: &'static str = env!("CARGO_PKG_DESCRIPTION");
    const OPS: &'static [&'static str] =
        &["quantize_sym", "quantize_asym", "dequantize", "int8_matmul"];
    type Args = Args;
    type Problem = Problem;

    fn versions(op: &str) -> &'static [&'static str] {
        match op {
            "dequantize" => &[DEQUANTIZE_VERSION],
            "int8_matmul" => &int8_matmul::Version::NAMES,
            _ => &Version::NAMES,
        }
    }

    fn asked_ops(args: &Args) -> Vec<&str> {
        args.ops.names()
    }

    fn problems(args: &Args, ops: &Selection) -> Result<Vec<Checked<Problem>>> {
        if !(-128..=127).contains(&args.za) || !(-128..=127).contains(&args.zb) {
            bail!(UsageError::new(
                "--za and --zb must be in the int8 range -128..=127"
            ));
        }
        let mut problems = Vec::new();
        let (rows, cols) = (args.rows as usize, args.cols as usize);
        let quantize = Scheme::ALL.map(|s| (s, ops.runs(&format!("quantize_{}", s.name()))));
        if quantize.iter().any(|&(_, runs)| runs) || ops.runs("dequantize") {
            let what = "--rows x --cols";
            let n = sizes::product(what, &[rows, cols])? as u64;
            // Host: x (f32), q, y, the f64 reference and the check's index lists (two u64 per
            // element); the GPU: x, q and y.
            let (host, device) = (
                bytes_for(what, n, 4 + 1 + 4 + 8 + 16)?,
                bytes_for(what, n, 9)?,
            );
            let tensor = Rc::new(Tensor {
                rows,
                cols,
                x: OnceCell::new(),
            });
            for (scheme, runs) in quantize {
                if runs {
                    let op = Self::OPS[scheme as usize];
                    let problem = Problem::Quantize(scheme, tensor.clone());
                    problems.push(Checked::new(op, what, host, device, problem)?);
                }
            }
            if ops.runs("dequantize") {
                for scheme in Scheme::ALL {
                    let problem = Problem::Dequantize(scheme, tensor.clone());
                    problems.push(Checked::new("dequantize", what, host, device, problem)?);
                }
            }
        }
        if ops.runs("int8_matmul") {
            let shape = Shape {
                m: args.m as usize,
                n: args.n as usize,
                k: args.k as usize,
            };
            shape.validate()?;
            let (za, zb) = (args.za, args.zb);
            let problem = Problem::Matmul { shape, za, zb };
            let (host, device) = (shape.host_bytes()?, shape.bytes());
            problems.push(Checked::new(
                "int8_matmul",
                "--m --n --k",
                host,
                device,
                problem,
            )?);
        }
        Ok(problems)
    }

    fn load(gpu: &Gpu) -> Result<Self> {
        Ok(Self {
            quantize: Quantize::load(gpu)?,
            matmul: Int8Matmul::load(gpu)?,
        })
    }

    fn run(&self, run: &Run, problem: Problem) -> Result<DayReport> {
        match problem {
            Problem::Quantize(scheme, t) => {
                let x = t.get(run.seed());
                let (rows, cols) = (t.rows, t.cols);
                match scheme {
                    Scheme::Sym => self.quantize(run, scheme, x, rows, cols, qref::quantize_sym(x)),
                    Scheme::Asym => {
                        self.quantize(run, scheme, x, rows, cols, qref::quantize_asym(x))
                    }
                }
            }
            Problem::Dequantize(scheme, t) => {
                let x = t.get(run.seed());
                let (rows, cols) = (t.rows, t.cols);
                match scheme {
                    Scheme::Sym => self.dequantize(run, scheme, rows, cols, qref::quantize_sym(x)),
                    Scheme::Asym => {
                        self.dequantize(run, scheme, rows, cols, qref::quantize_asym(x))
                    }
                }
            }
            Problem::Matmul { shape, za, zb } => self.matmul(run, shape, za, zb),
        }
    }
}

fn row<'a>(name: &'a str, kernel: &'a Kernel, shape: LaunchShape) -> Row<'a> {
    Row {
        name,
        kernel: Some((kernel, shape)),
        global_bytes: None,
    }
}

impl Day15 {
    /// One quantize problem: every version against the exact reference `q` (checked twice
    /// where a value equals the poison), and the scale it wrote.
    fn quantize<Q: Element>(
        &self,
        run: &Run,
        scheme: Scheme,
        x: &[f32],
        rows: usize,
        cols: usize,
        (params, q): (QuantParams, Vec<Q>),
    ) -> Result<DayReport> {
        let gpu = run.gpu;
        let n = x.len();
        let reference = qref::as_f64(&q);
        let shape = [rows, cols];
        let split = poison_check::split::<Q>(&reference);
        let expected = Expected::exact_unless_poison(&split, &shape);
        let mut session = run.session(run.problem(
            format!(
                "{rows} x {cols} f32 -> {} per tensor ({}), scale {:.6e}, zero point {}",
                scheme.storage(),
                scheme.name(),
                params.scale,
                params.zero_point
            ),
            format!("quantize_{}/f32/{rows}x{cols}", scheme.name()),
            // Least traffic: x read once, q written once. The reduction's extra read of x is
            // not counted: it is the price of a per-tensor scale (see the README).
            5 * n as u64,
        ))?;
        session.save_input("x", &shape, x)?;
        session.save_reference(&shape, &reference)?;
        let x_dev = gpu.upload(x)?;
        let mut out = gpu.alloc_poisoned::<Q>(n)?;
        let mut params_dev = gpu.alloc_poisoned::<f32>(2)?;
        for &name in run.versions {
            let version = Version::from_name(name).expect("one of the op's versions");
            let mut plan = self.quantize.plan(gpu, scheme, version, n)?;
            let mut launch = |out: &mut _| plan.launch(gpu, &x_dev, out, &mut params_dev);
            split.require_written(gpu, &mut out, &mut launch, name)?;
            let (kernel, launch_shape) = plan.kernel();
            session.run_version(
                row(name, kernel, launch_shape),
                &mut out,
                &expected,
                |out| plan.launch(gpu, &x_dev, out, &mut params_dev),
            )?;
            // After the runs `session` launched: the poison check above launches only when
            // some element's value is the poison (never for symmetric int8, whose range stops
            // at -127).
            let got = gpu.download(&params_dev)?;
            if got[0] != params.scale || got[1] != params.zero_point as f32 {
                bail!("{name}: scale and zero point {got:?}, the CPU reference has {params:?}");
            }
        }
        Ok(session.finish())
    }

    /// Dequantizes the reference's `q` with its parameters; the f32 product is exact to
    /// compare.
    fn dequantize<Q: Element>(
        &self,
        run: &Run,
        scheme: Scheme,
        rows: usize,
        cols: usize,
        (params, q): (QuantParams, Vec<Q>),
    ) -> Result<DayReport> {
        let gpu = run.gpu;
        let n = q.len();
        let reference: Vec<f64> = qref::dequantize(&q, params)
            .iter()
            .map(|&v| f64::from(v))
            .collect();
        let shape = [rows, cols];
        let expected = Expected::full(&reference, &shape, Tolerance::EXACT);
        let mut session = run.session(run.problem(
            format!(
                "{rows} x {cols} {} -> f32, (q - {}) x {:.6e}",
                Q::NAME,
                params.zero_point,
                params.scale
            ),
            format!("dequantize/{}/{rows}x{cols}", Q::NAME),
            5 * n as u64,
        ))?;
        let params = [params.scale, params.zero_point as f32];
        session.save_input("q", &shape, &q)?;
        session.save_input("params", &[2], &params)?;
        session.save_reference(&shape, &reference)?;
        let q_dev = gpu.upload(&q)?;
        let params_dev = gpu.upload(&params)?;
        let mut out = gpu.alloc_poisoned::<f32>(n)?;
        let plan = self.quantize.plan_dequantize(scheme, n)?;
        session.run_version(
            row(DEQUANTIZE_VERSION, plan.kernel, plan.shape),
            &mut out,
            &expected,
            |out| plan.launch(gpu, &q_dev, &params_dev, out),
        )?;
        Ok(session.finish())
    }

    /// The INT8 matmul: exact against an i64 reference, in full for small problems and at
    /// sampled outputs (edges included) for large ones.
    fn matmul(&self, run: &Run, s: Shape, za: i32, zb: i32) -> Result<DayReport> {
        use common::reference::matmul::{FULL_REFERENCE_MAX_MACS, RANDOM_SAMPLES, sample_outputs};
        let (gpu, seed) = (run.gpu, run.seed());
        let Shape { m, n, k } = s;
        let a: Vec<i8> = inputs::uniform(m * k, -128.0, 127.0, seed.wrapping_add(10));
        let b_t: Vec<i8> = inputs::uniform(n * k, -128.0, 127.0, seed.wrapping_add(11));
        let at = if m * n * k <= FULL_REFERENCE_MAX_MACS {
            None
        } else {
            Some(sample_outputs(m, n, RANDOM_SAMPLES, seed.wrapping_add(12)))
        };
        let values: Vec<f64> = qref::int8_matmul(&a, &b_t, za, zb, m, n, k, at.as_deref())
            .into_iter()
            .map(|v| v as f64)
            .collect();
        let out_shape = [m, n];
        let expected = Expected {
            values: &values,
            shape: &out_shape,
            tolerance: Tolerance::EXACT,
            at: at.as_deref(),
        };
        let checked = if at.is_some() {
            "sampled outputs checked"
        } else {
            "every output checked"
        };
        let mut problem = run.problem(
            format!("int8 matmul {m} x {n} x {k}, zero points {za}, {zb}, int32 out ({checked})"),
            format!("int8_matmul/i8/{m}x{n}x{k}"),
            s.bytes(),
        );
        problem.flops_per_run = Some(s.ops());
        let mut session = run.session(problem)?;
        session.save_input("a", &[m, k], &a)?;
        session.save_input("b_t", &[n, k], &b_t)?;
        if at.is_none() {
            session.save_reference(&out_shape, &values)?;
        }
        let a_dev = gpu.upload(&a)?;
        let b_dev = gpu.upload(&b_t)?;
        let mut c = gpu.alloc_poisoned::<i32>(m * n)?;
        for &name in run.versions {
            let version = int8_matmul::Version::from_name(name).expect("one of the op's versions");
            let plan = self.matmul.plan(version, s)?;
            session.run_version(row(name, plan.kernel, plan.shape), &mut c, &expected, |c| {
                plan.launch(gpu, &a_dev, &b_dev, c, za, zb)
            })?;
        }
        Ok(session.finish())
    }
}
