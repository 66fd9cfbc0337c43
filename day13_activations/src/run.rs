//! The day's run (`common::family::ops`): its flags, one problem per op, and how each is
//! checked against the f64 reference and timed.

use anyhow::{Context, Result};
use common::cli::bytes_for;
use common::dtype::Dtype;
use common::family::ops::{Checked, OpsDay, Run, Selection};
use common::measure::report::DayReport;
use common::session::Expected;
use common::{Element, Gpu, UsageError, sizes};
use half::{bf16, f16};

use crate::problem::{HostInputs, bytes_per_run, key};
use crate::{Activations, DEFAULT_COLS, DEFAULT_ROWS, DTYPES, Op, OpParams, VERSIONS};

/// The day's flags beside the common ones.
#[derive(clap::Args)]
pub struct Args {
    /// Ops to run (comma-separated); default: the day's fourteen problems.
    #[arg(long, value_enum, value_delimiter = ',', value_name = "OP[,OP]")]
    pub op: Vec<Op>,
    /// Rows of every problem.
    #[arg(long, default_value_t = DEFAULT_ROWS, value_parser = sizes::positive_u64)]
    pub rows: u64,
    /// Columns of every problem (the bias length of bias_dropout_add).
    #[arg(long, default_value_t = DEFAULT_COLS, value_parser = sizes::positive_u64)]
    pub cols: u64,
    /// Storage type (math is f32); default: bf16, f16 for bias_dropout_add.
    #[arg(long, value_enum)]
    pub dtype: Option<Dtype>,
    /// leaky_relu's slope for x <= 0 [default: 0.01, torch's].
    #[arg(long, value_parser = finite_f32, allow_hyphen_values = true)]
    pub negative_slope: Option<f32>,
    /// hardtanh's lower bound [default: -1].
    #[arg(long, value_parser = finite_f32, allow_hyphen_values = true)]
    pub min_val: Option<f32>,
    /// hardtanh's upper bound [default: 1].
    #[arg(long, value_parser = finite_f32, allow_hyphen_values = true)]
    pub max_val: Option<f32>,
}

/// One op on `rows x cols` of `dtype`.
pub struct Problem {
    op: Op,
    dtype: Dtype,
    rows: usize,
    cols: usize,
    params: OpParams,
}

/// A scalar flag's value: a number that is finite once it is an f32, as the kernels take it
/// (`1e39` would be inf).
fn finite_f32(text: &str) -> Result<f32, String> {
    let v: f32 = text.parse().map_err(|_| "not a number".to_string())?;
    if v.is_finite() {
        Ok(v)
    } else {
        Err("not finite as an f32".to_string())
    }
}

/// The rectifiers' scalars from the flags, refused where they cannot run: a flag for an op
/// that is not in the run (it would change nothing in silence), or bounds out of order.
fn op_params(args: &Args, ops: &[Op]) -> Result<OpParams, UsageError> {
    let flags = [
        ("--negative-slope", "negative_slope", args.negative_slope),
        ("--min-val", "min_val", args.min_val),
        ("--max-val", "max_val", args.max_val),
    ];
    for (flag, scalar, value) in flags {
        let takers = OpParams::takers(scalar);
        if value.is_some() && !ops.iter().any(|op| takers.contains(op)) {
            let names: Vec<&str> = takers.iter().map(|op| op.name()).collect();
            return Err(UsageError::new(format!(
                "{flag} applies to {} only; name one with --op",
                names.join(" and ")
            )));
        }
    }
    let defaults = OpParams::default();
    let params = OpParams {
        negative_slope: args.negative_slope.unwrap_or(defaults.negative_slope),
        min_val: args.min_val.unwrap_or(defaults.min_val),
        max_val: args.max_val.unwrap_or(defaults.max_val),
    };
    if params.min_val > params.max_val {
        return Err(UsageError::new(format!(
            "--min-val {} is greater than --max-val {} (hardtanh needs min_val <= max_val)",
            params.min_val, params.max_val
        )));
    }
    Ok(params)
}

impl OpsDay for Activations {
    common::day_header!("activations");
    const OPS: &'static [&'static str] = &Op::NAMES;
    /// The GELUs and SwiGLU of a transformer's MLP, two backward passes, the challenge's fused
    /// bias-dropout-add, and the rectifiers and SiLU (ReLU, leaky ReLU, HardTanh, SiLU) with
    /// their backward: each is a goal of its own (at least 95% of the copy, ahead of torch),
    /// so each gets its row.
    const DEFAULT_OPS: &'static [&'static str] = &[
        "gelu_tanh",
        "gelu_erf",
        "swiglu",
        "gelu_tanh_bwd",
        "swiglu_bwd",
        "bias_dropout_add",
        "relu",
        "relu_bwd",
        "leaky_relu",
        "leaky_relu_bwd",
        "hardtanh",
        "hardtanh_bwd",
        "silu",
        "silu_bwd",
    ];
    type Args = Args;
    type Problem = Problem;

    fn versions(op: &str) -> &'static [&'static str] {
        Op::from_name(op).expect("one of the day's ops").versions()
    }

    fn kernel_names() -> Vec<&'static str> {
        VERSIONS.to_vec()
    }

    fn asked_ops(args: &Args) -> Vec<&str> {
        args.op.iter().map(|op| op.name()).collect()
    }

    fn problems(args: &Args, selection: &Selection) -> Result<Vec<Checked<Problem>>> {
        if let Some(dtype) = args.dtype
            && !DTYPES.contains(&dtype)
        {
            return Err(UsageError::new(format!("day13 has no {dtype} kernels")).into());
        }
        let ops: Vec<Op> = selection
            .ops()
            .iter()
            .map(|c| Op::from_name(c.op).expect("one of the day's ops"))
            .collect();
        let params = op_params(args, &ops)?;
        let what = "--rows x --cols";
        let (rows, cols) = (args.rows as usize, args.cols as usize);
        let elements = sizes::product(what, &[rows, cols])? as u64;
        let mut problems = Vec::with_capacity(ops.len());
        for op in ops {
            let dtype = args.dtype.unwrap_or_else(|| op.default_dtype());
            let size = dtype.size() as u64;
            let tensors = (op.inputs().len() + op.outputs()) as u64;
            // Inputs and outputs on the host, the f64 reference.
            let host = bytes_for(what, elements, tensors * size + 8 * 2 + 1)?;
            // Inputs, outputs and the output's copy, and the dropout mask (a byte per element).
            let device = bytes_for(what, elements, (tensors + 1) * size + 1)?;
            let problem = Problem {
                op,
                dtype,
                rows,
                cols,
                params,
            };
            problems.push(Checked::new(op.name(), op.name(), host, device, problem)?);
        }
        Ok(problems)
    }

    fn load(gpu: &Gpu) -> Result<Self> {
        Activations::load(gpu)
    }

    fn run(&self, run: &Run, problem: Problem) -> Result<DayReport> {
        match problem.dtype {
            Dtype::F32 => self.problem::<f32>(run, &problem),
            Dtype::F16 => self.problem::<f16>(run, &problem),
            Dtype::Bf16 => self.problem::<bf16>(run, &problem),
            integer => unreachable!("refused with the problems: {integer}"),
        }
    }
}

impl Activations {
    fn problem<T: Element>(&self, run: &Run, p: &Problem) -> Result<DayReport> {
        let (op, rows, cols, params) = (p.op, p.rows, p.cols, p.params);
        let host = HostInputs::<T>::random(op, rows, cols, run.seed()).with_params(params);
        let reference = host.reference();
        let mut description = format!("{}, {rows} x {cols}, {}", op.name(), T::NAME);
        for scalar in params.describe(op) {
            description.push_str(", ");
            description.push_str(&scalar);
        }
        let mut session = run.session(run.problem(
            description,
            key(op, T::DTYPE, rows, cols, &params),
            bytes_per_run(op, T::DTYPE.size(), rows, cols),
        ))?;
        for (name, t) in op.inputs().iter().zip(&host.tensors) {
            let shape = if *name == "bias" {
                vec![cols]
            } else {
                vec![rows, cols]
            };
            session.save_input(name, &shape, t)?;
        }
        if let Some(mask) = &host.mask {
            session.save_input("mask", &[rows, cols], mask)?;
            // The kept elements' scale, 1 / (1 - p), as the kernel gets it.
            session.save_input("scale", &[1], &[host.scale])?;
        }
        let inputs = host.upload(run.gpu)?;
        drop(host);
        let out_shape = [op.outputs(), rows, cols];
        let mut out = run.gpu.alloc_poisoned::<T>(op.outputs() * rows * cols)?;
        for &name in run.versions {
            let plan = self.plan::<T>(run.gpu, name, &inputs);
            let Some(mut plan) = session
                .plan_or_skip(name, plan)
                .with_context(|| format!("planning `{name}` for {}", op.name()))?
            else {
                continue;
            };
            let tolerance = op.tolerance::<T>(name);
            let expected = Expected::full(&reference, &out_shape, tolerance);
            let version = plan.version(name);
            let launch = &mut plan.launch;
            session.run_version(version, &mut out, &expected, |out| launch(out))?;
        }
        session.save_reference(&out_shape, &reference)?;
        Ok(session.finish())
    }
}
