//! `cargo run --release -p day13`: check every version of every op against the f64 reference
//! on the day's problems (or `--op --rows --cols --dtype`), time it, print the tables.

use anyhow::Result;
use clap::Parser;
use common::cli::{CommonArgs, bytes_for, check_host_fits, finish_reports, run_main};
use common::dtype::Dtype;
use common::measure::report::DayReport;
use common::session::{Expected, Problem, Refused, Session, Version};
use common::{Element, Gpu, UsageError, sizes};
use day13::problem::{HostInputs, bytes_per_run, key};
use day13::{Activations, DTYPES, Op, OpParams, VERSIONS};
use half::{bf16, f16};

/// Day 13: GELU (tanh, erf), SwiGLU, SiLU, ReLU, leaky ReLU, HardTanh and their gradients;
/// fused bias-dropout-add.
#[derive(Parser)]
#[command(version, about)]
struct Args {
    /// Ops to run (comma-separated); default: the day's fourteen problems.
    #[arg(long, value_enum, value_delimiter = ',', value_name = "OP[,OP]")]
    op: Vec<Op>,
    /// Rows of every problem.
    #[arg(long, default_value_t = day13::DEFAULT_ROWS, value_parser = common::sizes::positive_u64)]
    rows: u64,
    /// Columns of every problem (the bias length of bias_dropout_add).
    #[arg(long, default_value_t = day13::DEFAULT_COLS, value_parser = common::sizes::positive_u64)]
    cols: u64,
    /// Storage type (math is f32); default: bf16, f16 for bias_dropout_add.
    #[arg(long, value_enum)]
    dtype: Option<Dtype>,
    /// leaky_relu's slope for x <= 0 [default: 0.01, torch's].
    #[arg(long, value_parser = finite_f32, allow_hyphen_values = true)]
    negative_slope: Option<f32>,
    /// hardtanh's lower bound [default: -1].
    #[arg(long, value_parser = finite_f32, allow_hyphen_values = true)]
    min_val: Option<f32>,
    /// hardtanh's upper bound [default: 1].
    #[arg(long, value_parser = finite_f32, allow_hyphen_values = true)]
    max_val: Option<f32>,
    #[command(flatten)]
    common: CommonArgs,
}

/// The default run: the GELUs and SwiGLU of a transformer's MLP, two backward passes, the
/// challenge's fused bias-dropout-add, and the rectifiers and SiLU (ReLU, leaky ReLU, HardTanh,
/// SiLU) with their backward: each is a goal of its own (at least 95% of the copy, ahead of torch),
/// so each gets its row.
const DEFAULT_OPS: [Op; 14] = [
    Op::GeluTanh,
    Op::GeluErf,
    Op::Swiglu,
    Op::GeluTanhBwd,
    Op::SwigluBwd,
    Op::BiasDropoutAdd,
    Op::Relu,
    Op::ReluBwd,
    Op::LeakyRelu,
    Op::LeakyReluBwd,
    Op::Hardtanh,
    Op::HardtanhBwd,
    Op::Silu,
    Op::SiluBwd,
];

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

fn main() -> std::process::ExitCode {
    run_main(|| run(common::cli::parse_args(&kernel_names())))
}

/// Every version `--kernel` can name, in table order (`--help` lists them).
fn kernel_names() -> Vec<&'static str> {
    VERSIONS.to_vec()
}

fn run(args: Args) -> Result<()> {
    let selected = args.common.select_versions(VERSIONS)?;
    if let Some(dtype) = args.dtype
        && !DTYPES.contains(&dtype)
    {
        return Err(UsageError::new(format!("day13 has no {dtype} kernels")).into());
    }
    // A --kernel choice must leave each op asked for something to run; the default ops it
    // leaves nothing are dropped.
    let has_selected = |op: &Op| selected.iter().any(|v| op.versions().contains(v));
    let ops: Vec<Op> = if args.op.is_empty() {
        DEFAULT_OPS.into_iter().filter(has_selected).collect()
    } else {
        args.op.clone()
    };
    if let Some(op) = args.op.iter().find(|op| !has_selected(op)) {
        return Err(UsageError::new(format!(
            "--kernel {}: {} has none of these versions; it has: {}",
            selected.join(","),
            op.name(),
            op.versions().join(", ")
        ))
        .into());
    }
    if ops.is_empty() {
        return Err(UsageError::new(format!(
            "--kernel {} runs none of the default ops; name one with --op",
            selected.join(",")
        ))
        .into());
    }
    let params = op_params(&args, &ops)?;
    // Every size is checked here, before the GPU is opened.
    let what = "--rows x --cols";
    let elements = sizes::product(what, &[args.rows as usize, args.cols as usize])? as u64;
    let mut problems = Vec::new();
    for &op in &ops {
        let dtype = args.dtype.unwrap_or_else(|| op.default_dtype());
        let size = dtype.size() as u64;
        let tensors = (op.inputs().len() + op.outputs()) as u64;
        // Inputs and outputs on the host, the f64 reference.
        let host = bytes_for(what, elements, tensors * size + 8 * 2 + 1)?;
        check_host_fits(op.name(), host)?;
        // Inputs, outputs and the output's copy, and the dropout mask (a byte per element).
        let device = bytes_for(what, elements, (tensors + 1) * size + 1)?;
        problems.push((op, dtype, device));
    }
    let gpu = args.common.open_gpu()?;
    for &(op, _, device_bytes) in &problems {
        gpu.check_fits(op.name(), device_bytes)?;
    }
    let day = Activations::load(&gpu)?;
    let (rows, cols) = (args.rows as usize, args.cols as usize);
    let mut reports = Vec::new();
    for &(op, dtype, _) in &problems {
        let run = Run {
            gpu: &gpu,
            day: &day,
            common: &args.common,
            versions: &selected,
            params,
        };
        reports.push(match dtype {
            Dtype::F32 => run.problem::<f32>(op, rows, cols)?,
            Dtype::F16 => run.problem::<f16>(op, rows, cols)?,
            Dtype::Bf16 => run.problem::<bf16>(op, rows, cols)?,
            integer => unreachable!("refused above: {integer}"),
        });
    }
    finish_reports(&args.common, &reports)
}

struct Run<'r> {
    gpu: &'r Gpu,
    day: &'r Activations,
    common: &'r CommonArgs,
    versions: &'r [&'static str],
    params: OpParams,
}

impl Run<'_> {
    fn problem<T: Element>(&self, op: Op, rows: usize, cols: usize) -> Result<DayReport> {
        let host =
            HostInputs::<T>::random(op, rows, cols, self.common.seed).with_params(self.params);
        let reference = host.reference();
        let mut description = format!("{}, {rows} x {cols}, {}", op.name(), T::NAME);
        for scalar in self.params.describe(op) {
            description.push_str(", ");
            description.push_str(&scalar);
        }
        let mut session = Session::new(
            self.gpu,
            self.common,
            Problem {
                day: "day13",
                title: "activations",
                description,
                key: key(op, T::DTYPE, rows, cols, &self.params),
                bytes_per_run: bytes_per_run(op, T::DTYPE.size(), rows, cols),
                flops_per_run: None,
            },
        )?;
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
        let inputs = host.upload(self.gpu)?;
        drop(host);
        let out_shape = [op.outputs(), rows, cols];
        let mut out = self.gpu.alloc_poisoned::<T>(op.outputs() * rows * cols)?;
        for &name in self.versions {
            if !op.versions().contains(&name) {
                continue;
            }
            match self.day.plan::<T>(self.gpu, name, &inputs) {
                Ok(mut plan) => {
                    let expected = Expected::full(&reference, &out_shape, plan.tolerance);
                    let version = Version {
                        name,
                        kernel: Some((plan.kernel, plan.shape)),
                        global_bytes: None,
                    };
                    let launch = &mut plan.launch;
                    session.run_version(version, &mut out, &expected, |out| launch(out))?;
                }
                Err(e) if e.is::<Refused>() => session.skip_version(name, &e.to_string()),
                Err(e) => return Err(e.context(format!("planning `{name}` for {}", op.name()))),
            }
        }
        session.save_reference(&out_shape, &reference)?;
        Ok(session.finish())
    }
}
