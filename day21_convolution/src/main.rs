//! `cargo run --release -p day21`: check every convolution version against the f64 reference
//! on the day's four problems (or one `--op` with its sizes), time it, print the tables.

use anyhow::Result;
use clap::Parser;
use common::cli::{CommonArgs, check_host_fits, finish_reports, run_main};
use common::dtype::Dtype;
use common::measure::report::DayReport;
use common::reference::conv::Conv2dShape;
use common::session::{Problem, Refused, Session, Version};
use common::{Element, Gpu, UsageError, sizes};
use day21::conv2d::MAX_SIDE;
use day21::problem::{description, key};
use day21::{Conv, DTYPES, HostInputs, MAX_FILTER_2D, MAX_WIDTH_1D, Op, Shape, VERSIONS};
use half::bf16;

/// Day 21: 1D and 2D convolution, "same" size (torch's padding="same"), stride 1, no bias.
#[derive(Parser)]
#[command(version, about)]
struct Args {
    /// The op; default: the day's four problems (conv1d f32 and bf16, conv2d, conv2d_nchw).
    #[arg(long, value_enum)]
    op: Option<Op>,
    /// Storage type (math is f32); default: the op's (bf16 for conv2d_nchw, else f32).
    #[arg(long, value_enum, requires = "op")]
    dtype: Option<Dtype>,
    /// conv1d: the signal's length.
    #[arg(long, requires = "op", value_parser = sizes::positive)]
    length: Option<usize>,
    /// conv1d: the filter's taps, 1 to 31.
    #[arg(long, requires = "op", value_parser = sizes::positive)]
    width: Option<usize>,
    /// conv2d, conv2d_nchw: the image, HEIGHTxWIDTH.
    #[arg(long, requires = "op", value_parser = two_sizes)]
    image: Option<(usize, usize)>,
    /// conv2d, conv2d_nchw: the filter, KHxKW, each side 1 to 7.
    #[arg(long, requires = "op", value_parser = two_sizes)]
    filter: Option<(usize, usize)>,
    /// conv2d_nchw: images (N).
    #[arg(long, requires = "op", value_parser = sizes::positive)]
    batch: Option<usize>,
    /// conv2d_nchw: input channels.
    #[arg(long, requires = "op", value_parser = sizes::positive)]
    in_channels: Option<usize>,
    /// conv2d_nchw: output channels.
    #[arg(long, requires = "op", value_parser = sizes::positive)]
    out_channels: Option<usize>,
    #[command(flatten)]
    common: CommonArgs,
}

/// `AxB` with both at least 1.
fn two_sizes(text: &str) -> Result<(usize, usize), String> {
    let (a, b) = text
        .split_once('x')
        .ok_or_else(|| format!("`{text}` is not of the form AxB"))?;
    Ok((sizes::positive(a)?, sizes::positive(b)?))
}

fn main() -> std::process::ExitCode {
    run_main(|| run(common::cli::parse_args(&kernel_names())))
}

/// Every version `--kernel` can name, in table order (`--help` lists them).
fn kernel_names() -> Vec<&'static str> {
    VERSIONS.to_vec()
}

/// The problems asked for, every size checked: (op, dtype, shape).
fn problems(args: &Args) -> Result<Vec<(Op, Dtype, Shape)>, UsageError> {
    let Some(op) = args.op else {
        return Ok([(Op::Conv1d, Dtype::F32), (Op::Conv1d, Dtype::Bf16)]
            .into_iter()
            .chain([Op::Conv2d, Op::Conv2dNchw].map(|op| (op, op.default_dtype())))
            .map(|(op, dtype)| (op, dtype, op.default_shape()))
            .collect());
    };
    let dtype = args.dtype.unwrap_or(op.default_dtype());
    if !DTYPES.contains(&dtype) {
        return Err(UsageError::new(format!(
            "day21 has no {dtype} kernels (f32, bf16)"
        )));
    }
    let not_for = |flag: &str, set: bool| match set {
        true => Err(UsageError::new(format!(
            "{flag} is not a size of {}",
            op.name()
        ))),
        false => Ok(()),
    };
    let shape = match (op, op.default_shape()) {
        (_, Shape::Conv1d { n, width }) => {
            not_for(
                "--image/--filter",
                args.image.is_some() || args.filter.is_some(),
            )?;
            not_for("--batch/--in-channels/--out-channels", channel_flags(args))?;
            let width = sizes::at_most("--width", args.width.unwrap_or(width), MAX_WIDTH_1D)?;
            Shape::Conv1d {
                n: args.length.unwrap_or(n),
                width,
            }
        }
        (_, Shape::Conv2d(d)) => {
            not_for(
                "--length/--width",
                args.length.is_some() || args.width.is_some(),
            )?;
            if op == Op::Conv2d {
                not_for("--batch/--in-channels/--out-channels", channel_flags(args))?;
            }
            let (height, width) = args.image.unwrap_or((d.height, d.width));
            let (kh, kw) = args.filter.unwrap_or((d.kernel_h, d.kernel_w));
            let shape = Conv2dShape {
                batch: args.batch.unwrap_or(d.batch),
                in_channels: args.in_channels.unwrap_or(d.in_channels),
                out_channels: args.out_channels.unwrap_or(d.out_channels),
                height: sizes::at_most("--image height", height, MAX_SIDE)?,
                width: sizes::at_most("--image width", width, MAX_SIDE)?,
                kernel_h: sizes::at_most("--filter height", kh, MAX_FILTER_2D)?,
                kernel_w: sizes::at_most("--filter width", kw, MAX_FILTER_2D)?,
            };
            // The kernels index the filter with 32-bit ints (`smem_halo` reads it from global
            // memory at any size): refused here rather than read out of bounds.
            let what = "the filter (--out-channels x --in-channels x --filter)";
            let taps = sizes::product(
                what,
                &[
                    shape.out_channels,
                    shape.in_channels,
                    shape.kernel_h,
                    shape.kernel_w,
                ],
            )?;
            sizes::at_most(what, taps, i32::MAX as usize)?;
            Shape::Conv2d(shape)
        }
    };
    Ok(vec![(op, dtype, shape)])
}

fn channel_flags(args: &Args) -> bool {
    args.batch.is_some() || args.in_channels.is_some() || args.out_channels.is_some()
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
    let host = sizes::sum(
        what,
        &[
            device,
            sizes::product(what, &[y, 3 * 8])?,
            sizes::product(what, &[x, 8])?,
        ],
    )?;
    Ok((host as u64, device as u64))
}

fn run(args: Args) -> Result<()> {
    let versions = args.common.select_versions(VERSIONS)?;
    let problems = problems(&args)?;
    // Every size is checked here, before the GPU is opened.
    let mut device_bytes = Vec::new();
    for (op, dtype, shape) in &problems {
        let (host, device) = footprint(*dtype, shape)?;
        check_host_fits(op.name(), host)?;
        device_bytes.push(device);
    }
    let gpu = args.common.open_gpu()?;
    for ((op, ..), &bytes) in problems.iter().zip(&device_bytes) {
        gpu.check_fits(op.name(), bytes)?;
    }
    let day = Conv::load(&gpu)?;
    let mut reports = Vec::new();
    for &(op, dtype, shape) in &problems {
        reports.push(match dtype {
            Dtype::F32 => problem::<f32>(&gpu, &day, &args.common, &versions, op, shape)?,
            _ => problem::<bf16>(&gpu, &day, &args.common, &versions, op, shape)?,
        });
    }
    finish_reports(&args.common, &reports)
}

fn problem<T: Element>(
    gpu: &Gpu,
    day: &Conv,
    common: &CommonArgs,
    versions: &[&str],
    op: Op,
    shape: Shape,
) -> Result<DayReport> {
    let host = HostInputs::<T>::random(shape, common.seed);
    let reference = host.reference();
    let check = host.check(&reference);
    let mut session = Session::new(
        gpu,
        common,
        Problem {
            day: "day21",
            title: "convolution",
            description: description(op, T::DTYPE, &shape),
            key: key(op, T::DTYPE, &shape),
            bytes_per_run: shape.elements_moved() * T::DTYPE.size() as u64,
            // Left out on purpose: with FLOPs the table would show TFLOP/s against the copy
            // ceiling; every problem here is compared with the copy. The FLOPs are in the
            // description, and the TFLOP/s printed below the table.
            flops_per_run: None,
        },
    )?;
    session.save_input("x", &shape.input_dims(), &host.x)?;
    session.save_input("w", &shape.weight_dims(), &host.w)?;
    let (x, w) = host.upload(gpu)?;
    drop(host);
    let out_dims = shape.output_dims();
    let mut y = gpu.alloc_poisoned::<T>(shape.output_len())?;
    for &name in versions {
        let mut plan = match day.plan::<T>(gpu, name, &shape) {
            Ok(plan) => plan,
            Err(e) if e.is::<Refused>() => {
                session.skip_version(name, &e.to_string());
                continue;
            }
            Err(e) => return Err(e.context(format!("planning `{name}` for {}", op.name()))),
        };
        let version = Version {
            name,
            kernel: Some((plan.kernel, plan.shape)),
            global_bytes: None,
        };
        let launch = &mut plan.launch;
        let compare = |got: &[T]| check.compare(got, &reference.values, &out_dims);
        session.run_version_checked(version, &mut y, &out_dims, compare, |y| launch(&x, &w, y))?;
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
