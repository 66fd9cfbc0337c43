//! `cargo run --release -p day19`: the fused linear + cross-entropy (forward and backward) at
//! T = 8192, Hd = 4096, V = 128256 bf16, and cross-entropy alone on 8192 x 128256 bf16
//! logits; every version checked, timed, and its extra device memory reported.

use anyhow::Result;
use clap::Parser;
use common::check::{self, CheckReport};
use common::cli::{CommonArgs, bytes_for, check_host_fits, finish_reports, run_main};
use common::cublas::Cublas;
use common::reference::cross_entropy::{
    self as reference, CeOptions, IGNORE_INDEX, LinearCeShape, Rounding,
};
use common::report::DayReport;
use common::session::{Expected, Problem, Refused, Session, Version};
use common::{Gpu, UsageError, inputs};
use day19::{
    CE_VERSIONS, CrossEntropy, Day18Gemm, FUSED_VERSIONS, FusedPlan, GemmBackend, LossScratch,
    RowKernel, Shape, default_chunk, make_inputs, make_targets, output_bytes,
    planned_scratch_bytes, tolerance,
};
use half::bf16;

/// Day 19: fused linear + cross-entropy with its backward, chunked over tokens.
#[derive(Parser)]
#[command(version, about)]
struct Args {
    /// Tokens T (rows of H and of the logits).
    #[arg(long, default_value_t = 8192, value_parser = clap::value_parser!(u64).range(1..))]
    tokens: u64,
    /// Hidden size Hd (columns of H and W).
    #[arg(long, default_value_t = 4096, value_parser = clap::value_parser!(u64).range(1..))]
    hidden: u64,
    /// Vocabulary V (rows of W, columns of the logits).
    #[arg(long, default_value_t = 128256, value_parser = clap::value_parser!(u64).range(1..))]
    vocab: u64,
    /// Tokens per chunk of chunked_cublas and chunked_day18 (default: the logits chunk about 4x the size of H,
    /// a power of two, at least 128 rows).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    chunk: Option<u64>,
    #[arg(long, default_value_t = 0.0)]
    label_smoothing: f64,
    /// Coefficient of the z-loss (loss += z * lse^2 per token).
    #[arg(long, default_value_t = 0.0)]
    z_loss: f64,
    /// Fraction of the random targets set to the ignore index (-100).
    #[arg(long, default_value_t = 0.0)]
    ignore_fraction: f64,
    #[command(flatten)]
    common: CommonArgs,
}

/// Problems whose full f64 reference (about 2 T V Hd multiply-adds) is cheap enough; larger
/// ones are checked on sampled dH rows, and the chunked version against the naive one.
const FULL_CHECK_WORK: u64 = 1 << 31;
/// dH rows of the sampled check (one thread each, about a second each at the default size).
const SAMPLED_TOKENS: usize = 4;

fn main() -> std::process::ExitCode {
    run_main(|| run(Args::parse()))
}

fn run(args: Args) -> Result<()> {
    let shape = Shape {
        tokens: args.tokens as usize,
        hidden: args.hidden as usize,
        vocab: args.vocab as usize,
    };
    let opts = CeOptions {
        label_smoothing: args.label_smoothing,
        z_loss: args.z_loss,
        ignore_index: IGNORE_INDEX,
    };
    day19::validate_options(&opts).map_err(|e| UsageError::new(e.to_string()))?;
    if !(0.0..=1.0).contains(&args.ignore_fraction) {
        return Err(UsageError::new("--ignore-fraction must be in [0, 1]").into());
    }
    if shape.vocab > i32::MAX as usize {
        return Err(UsageError::new("targets are i32: V must be below 2^31").into());
    }
    let all: Vec<&str> = FUSED_VERSIONS.iter().chain(CE_VERSIONS).copied().collect();
    let selected = args.common.select_versions(&all)?;
    let fused: Vec<&str> = selected
        .iter()
        .copied()
        .filter(|v| FUSED_VERSIONS.contains(v))
        .collect();
    let ce_only: Vec<&str> = selected
        .iter()
        .copied()
        .filter(|v| CE_VERSIONS.contains(v))
        .collect();

    let (t, hd, v) = (args.tokens, args.hidden, args.vocab);
    let h_w = bytes_for("(T + V) x Hd", t.saturating_add(v), hd)?;
    let logits = bytes_for("T x V", t, v)?;
    // Host: H, W and the gradients in bf16, W (sampled check) or the naive output (the
    // chunked check) in f64; the CE-only logits in bf16 with their f64 reference.
    check_host_fits(
        "the inputs and references",
        h_w.saturating_mul(2 + 2 + 8) + logits.saturating_mul(2 + 2 + 8),
    )?;
    let gpu = Gpu::open(args.common.device)?;
    let ce = CrossEntropy::load(&gpu)?;
    let mut reports = Vec::new();
    if !fused.is_empty() {
        // H, W, dH, dW in bf16; the chunk's logits come on top, checked per version.
        gpu.check_fits("H, W and their gradients", 2 * h_w * 2)?;
        reports.push(run_fused(&gpu, &ce, &args, shape, &opts, &fused)?);
    }
    if !ce_only.is_empty() {
        gpu.check_fits("the logits and their gradient", 2 * logits * 2)?;
        reports.push(run_ce_only(&gpu, &ce, &args, shape, &opts, &ce_only)?);
    }
    finish_reports(&args.common, &reports)
}

fn gib(bytes: u64) -> f64 {
    bytes as f64 / (1u64 << 30) as f64
}

fn free_bytes(gpu: &Gpu) -> Result<u64> {
    Ok(gpu.ctx.mem_get_info()?.0 as u64)
}

/// What the console says about a version's memory: planned scratch, the fall in free device
/// memory across its plan and runs (cuBLAS's workspace included), and scratch + outputs, the
/// figure torch's `max_memory_allocated` gives the peers.
fn print_memory(name: &str, scratch: u64, free_before: u64, free_after: u64, outputs: u64) {
    eprintln!(
        "{name:>14}  extra device memory: scratch {:.3} GiB planned, free memory fell {:.3} GiB \
         (cuMemGetInfo); with the outputs {:.3} GiB",
        gib(scratch),
        gib(free_before.saturating_sub(free_after)),
        gib(scratch + outputs)
    );
}

fn options_text(opts: &CeOptions, ignore_fraction: f64) -> String {
    format!(
        "eps {}, z-loss {}, {:.0}% ignored",
        opts.label_smoothing,
        opts.z_loss,
        ignore_fraction * 100.0
    )
}

fn run_fused(
    gpu: &Gpu,
    ce: &CrossEntropy,
    args: &Args,
    shape: Shape,
    opts: &CeOptions,
    versions: &[&str],
) -> Result<DayReport> {
    let Shape {
        tokens,
        hidden,
        vocab,
    } = shape;
    let seed = args.common.seed;
    let (h, w, targets) = make_inputs(shape, args.ignore_fraction, opts.ignore_index, seed);
    let chunk = args
        .chunk
        .map_or_else(|| default_chunk(shape), |c| c as usize)
        .min(tokens);
    let chunk_of = |name: &str| if name == "naive" { tokens } else { chunk };
    let outputs = output_bytes(shape);
    let memory_text: Vec<String> = versions
        .iter()
        .map(|&name| {
            let scratch = planned_scratch_bytes(shape, chunk_of(name));
            format!("{name} {:.2} GiB", gib(scratch + outputs))
        })
        .collect();
    let grads_len = (tokens + vocab) * hidden;
    let grads_shape = [grads_len];
    let full = (tokens * hidden * vocab) as u64 <= FULL_CHECK_WORK;

    // The f64 reference: everything on small problems; sampled dH rows on large ones.
    let lce_shape = LinearCeShape {
        tokens,
        hidden,
        vocab,
    };
    let (reference, sampled) = if full {
        let r = reference::linear_cross_entropy(&h, &w, &targets, lce_shape, opts, Rounding::Bf16);
        (Some(r), None)
    } else {
        let rows = sampled_tokens(&targets, opts.ignore_index);
        let (values, max_abs_logit) = reference::linear_cross_entropy_dh_rows(
            &h,
            &w,
            &targets,
            lce_shape,
            opts,
            Rounding::Bf16,
            &rows,
        );
        let at: Vec<usize> = rows
            .iter()
            .flat_map(|&t| t * hidden..(t + 1) * hidden)
            .collect();
        eprintln!("sampled dH rows {rows:?}: largest |logit| {max_abs_logit:.2}");
        (None, Some((values, at)))
    };
    let checked = if full {
        "every output checked".to_string()
    } else {
        format!("{SAMPLED_TOKENS} dH rows checked in f64; chunked checked against naive in full")
    };
    let mut session = Session::new(
        gpu,
        &args.common,
        Problem {
            day: "day19",
            title: "fused linear + cross-entropy fwd+bwd",
            description: format!(
                "T {tokens} x Hd {hidden} x V {vocab}, bf16, chunk {chunk}, {}; extra memory \
                 with outputs: {} ({checked})",
                options_text(opts, args.ignore_fraction),
                memory_text.join(", ")
            ),
            key: format!("linear_cross_entropy/bf16/{tokens}x{hidden}x{vocab}"),
            // H, W and the targets read once; dH, dW and the loss written once.
            bytes_per_run: (2 * 2 * (tokens + vocab) * hidden + 4 * tokens + 4) as u64,
            flops_per_run: Some(3 * 2 * (tokens * hidden * vocab) as u64),
        },
    )?;
    session.save_input("h", &[tokens, hidden], &h)?;
    session.save_input("w", &[vocab, hidden], &w)?;
    session.save_input("targets", &[tokens], &targets)?;

    let cublas = Cublas::open(gpu)?;
    // Day 18's kernels are compiled only when its version runs (tens of seconds of NVRTC).
    let day18 = if versions.contains(&"chunked_day18") {
        Some(Day18Gemm::load(gpu)?)
    } else {
        None
    };
    let (h_dev, w_dev, t_dev) = (gpu.upload(&h)?, gpu.upload(&w)?, gpu.upload(&targets)?);
    drop((h, w));
    let mut grads = gpu.alloc_poisoned::<bf16>(grads_len)?;
    let mut loss = gpu.alloc_poisoned::<f32>(1)?;
    // The first version that passes becomes the reference of the others on large problems.
    let mut first_passed: Option<(Vec<f64>, f64)> = None;
    for &name in versions {
        let free_before = free_bytes(gpu)?;
        let mut plan = match FusedPlan::new(gpu, shape, chunk_of(name), opts) {
            Ok(plan) => plan,
            Err(e) if e.is::<Refused>() => {
                session.skip_version(name, &e.to_string());
                continue;
            }
            Err(e) => return Err(e),
        };
        let backend: &dyn GemmBackend = match (name, &day18) {
            ("chunked_day18", Some(day18)) => day18,
            _ => &cublas,
        };
        if let Err(e) = plan.check_backend(backend) {
            if e.is::<Refused>() {
                session.skip_version(name, &e.to_string());
                continue;
            }
            return Err(e);
        }
        let chunks = tokens.div_ceil(plan.chunk);
        let row_kernel = ce.row_kernel(plan.row_kernel)?;
        let row_shape = plan.row_kernel.shape(plan.chunk);
        let version = Version {
            name,
            kernel: row_kernel
                .occupancy(&row_shape)
                .is_ok()
                .then_some((row_kernel, row_shape)),
            global_bytes: None,
        };
        gpu.poison(&mut loss)?;
        let (check_grads, loss_expected): (GradientCheck, Option<f64>) =
            match (&reference, &sampled, &first_passed) {
                (Some(r), _, _) => {
                    let all = r.concatenated_gradients();
                    let (dh_max, dw_max) = (max_abs(&r.dh), max_abs(&r.dw));
                    let split = tokens * hidden;
                    (
                        Box::new(move |got: &[bf16]| {
                            worse(
                                check::compare(
                                    &got[..split],
                                    &all[..split],
                                    &[tokens, hidden],
                                    tolerance::gradient(dh_max, chunks),
                                ),
                                check::compare(
                                    &got[split..],
                                    &all[split..],
                                    &[vocab, hidden],
                                    tolerance::gradient(dw_max, chunks),
                                ),
                            )
                        }),
                        Some(r.loss),
                    )
                }
                (None, _, Some((prev, prev_loss))) => {
                    let prev = prev.clone();
                    let tol = tolerance::gradient(max_abs(&prev), chunks);
                    (
                        Box::new(move |got: &[bf16]| {
                            check::compare(got, &prev, &[prev.len()], tol)
                        }),
                        Some(*prev_loss),
                    )
                }
                (None, Some((values, at)), None) => {
                    let (values, at) = (values.clone(), at.clone());
                    let tol = tolerance::gradient(max_abs(&values), chunks);
                    (
                        Box::new(move |got: &[bf16]| {
                            check::compare_at(got, &at, &values, &[got.len()], tol)
                        }),
                        None,
                    )
                }
                (None, None, None) => unreachable!("one reference is always made"),
            };
        // Keeps a passing output as the reference of later versions on large problems.
        let keep = std::cell::RefCell::new(None);
        let check = |got: &[bf16]| {
            let report = check_grads(got);
            if !full && first_passed.is_none() && report.passed() {
                *keep.borrow_mut() = Some(got.iter().map(|v| v.to_f64()).collect::<Vec<f64>>());
            }
            report
        };
        session.run_version_checked(version, &mut grads, &grads_shape, check, |g| {
            plan.run(gpu, ce, backend, &h_dev, &w_dev, &t_dev, opts, g, &mut loss)
        })?;
        print_memory(
            name,
            plan.scratch_bytes(),
            free_before,
            free_bytes(gpu)?,
            outputs,
        );
        let got_loss = gpu.download(&loss)?;
        if let Some(expected) = loss_expected {
            let report = check::compare(&got_loss, &[expected], &[1], tolerance::LOSS);
            session.check_also(name, "loss", report);
        } else {
            eprintln!(
                "{name:>14}  loss {:.6} (not checked: no f64 loss at this size)",
                got_loss[0]
            );
        }
        if let Some(values) = keep.into_inner()
            && got_loss[0].is_finite()
        {
            first_passed = Some((values, got_loss[0] as f64));
        }
        drop(plan);
    }
    Ok(session.finish())
}

/// Compares a version's dH and dW (back to back) with whatever reference the size allows.
type GradientCheck = Box<dyn Fn(&[bf16]) -> CheckReport>;

fn max_abs(v: &[f64]) -> f64 {
    v.iter().fold(0.0f64, |m, x| m.max(x.abs()))
}

/// The report of the two parts that is worse (a failure over a pass, else the larger L2).
fn worse(a: CheckReport, b: CheckReport) -> CheckReport {
    match (a.passed(), b.passed()) {
        (true, false) => b,
        (false, _) => a,
        (true, true) if b.rel_l2_err > a.rel_l2_err => b,
        _ => a,
    }
}

/// The first and last token, an ignored one if any, and one in the middle.
fn sampled_tokens(targets: &[i32], ignore_index: i32) -> Vec<usize> {
    let t = targets.len();
    let mut rows = vec![0, t - 1, t / 2];
    if let Some(i) = targets.iter().position(|&y| y == ignore_index) {
        rows.push(i);
    } else {
        rows.push(t / 3);
    }
    rows.sort_unstable();
    rows.dedup();
    rows.truncate(SAMPLED_TOKENS);
    rows
}

fn run_ce_only(
    gpu: &Gpu,
    ce: &CrossEntropy,
    args: &Args,
    shape: Shape,
    opts: &CeOptions,
    versions: &[&str],
) -> Result<DayReport> {
    let (rows, vocab) = (shape.tokens, shape.vocab);
    let seed = args.common.seed;
    let logits: Vec<bf16> = inputs::logits(rows * vocab, seed.wrapping_add(10));
    let targets = make_targets(rows, vocab, args.ignore_fraction, opts.ignore_index, seed);
    let expected = reference::cross_entropy(&logits, &targets, rows, vocab, opts);
    let valid = reference::count_valid(&targets, vocab, opts);
    let inv_count = if valid == 0 { 0.0 } else { 1.0 / valid as f64 };
    let out_shape = [rows, vocab];
    let mut session = Session::new(
        gpu,
        &args.common,
        Problem {
            day: "day19",
            title: "cross-entropy fwd+bwd on given logits",
            description: format!(
                "{rows} x {vocab} bf16 logits, {} (dlogits written over the logits' traffic)",
                options_text(opts, args.ignore_fraction)
            ),
            key: format!("cross_entropy/bf16/{rows}x{vocab}"),
            // The logits read once, the gradient written once, targets read, loss written.
            bytes_per_run: (2 * 2 * rows * vocab + 4 * rows + 4) as u64,
            flops_per_run: None,
        },
    )?;
    session.save_input("logits", &out_shape, &logits)?;
    let logits_dev = gpu.upload(&logits)?;
    drop(logits);
    let targets_dev = gpu.upload(&targets)?;
    let mut grad = gpu.alloc_poisoned::<bf16>(rows * vocab)?;
    let mut loss = gpu.alloc_poisoned::<f32>(1)?;
    let exp = Expected::full(&expected.dlogits, &out_shape, tolerance::dlogits(inv_count));
    for &name in versions {
        let which = RowKernel::from_name(name)?;
        if let Some(why) = which.refusal(vocab) {
            session.skip_version(name, &why);
            continue;
        }
        let free_before = free_bytes(gpu)?;
        let mut scratch = LossScratch::new(gpu, rows)?;
        let kernel = ce.row_kernel(which)?;
        let shape = which.shape(rows);
        let version = Version {
            name,
            kernel: kernel.occupancy(&shape).is_ok().then_some((kernel, shape)),
            global_bytes: None,
        };
        gpu.poison(&mut loss)?;
        session.run_version(version, &mut grad, &exp, |g| {
            ce.forward_backward(
                gpu,
                which,
                &logits_dev,
                &targets_dev,
                vocab,
                opts,
                &mut scratch,
                g,
                &mut loss,
            )
        })?;
        print_memory(name, scratch.bytes(), free_before, free_bytes(gpu)?, 0);
        let got_loss = gpu.download(&loss)?;
        let report = check::compare(&got_loss, &[expected.loss], &[1], tolerance::CE_LOSS);
        session.check_also(name, "loss", report);
    }
    session.save_reference(&out_shape, &expected.dlogits)?;
    Ok(session.finish())
}
