//! The day's run (`common::family::ops`): its flags, its four default problems or the one
//! `--op` asks for with its sizes, and how each is checked against the f64 reference and
//! timed.

use anyhow::{Context, Result};
use common::dtype::Dtype;
use common::family::ops::{Checked, OpsDay, Run, Selection};
use common::measure::report::DayReport;
use common::{Element, Gpu, UsageError, sizes};
use half::bf16;

use crate::conv2d::MAX_SIDE;
use crate::problem::{description, key};
use crate::reference::Conv2dShape;
use crate::{Conv, DTYPES, HostInputs, MAX_FILTER_2D, MAX_WIDTH_1D, Op, Shape, VERSIONS};

/// The day's flags beside the common ones.
#[derive(clap::Args)]
pub struct Args {
    /// The op; default: the day's four problems (conv1d f32 and bf16, conv2d, conv2d_nchw).
    #[arg(long, value_enum)]
    pub op: Option<Op>,
    /// Storage type (math is f32); default: the op's (bf16 for conv2d_nchw, else f32).
    #[arg(long, value_enum, requires = "op")]
    pub dtype: Option<Dtype>,
    /// conv1d: the signal's length.
    #[arg(long, requires = "op", value_parser = sizes::positive)]
    pub length: Option<usize>,
    /// conv1d: the filter's taps, 1 to 31.
    #[arg(long, requires = "op", value_parser = sizes::positive)]
    pub width: Option<usize>,
    /// conv2d, conv2d_nchw: the image, HEIGHTxWIDTH.
    #[arg(long, requires = "op", value_parser = two_sizes)]
    pub image: Option<(usize, usize)>,
    /// conv2d, conv2d_nchw: the filter, KHxKW, each side 1 to 7.
    #[arg(long, requires = "op", value_parser = two_sizes)]
    pub filter: Option<(usize, usize)>,
    /// conv2d_nchw: images (N).
    #[arg(long, requires = "op", value_parser = sizes::positive)]
    pub batch: Option<usize>,
    /// conv2d_nchw: input channels.
    #[arg(long, requires = "op", value_parser = sizes::positive)]
    pub in_channels: Option<usize>,
    /// conv2d_nchw: output channels.
    #[arg(long, requires = "op", value_parser = sizes::positive)]
    pub out_channels: Option<usize>,
}

/// One op on one shape in one storage type.
pub struct Problem {
    op: Op,
    dtype: Dtype,
    shape: Shape,
}

/// `AxB` with both at least 1.
fn two_sizes(text: &str) -> Result<(usize, usize), String> {
    let (a, b) = text
        .split_once('x')
        .ok_or_else(|| format!("`{text}` is not of the form AxB"))?;
    Ok((sizes::positive(a)?, sizes::positive(b)?))
}

impl Args {
    fn channel_flags(&self) -> bool {
        self.batch.is_some() || self.in_channels.is_some() || self.out_channels.is_some()
    }

    /// The shape of `op` from its flags and its default shape, every size checked.
    fn shape(&self, op: Op) -> Result<Shape, UsageError> {
        let not_for = |flag: &str, set: bool| match set {
            true => Err(UsageError::new(format!(
                "{flag} is not a size of {}",
                op.name()
            ))),
            false => Ok(()),
        };
        let channels = "--batch/--in-channels/--out-channels";
        match op.default_shape() {
            Shape::Conv1d { n, width } => {
                let image_flags = self.image.is_some() || self.filter.is_some();
                not_for("--image/--filter", image_flags)?;
                not_for(channels, self.channel_flags())?;
                let width = sizes::at_most("--width", self.width.unwrap_or(width), MAX_WIDTH_1D)?;
                let n = self.length.unwrap_or(n);
                Ok(Shape::Conv1d { n, width })
            }
            Shape::Conv2d(d) => {
                not_for(
                    "--length/--width",
                    self.length.is_some() || self.width.is_some(),
                )?;
                if op == Op::Conv2d {
                    not_for(channels, self.channel_flags())?;
                }
                let (height, width) = self.image.unwrap_or((d.height, d.width));
                let (kh, kw) = self.filter.unwrap_or((d.kernel_h, d.kernel_w));
                let shape = Conv2dShape {
                    batch: self.batch.unwrap_or(d.batch),
                    in_channels: self.in_channels.unwrap_or(d.in_channels),
                    out_channels: self.out_channels.unwrap_or(d.out_channels),
                    height: sizes::at_most("--image height", height, MAX_SIDE)?,
                    width: sizes::at_most("--image width", width, MAX_SIDE)?,
                    kernel_h: sizes::at_most("--filter height", kh, MAX_FILTER_2D)?,
                    kernel_w: sizes::at_most("--filter width", kw, MAX_FILTER_2D)?,
                };
                // The kernels index the filter with 32-bit ints (`smem_halo` reads it from
                // global memory at any size): refused here rather than read out of bounds.
                let what = "the filter (--out-channels x --in-channels x --filter)";
                let filter = [shape.out_channels, shape.in_channels, kh, kw];
                sizes::at_most(what, sizes::product(what, &filter)?, i32::MAX as usize)?;
                Ok(Shape::Conv2d(shape))
            }
        }
    }
}

/// Host bytes (inputs, the reference's values, magnitudes and slack, the downloaded output)
/// and device bytes (x, w, y), or a [`UsageError`] where a product overflows.
fn footprint(dtype: Dtype, shape: &Shape) -> Result<(u64, u64), UsageError> {
    let what = "the problem";
    let (x, w, y) = match shape {
        Shape::Conv1d { n, width } => (*n, *width, *n),
        Shape::Conv2d(s) => {
            let input = [s.batch, s.in_channels, s.height, s.width];
            let weights = [s.out_channels, s.in_channels, s.kernel_h, s.kernel_w];
            let output = [s.batch, s.out_channels, s.height, s.width];
            let product = |dims: &[usize]| sizes::product(what, dims);
            (product(&input)?, product(&weights)?, product(&output)?)
        }
    };
    let size = dtype.size();
    let device = sizes::product(what, &[sizes::sum(what, &[x, w, y])?, size])?;
    let y_bytes = sizes::product(what, &[y, 3 * 8])?;
    let host = sizes::sum(what, &[device, y_bytes, sizes::product(what, &[x, 8])?])?;
    Ok((host as u64, device as u64))
}

impl OpsDay for Conv {
    common::day_header!("convolution");
    const OPS: &'static [&'static str] = &Op::NAMES;
    type Args = Args;
    type Problem = Problem;

    fn load(gpu: &Gpu) -> Result<Self> {
        Conv::load(gpu)
    }

    /// Every op has every version.
    fn versions(_: &str) -> &'static [&'static str] {
        VERSIONS
    }

    fn asked_ops(args: &Args) -> Vec<&str> {
        args.op.iter().map(|op| op.name()).collect()
    }

    fn problems(args: &Args, _: &Selection) -> Result<Vec<Checked<Problem>>> {
        let requested: Vec<(Op, Dtype, Shape)> = match args.op {
            // conv1d in both dtypes, then each 2D op in its own.
            None => [(Op::Conv1d, Dtype::F32), (Op::Conv1d, Dtype::Bf16)]
                .into_iter()
                .chain([Op::Conv2d, Op::Conv2dNchw].map(|op| (op, op.default_dtype())))
                .map(|(op, dtype)| (op, dtype, op.default_shape()))
                .collect(),
            Some(op) => {
                let dtype = args.dtype.unwrap_or(op.default_dtype());
                if !DTYPES.contains(&dtype) {
                    let why = format!("day21 has no {dtype} kernels (f32, bf16)");
                    return Err(UsageError::new(why).into());
                }
                vec![(op, dtype, args.shape(op)?)]
            }
        };
        let mut problems = Vec::with_capacity(requested.len());
        for (op, dtype, shape) in requested {
            let (host, device) = footprint(dtype, &shape)?;
            let problem = Problem { op, dtype, shape };
            problems.push(Checked::new(op.name(), op.name(), host, device, problem)?);
        }
        Ok(problems)
    }

    fn run(&self, run: &Run, p: Problem) -> Result<DayReport> {
        match p.dtype {
            Dtype::F32 => self.problem::<f32>(run, p.op, p.shape),
            _ => self.problem::<bf16>(run, p.op, p.shape),
        }
    }
}

impl Conv {
    fn problem<T: Element>(&self, run: &Run, op: Op, shape: Shape) -> Result<DayReport> {
        let gpu = run.gpu;
        let host = HostInputs::<T>::random(shape, run.seed());
        let reference = host.reference();
        let check = host.check(&reference);
        // No FLOPs in the problem, on purpose: with them the table would show TFLOP/s against
        // the copy ceiling; every problem here is compared with the copy. The FLOPs are in the
        // description, and the TFLOP/s printed below the table.
        let mut session = run.session(run.problem(
            description(op, T::DTYPE, &shape),
            key(op, T::DTYPE, &shape),
            shape.elements_moved() * T::DTYPE.size() as u64,
        ))?;
        session.save_input("x", &shape.input_dims(), &host.x)?;
        session.save_input("w", &shape.weight_dims(), &host.w)?;
        let (x, w) = host.upload(gpu)?;
        drop(host);
        let out_dims = shape.output_dims();
        let mut y = gpu.alloc_poisoned::<T>(shape.output_len())?;
        for &name in run.versions {
            let plan = self.plan::<T>(gpu, name, &shape);
            let Some(mut plan) = session
                .plan_or_skip(name, plan)
                .with_context(|| format!("planning `{name}` for {}", op.name()))?
            else {
                continue;
            };
            let version = plan.version(name);
            let launch = &mut plan.launch;
            let compare = |got: &[T]| check.compare(got, &reference.values, &out_dims);
            session
                .run_version_checked(version, &mut y, &out_dims, compare, |y| launch(&x, &w, y))?;
        }
        session.save_reference(&out_dims, &reference.values)?;
        let report = session.finish();
        let flops = shape.flops() as f64;
        for row in &report.rows {
            if let Some(t) = row.timing {
                let tflops = flops / (t.median_ms * 1e-3) / 1e12;
                eprintln!(
                    "{:>12}  {tflops:.2} TFLOP/s (2 x multiply-adds)",
                    row.version
                );
            }
        }
        Ok(report)
    }
}
