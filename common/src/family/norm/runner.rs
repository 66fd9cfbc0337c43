//! The command line of a normalization day and its run: check and time every version on
//! every problem, then the table.

use super::*;
use crate::family::runner::{day_problem, rows_cols};

/// The flags of the normalization days, beside the common ones.
#[derive(clap::Args, Debug, Clone)]
pub struct NormArgs {
    #[command(flatten)]
    pub problem: crate::family::runner::RowsArgs,
    /// Only this pass; both by default.
    #[arg(long, value_enum)]
    pub pass: Option<Pass>,
    /// Added to the mean square (variance) under the square root; default: the day's (1e-6
    /// for RMSNorm, 1e-5 for LayerNorm, as torch).
    #[arg(long)]
    pub eps: Option<f64>,
}

/// The whole `main` of a norm day.
pub fn main<D: NormDay>() -> ExitCode {
    family_main(
        D::DAY,
        D::TITLE,
        &[D::FORWARD_VERSIONS, D::BACKWARD_VERSIONS].concat(),
        run::<D>,
    )
}

fn run<D: NormDay>(family: &NormArgs, common: &CommonArgs) -> Result<()> {
    let all: Vec<&'static str> = [D::FORWARD_VERSIONS, D::BACKWARD_VERSIONS].concat();
    let versions = common.select_versions(&all)?;
    let eps = eps_of::<D>(family)?;
    let shapes: Vec<Shape> = problems::<D>(family)?
        .into_iter()
        .filter(|s| {
            versions_of::<D>(s.pass)
                .iter()
                .any(|v| versions.contains(v))
        })
        .collect();
    if shapes.is_empty() {
        // Only --pass and --kernel can empty the list: the versions chosen are all of the
        // other pass.
        let chosen = versions.join(",");
        let msg = match family.pass {
            Some(Pass::Forward) => format!("--kernel {chosen} has no version of the forward pass"),
            Some(Pass::Backward) => {
                format!("--kernel {chosen} has no version of the backward pass")
            }
            None => format!("--kernel {chosen} runs none of {}'s problems", D::DAY),
        };
        return Err(crate::UsageError::new(msg).into());
    }
    // Every size is checked here, before the GPU is opened.
    let mut device_bytes = Vec::with_capacity(shapes.len());
    for shape in &shapes {
        let what = "--rows x --cols";
        let elements = sizes::product(what, &[shape.rows, shape.cols])? as u64;
        // The backward's output holds dweight (and dbias) after dx.
        sizes::product(what, &[sizes::sum(what, &[shape.rows, 2])?, shape.cols])?;
        // Inputs and output in T, the reference (and its f64 copies of the inputs).
        let host = bytes_for(what, elements, 4 * shape.dtype.size() as u64 + 4 * 8)?;
        check_host_fits(&shape.describe(), host)?;
        // x, dy and the output, plus small vectors and partial sums.
        let device = bytes_for(what, elements, 3 * shape.dtype.size() as u64)?;
        device_bytes.push(device.saturating_add(64 << 20));
    }
    let gpu = common.open_gpu()?;
    for (shape, &device) in shapes.iter().zip(&device_bytes) {
        gpu.check_fits(&shape.describe(), device)?;
    }
    let day = D::load(&gpu)?;
    let mut reports = Vec::new();
    for shape in &shapes {
        let run = Run {
            gpu: &gpu,
            common,
            day: &day,
            versions: &versions,
            eps,
        };
        reports.push(match shape.dtype {
            Dtype::F32 => run.problem::<f32>(shape)?,
            Dtype::F16 => run.problem::<f16>(shape)?,
            Dtype::Bf16 => run.problem::<bf16>(shape)?,
            integer => unreachable!("normalizations take float dtypes only, not {integer}"),
        });
    }
    finish_reports(common, &reports)
}

/// `--eps`, rounded to the f32 the kernels get, or the day's default.
fn eps_of<D: NormDay>(args: &NormArgs) -> Result<f32> {
    let eps = args.eps.unwrap_or(D::DEFAULT_EPS);
    if !(eps.is_finite() && eps >= 0.0 && eps <= f32::MAX as f64) {
        return Err(crate::UsageError::new(format!(
            "--eps {eps:?}: must be a finite f32, at least 0"
        ))
        .into());
    }
    Ok(eps as f32)
}

/// The shapes to run: the one given (both passes unless --pass), or the day's defaults.
fn problems<D: NormDay>(args: &NormArgs) -> Result<Vec<Shape>> {
    if let Some(dtype) = args.problem.dtype
        && dtype.is_integer()
    {
        return Err(crate::UsageError::new(format!("{} has no {dtype} kernels", D::DAY)).into());
    }
    let mut shapes: Vec<Shape> = match (args.problem.rows, args.problem.cols) {
        (Some(rows), Some(cols)) => {
            let (rows, cols) = rows_cols(rows, cols)?;
            let dtype = args.problem.dtype.unwrap_or(Dtype::Bf16);
            [Pass::Forward, Pass::Backward]
                .into_iter()
                .map(|pass| Shape::new(pass, rows, cols, dtype))
                .collect()
        }
        _ => D::DEFAULT_PROBLEMS.to_vec(),
    };
    if let Some(dtype) = args.problem.dtype {
        shapes.iter_mut().for_each(|s| s.dtype = dtype);
        shapes.dedup();
    }
    if let Some(pass) = args.pass {
        shapes.retain(|s| s.pass == pass);
    }
    Ok(shapes)
}

/// One day's run over its problems.
struct Run<'r, D> {
    gpu: &'r Gpu,
    common: &'r CommonArgs,
    day: &'r NormKernels<D>,
    versions: &'r [&'static str],
    eps: f32,
}

impl<D: NormDay> Run<'_, D> {
    /// Checks and times every selected version of the shape's pass.
    fn problem<T: Element>(&self, shape: &Shape) -> Result<DayReport> {
        let (rows, cols) = (shape.rows, shape.cols);
        let host = HostInputs::<T>::new(rows, cols, self.common.seed);
        let problem = day_problem(
            D::DAY,
            D::TITLE,
            shape.describe(),
            key(D::KIND, shape),
            bytes_per_run(D::KIND, shape),
        );
        let mut session = Session::new(self.gpu, self.common, problem)?;
        session.save_input("x", &[rows, cols], &host.x)?;
        session.save_input("weight", &[cols], &host.weight)?;
        let inputs = host.upload(self.gpu, D::KIND, shape.pass, self.eps)?;
        let versions = versions_of::<D>(shape.pass)
            .iter()
            .copied()
            .filter(|v| self.versions.contains(v));
        match shape.pass {
            Pass::Forward => {
                if D::KIND == Kind::Layer {
                    session.save_input("bias", &[cols], &host.bias)?;
                }
                let reference = host.forward(D::KIND, rows, cols, self.eps);
                drop(host);
                let mut out = self.gpu.alloc_poisoned::<T>(rows * cols)?;
                let out_shape = [rows, cols];
                for name in versions {
                    let Some(mut plan) = self.plan::<T>(&mut session, name, rows, cols)? else {
                        continue;
                    };
                    let tolerance = reference::forward_tolerance::<T>(&reference, plan.row_terms);
                    let expected = Expected::full(&reference.y, &out_shape, tolerance);
                    let version = Version {
                        name,
                        kernel: Some((plan.kernel, plan.shape)),
                        global_bytes: None,
                    };
                    let launch = &mut plan.launch;
                    session.run_version(version, &mut out, &expected, |out| {
                        launch(&inputs, out, None)
                    })?;
                }
                session.save_reference(&out_shape, &reference.y)?;
            }
            Pass::Backward => {
                session.save_input("dy", &[rows, cols], &host.dy)?;
                let grads = host.backward(D::KIND, rows, cols, self.eps);
                drop(host);
                let len = backward_len(D::KIND, rows, cols);
                let mut out = self.gpu.alloc_poisoned::<T>(len)?;
                let out_shape = [len / cols, cols];
                for name in versions {
                    let Some(mut plan) = self.plan::<T>(&mut session, name, rows, cols)? else {
                        continue;
                    };
                    let tolerances =
                        reference::backward_tolerances::<T>(&grads, plan.row_terms, plan.col_terms);
                    let version = Version {
                        name,
                        kernel: Some((plan.kernel, plan.shape)),
                        global_bytes: None,
                    };
                    let check = |got: &[T]| check_backward(got, &grads, cols, tolerances);
                    let launch = &mut plan.launch;
                    session.run_version_checked(version, &mut out, &out_shape, check, |out| {
                        launch(&inputs, out, None)
                    })?;
                }
                session.save_reference(&out_shape, &grads.concatenated())?;
            }
        }
        Ok(session.finish())
    }

    /// The version's plan, or None (said on the console) when it refuses the shape.
    fn plan<T: Element>(
        &self,
        session: &mut Session,
        name: &str,
        rows: usize,
        cols: usize,
    ) -> Result<Option<Plan<'_, T>>> {
        match self.day.plan::<T>(self.gpu, name, rows, cols, self.eps) {
            Ok(plan) => Ok(Some(plan)),
            Err(e) if e.is::<Refused>() => {
                session.skip_version(name, &e.to_string());
                Ok(None)
            }
            Err(e) => Err(e.context(format!("planning `{name}` on {rows} x {cols}"))),
        }
    }
}

/// Requests every normalization day refuses before opening a GPU, with exit 2 and one `error:`
/// line saying this: `(arguments, what the error must say)`. Each day's `tests/cli.rs`
/// runs them (`testing::assert_all_refused`) beside `runner::ROWS_REFUSED` and what only that
/// day refuses.
pub const REFUSED_REQUESTS: &[(&str, &str)] = &[
    (
        "--rows 4 --cols 4 --dtype i8",
        "invalid value 'i8' for '--dtype",
    ),
    (
        "--rows 4 --cols 4 --eps nan",
        "--eps NaN: must be a finite f32",
    ),
    (
        "--rows 4 --cols 4 --eps inf",
        "--eps inf: must be a finite f32",
    ),
    (
        "--rows 4 --cols 4 --eps=-1",
        "--eps -1.0: must be a finite f32",
    ),
    (
        "--rows 4 --cols 4 --eps 1e300",
        "--eps 1e300: must be a finite f32",
    ),
    (
        "--pass forward --kernel bwd_split",
        "--kernel bwd_split has no version of the forward pass",
    ),
    (
        "--pass backward --kernel naive",
        "--kernel naive has no version of the backward pass",
    ),
    (
        "--rows 4 --cols 4 --kernel nope",
        "there is no kernel `nope` here",
    ),
];
