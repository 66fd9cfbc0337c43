//! `cargo run --release -p day19`: the fused linear + cross-entropy (forward and backward) at
//! T = 8192, Hd = 4096, V = 128256 bf16, and cross-entropy alone on 8192 x 128256 bf16
//! logits; every version checked, timed, and its extra device memory reported.

use anyhow::Result;
use clap::Parser;
use common::cli::{CommonArgs, bytes_for, check_host_fits, finish_reports, run_main};
use common::gpu::cublas::{Cublas, GemmEx, Stored};
use common::measure::check::{self, CheckReport};
use common::measure::report::DayReport;
use common::reference::cross_entropy::{
    self as reference, CeOptions, IGNORE_INDEX, LinearCeShape, Rounding,
};
use common::session::{Expected, Problem, Refused, Session, Version};
use common::{Gpu, UsageError, measure::inputs, sizes};
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
    #[arg(long, default_value_t = day19::DEFAULT_TOKENS, value_parser = common::sizes::positive_u64)]
    tokens: u64,
    /// Hidden size Hd (columns of H and W).
    #[arg(long, default_value_t = day19::DEFAULT_HIDDEN, value_parser = common::sizes::positive_u64)]
    hidden: u64,
    /// Vocabulary V (rows of W, columns of the logits).
    #[arg(long, default_value_t = day19::DEFAULT_VOCAB, value_parser = common::sizes::positive_u64)]
    vocab: u64,
    /// Tokens per chunk of chunked_cublas and chunked_day18 (default: the logits chunk about 4x the size of H,
    /// a power of two, at least 128 rows).
    #[arg(long, value_parser = common::sizes::positive_u64)]
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
/// ones are checked at samples against the f64 reference of [`SampledReference`], and every
/// version after the first also against the first that passed, in full.
const FULL_CHECK_WORK: usize = 1 << 31;
/// dH rows of the sampled check (one thread each, about a second each at the default size).
const SAMPLED_TOKENS: usize = 4;
/// dW rows (vocabulary entries) of the sampled check: `T x Hd` multiply-adds each.
const SAMPLED_DW_ROWS: usize = 64;
/// Rows of the reference's logits computed per cuBLAS call (f32, at most 1 GiB at a time).
const LOGITS_BLOCK_BYTES: usize = 1 << 30;

fn main() -> std::process::ExitCode {
    run_main(|| run(common::cli::parse_args(&kernel_names())))
}

/// Every version `--kernel` can name, in table order (`--help` lists them).
fn kernel_names() -> Vec<&'static str> {
    FUSED_VERSIONS.iter().chain(CE_VERSIONS).copied().collect()
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
    // cuBLAS takes dimensions below 2^31; the cluster kernel launches 8 blocks per row.
    sizes::at_most("--hidden", shape.hidden, i32::MAX as usize)?;
    sizes::at_most("--tokens", shape.tokens, i32::MAX as usize / 8)?;
    // Every size the run derives, checked once here: T Hd, V Hd, T V and the work T Hd V.
    sizes::product("T x V", &[shape.tokens, shape.vocab])?;
    sizes::product("(T + V) x Hd", &[shape.tokens + shape.vocab, shape.hidden])?;
    sizes::product(
        "T x Hd x V x 6",
        &[shape.tokens, shape.hidden, shape.vocab, 6],
    )?;
    let selected = args.common.select_versions(&kernel_names())?;
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
    // chunked check) in f64, the reference's logits in bf16; the CE-only logits in bf16 with
    // their f64 reference.
    check_host_fits(
        "the inputs and references",
        h_w.saturating_mul(2 + 2 + 8)
            .saturating_add(logits.saturating_mul(2 + 2 + 8)),
    )?;
    let gpu = args.common.open_gpu()?;
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
    let full = tokens * hidden * vocab <= FULL_CHECK_WORK;
    let lce_shape = LinearCeShape {
        tokens,
        hidden,
        vocab,
    };
    let samples = Samples::choose(&targets, lce_shape, opts.ignore_index, seed);
    let checked = if full {
        "every output checked".to_string()
    } else {
        format!(
            "loss, {} dH rows, {} dW rows and {} dW columns checked in f64; every version \
             after the first also against the first in full",
            samples.dh_tokens.len(),
            samples.dw_rows.len(),
            samples.dw_columns.len()
        )
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
    // The f64 reference: everything on small problems; the loss and sampled dH and dW on
    // large ones, from logits a plain cuBLAS GEMM computes (checked at the sampled tokens).
    let reference = if full {
        Reference::Full(reference::linear_cross_entropy(
            &h,
            &w,
            &targets,
            lce_shape,
            opts,
            Rounding::Bf16,
        ))
    } else {
        let logits = reference_logits(gpu, &cublas, &h_dev, &w_dev, lce_shape)?;
        check_reference_logits(&h, &w, &logits, lce_shape, &samples.dh_tokens)?;
        let sampled = reference::linear_cross_entropy_sampled(
            &h,
            &w,
            &targets,
            &logits,
            lce_shape,
            opts,
            Rounding::Bf16,
            (&samples.dh_tokens, &samples.dw_rows, &samples.dw_columns),
        );
        eprintln!(
            "f64 reference: loss {:.6}, {} dH rows, {} dW rows, {} dW columns (largest |logit| \
             {:.2})",
            sampled.loss,
            samples.dh_tokens.len(),
            samples.dw_rows.len(),
            samples.dw_columns.len(),
            sampled.max_abs_logit
        );
        Reference::Sampled(samples.flatten(&sampled, lce_shape))
    };
    drop((h, w));
    let mut grads = gpu.alloc_poisoned::<bf16>(grads_len)?;
    let mut loss = gpu.alloc_poisoned::<f32>(1)?;
    // On large problems the first version that passes is also the reference of the others,
    // in full.
    let mut first_passed: Option<Vec<f64>> = None;
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
        let (row_kernel, row_shape) = ce.row_launch(gpu, plan.row_kernel, plan.chunk)?;
        let version = Version {
            name,
            kernel: row_kernel
                .occupancy(&row_shape)
                .is_ok()
                .then_some((row_kernel, row_shape)),
            global_bytes: None,
        };
        gpu.poison(&mut loss)?;
        let check_grads = |got: &[bf16]| -> CheckReport {
            let against_f64 = reference.check(got, lce_shape, chunks);
            match &first_passed {
                Some(prev) => {
                    let tol = tolerance::gradient_against_version(max_abs(prev), chunks);
                    worse(against_f64, check::compare(got, prev, &[prev.len()], tol))
                }
                None => against_f64,
            }
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
        let report = check::compare(&got_loss, &[reference.loss()], &[1], tolerance::LOSS);
        let loss_passed = report.passed();
        session.check_also(name, "loss", report);
        if let Some(values) = keep.into_inner()
            && loss_passed
        {
            first_passed = Some(values);
        }
        drop(plan);
    }
    Ok(session.finish())
}

/// The f64 reference of the fused problem.
enum Reference {
    /// Every output.
    Full(reference::LinearCeOutput),
    /// At sampled places of the `[dH | dW]` buffer.
    Sampled(SampledValues),
}

/// A sampled reference laid out for `check::compare_at_with_slack`.
struct SampledValues {
    loss: f64,
    at: Vec<usize>,
    values: Vec<f64>,
    terms: Vec<f64>,
    /// Where the dW samples start in `at` (dH's come first).
    dw_from: usize,
}

impl Reference {
    fn loss(&self) -> f64 {
        match self {
            Reference::Full(r) => r.loss,
            Reference::Sampled(s) => s.loss,
        }
    }

    /// dH and dW (back to back in `got`) against the f64 values, each element within the
    /// bf16 tolerance plus its own allowance from its terms; the worse of the two parts.
    fn check(&self, got: &[bf16], shape: LinearCeShape, chunks: usize) -> CheckReport {
        let tol = tolerance::gradient();
        let split = shape.tokens * shape.hidden;
        match self {
            Reference::Full(r) => worse(
                check::compare_with_slack(
                    &got[..split],
                    &r.dh,
                    &tolerance::gradient_slack(&r.dh_terms, chunks),
                    &[shape.tokens, shape.hidden],
                    tol,
                ),
                check::compare_with_slack(
                    &got[split..],
                    &r.dw,
                    &tolerance::gradient_slack(&r.dw_terms, chunks),
                    &[shape.vocab, shape.hidden],
                    tol,
                ),
            ),
            Reference::Sampled(s) => {
                let slack = tolerance::gradient_slack(&s.terms, chunks);
                let part = |range: std::ops::Range<usize>| {
                    check::compare_at_with_slack(
                        got,
                        Some(&s.at[range.clone()]),
                        &s.values[range.clone()],
                        &slack[range],
                        &[got.len()],
                        tol,
                    )
                };
                worse(part(0..s.dw_from), part(s.dw_from..s.at.len()))
            }
        }
    }
}

/// Where the sampled reference looks.
struct Samples {
    dh_tokens: Vec<usize>,
    dw_rows: Vec<usize>,
    dw_columns: Vec<usize>,
}

impl Samples {
    /// dH rows of [`sampled_tokens`]; dW rows: the first and last vocabulary entries, the
    /// targets of the sampled tokens (whose dW rows hold the `-1` of the one-hot), and random
    /// ones; dW columns: the first, middle and last hidden index (each crosses every
    /// vocabulary tile of the dW GEMM).
    fn choose(targets: &[i32], shape: LinearCeShape, ignore_index: i32, seed: u64) -> Self {
        use rand::{Rng, SeedableRng};
        let dh_tokens = sampled_tokens(targets, ignore_index);
        let v = shape.vocab;
        let mut dw_rows = vec![0, v - 1];
        dw_rows.extend(
            dh_tokens
                .iter()
                .filter_map(|&t| usize::try_from(targets[t]).ok()),
        );
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed.wrapping_add(3));
        while dw_rows.len() < SAMPLED_DW_ROWS.min(v) {
            dw_rows.push(rng.random_range(0..v));
            dw_rows.sort_unstable();
            dw_rows.dedup();
        }
        dw_rows.sort_unstable();
        dw_rows.dedup();
        let mut dw_columns = vec![0, shape.hidden / 2, shape.hidden - 1];
        dw_columns.dedup();
        Self {
            dh_tokens,
            dw_rows,
            dw_columns,
        }
    }

    /// The sampled values at their flat indices of the `[dH | dW]` buffer.
    fn flatten(&self, r: &reference::SampledLinearCe, shape: LinearCeShape) -> SampledValues {
        let (hd, v) = (shape.hidden, shape.vocab);
        let dw_base = shape.tokens * hd;
        let mut at: Vec<usize> = self
            .dh_tokens
            .iter()
            .flat_map(|&t| t * hd..(t + 1) * hd)
            .collect();
        let dw_from = at.len();
        at.extend(
            self.dw_rows
                .iter()
                .flat_map(|&row| dw_base + row * hd..dw_base + (row + 1) * hd),
        );
        at.extend(
            self.dw_columns
                .iter()
                .flat_map(|&c| (0..v).map(move |row| dw_base + row * hd + c)),
        );
        let values = [&r.dh[..], &r.dw_rows, &r.dw_columns].concat();
        let terms = [&r.dh_terms[..], &r.dw_row_terms, &r.dw_column_terms].concat();
        assert_eq!(at.len(), values.len(), "one index per sampled value");
        SampledValues {
            loss: r.loss,
            at,
            values,
            terms,
            dw_from,
        }
    }
}

/// The logits `H W^T` of the whole problem, for the sampled reference: a plain cuBLAS GEMM
/// (not the versions' chunked code) with an f32 output, `LOGITS_BLOCK_BYTES` of rows at a
/// time, rounded to bf16 on the host as the reference rounds its logits.
fn reference_logits(
    gpu: &Gpu,
    cublas: &Cublas,
    h: &cudarc::driver::CudaSlice<bf16>,
    w: &cudarc::driver::CudaSlice<bf16>,
    shape: LinearCeShape,
) -> Result<Vec<bf16>> {
    let LinearCeShape {
        tokens,
        hidden,
        vocab,
    } = shape;
    let rows = (LOGITS_BLOCK_BYTES / (4 * vocab)).clamp(1, tokens);
    let mut block = gpu.alloc_poisoned::<f32>(rows * vocab)?;
    let mut logits = Vec::with_capacity(tokens * vocab);
    for start in (0..tokens).step_by(rows) {
        let n = rows.min(tokens - start);
        let g = GemmEx {
            b: Stored::Transposed,
            ..GemmEx::new(n, vocab, hidden)
        };
        let h_rows = h.slice(start * hidden..(start + n) * hidden);
        let mut out = block.slice_mut(..n * vocab);
        cublas.gemm_ex::<bf16, f32, _, _, _>(&g, &h_rows, w, &mut out)?;
        gpu.synchronize()?;
        let got = gpu.download(&block)?;
        logits.extend(got[..n * vocab].iter().map(|&x| bf16::from_f32(x)));
    }
    Ok(logits)
}

/// The reference's logits at `tokens` against the exact f64 products rounded to bf16: each
/// within one bf16 ulp (2^-7 relative; the f32 sums may round a product near a rounding
/// boundary the other way) plus 1e-3 for f32 sums that cancel. A failure is an error of the
/// reference, not of a version.
fn check_reference_logits(
    h: &[bf16],
    w: &[bf16],
    logits: &[bf16],
    shape: LinearCeShape,
    tokens: &[usize],
) -> Result<()> {
    let exact = reference::logits_rows(h, w, shape, Rounding::Bf16, tokens);
    let v = shape.vocab;
    let at: Vec<usize> = tokens.iter().flat_map(|&t| t * v..(t + 1) * v).collect();
    let tol = common::Tolerance::new(1e-3, 1.0 / 128.0).with_max_rel_l2(1e-2);
    let report = check::compare_at(logits, &at, &exact, &[logits.len()], tol);
    if !report.passed() {
        anyhow::bail!("the reference's cuBLAS logits disagree with the f64 products: {report}");
    }
    Ok(())
}

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
    session.save_input("targets", &[rows], &targets)?;
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
        let (kernel, shape) = ce.row_launch(gpu, which, rows)?;
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
