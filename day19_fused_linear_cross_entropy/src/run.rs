//! The day's two problems through a [`Session`]: the fused versions on `T x Hd x V`, then
//! cross-entropy alone on `T x V` logits; each version planned once, checked, timed, and its
//! extra device memory reported.

use anyhow::Result;
use common::Gpu;
use common::cli::CommonArgs;
use common::gpu::cublas::Cublas;
use common::measure::check;
use common::measure::report::DayReport;
use common::session::{Expected, Problem, Refused, Session, Version};
use half::bf16;

use crate::cross_entropy::CrossEntropy;
use crate::fused::{
    FusedPlan, FusedVersion, Shape, default_chunk, gib, output_bytes, planned_scratch_bytes,
};
use crate::fused_check::CheckPlan;
use crate::gemm::{Day18Gemm, GemmBackend};
use crate::problem::{CeProblem, make_inputs};
use crate::reference::CeOptions;
use crate::row_kernel::RowKernel;
use crate::tolerance;

/// What the command line asks of both problems.
pub struct Request<'a> {
    pub common: &'a CommonArgs,
    /// T, Hd, V; cross-entropy alone runs on `T x V` logits.
    pub shape: Shape,
    pub opts: CeOptions,
    /// `--chunk` (tokens per chunk of the chunked versions), or [`default_chunk`].
    pub chunk: Option<usize>,
    /// The fraction of random targets set to the ignore index.
    pub ignore_fraction: f64,
}

impl Request<'_> {
    fn options_text(&self) -> String {
        format!(
            "eps {}, z-loss {}, {:.0}% ignored",
            self.opts.label_smoothing,
            self.opts.z_loss,
            self.ignore_fraction * 100.0
        )
    }
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

/// The fused linear + cross-entropy, forward and backward, for each of `versions`.
pub fn run_fused(
    gpu: &Gpu,
    ce: &CrossEntropy,
    req: &Request,
    versions: &[FusedVersion],
) -> Result<DayReport> {
    let (shape, opts) = (req.shape, &req.opts);
    let Shape {
        tokens,
        hidden,
        vocab,
    } = shape;
    let seed = req.common.seed;
    let (h, w, targets) = make_inputs(shape, req.ignore_fraction, opts.ignore_index, seed);
    let chunk = req
        .chunk
        .unwrap_or_else(|| default_chunk(shape))
        .min(tokens);
    let outputs = output_bytes(shape);
    let memory_text: Vec<String> = versions
        .iter()
        .map(|v| {
            let scratch = planned_scratch_bytes(shape, v.chunk(shape, chunk));
            format!("{} {:.2} GiB", v.name(), gib(scratch + outputs))
        })
        .collect();
    let grads_len = (tokens + vocab) * hidden;
    let check_plan = CheckPlan::new(&targets, shape, opts.ignore_index, seed);
    let mut session = Session::new(
        gpu,
        req.common,
        Problem {
            day: "day19",
            title: "fused linear + cross-entropy fwd+bwd",
            description: format!(
                "T {tokens} x Hd {hidden} x V {vocab}, bf16, chunk {chunk}, {}; extra memory \
                 with outputs: {} ({})",
                req.options_text(),
                memory_text.join(", "),
                check_plan.describe()
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
    let day18 = if versions.contains(&FusedVersion::ChunkedDay18) {
        Some(Day18Gemm::load(gpu)?)
    } else {
        None
    };
    let (h_dev, w_dev, t_dev) = (gpu.upload(&h)?, gpu.upload(&w)?, gpu.upload(&targets)?);
    let mut reference =
        check_plan.reference(gpu, &cublas, (&h, &w, &targets), &h_dev, &w_dev, opts)?;
    drop((h, w));
    let mut grads = gpu.alloc_poisoned::<bf16>(grads_len)?;
    let mut loss = gpu.alloc_poisoned::<f32>(1)?;
    for &version in versions {
        let name = version.name();
        let free_before = free_bytes(gpu)?;
        let backend: &dyn GemmBackend = match (version, &day18) {
            (FusedVersion::ChunkedDay18, Some(day18)) => day18,
            _ => &cublas,
        };
        let planned =
            FusedPlan::new(gpu, shape, version.chunk(shape, chunk), opts).and_then(|plan| {
                let launches = plan.prepare(gpu, ce, backend, &h_dev, &w_dev, &grads)?;
                Ok((plan, launches))
            });
        let (mut plan, launches) = match planned {
            Ok(plan) => plan,
            Err(e) if e.is::<Refused>() => {
                session.skip_version(name, &e.to_string());
                continue;
            }
            Err(e) => return Err(e),
        };
        let chunks = tokens.div_ceil(plan.chunk);
        let (row_kernel, row_shape) = (launches.row_plan().kernel, launches.row_plan().shape);
        let row = Version {
            name,
            kernel: row_kernel
                .occupancy(&row_shape)
                .is_ok()
                .then_some((row_kernel, row_shape)),
            global_bytes: None,
        };
        gpu.poison(&mut loss)?;
        // On large problems the first version that passes is kept as the reference of the
        // later ones, in full.
        let mut kept = None;
        let check = |got: &[bf16]| {
            let report = reference.check(got, chunks);
            if reference.wants(&report) {
                kept = Some(got.iter().map(|v| v.to_f64()).collect::<Vec<f64>>());
            }
            report
        };
        session.run_version_checked(row, &mut grads, &[grads_len], check, |g| {
            plan.run(gpu, &launches, &h_dev, &w_dev, &t_dev, opts, g, &mut loss)
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
        if let Some(values) = kept
            && loss_passed
        {
            reference.keep(values);
        }
    }
    Ok(session.finish())
}

/// Cross-entropy alone on given `T x V` logits, for each of `versions`.
pub fn run_ce_only(
    gpu: &Gpu,
    ce: &CrossEntropy,
    req: &Request,
    versions: &[RowKernel],
) -> Result<DayReport> {
    let (rows, vocab, opts) = (req.shape.tokens, req.shape.vocab, &req.opts);
    let seed = req.common.seed;
    let problem = CeProblem::new(
        rows,
        vocab,
        req.ignore_fraction,
        opts,
        seed.wrapping_add(10),
        seed,
    );
    let out_shape = [rows, vocab];
    let mut session = Session::new(
        gpu,
        req.common,
        Problem {
            day: "day19",
            title: "cross-entropy fwd+bwd on given logits",
            description: format!(
                "{rows} x {vocab} bf16 logits, {} (dlogits written over the logits' traffic)",
                req.options_text()
            ),
            key: format!("cross_entropy/bf16/{rows}x{vocab}"),
            // The logits read once, the gradient written once, targets read, loss written.
            bytes_per_run: (2 * 2 * rows * vocab + 4 * rows + 4) as u64,
            flops_per_run: None,
        },
    )?;
    let CeProblem {
        logits,
        targets,
        expected,
        inv_count,
    } = problem;
    session.save_input("logits", &out_shape, &logits)?;
    session.save_input("targets", &[rows], &targets)?;
    let logits_dev = gpu.upload(&logits)?;
    drop(logits);
    let targets_dev = gpu.upload(&targets)?;
    let mut grad = gpu.alloc_poisoned::<bf16>(rows * vocab)?;
    let mut loss = gpu.alloc_poisoned::<f32>(1)?;
    let exp = Expected::full(&expected.dlogits, &out_shape, tolerance::dlogits(inv_count));
    for &which in versions {
        let name = which.name();
        if let Some(why) = which.refusal(vocab) {
            session.skip_version(name, &why);
            continue;
        }
        let free_before = free_bytes(gpu)?;
        let mut plan = ce.plan(gpu, which, (rows, vocab), opts)?;
        let (kernel, shape) = (plan.rows.kernel, plan.rows.shape);
        let version = Version {
            name,
            kernel: kernel.occupancy(&shape).is_ok().then_some((kernel, shape)),
            global_bytes: None,
        };
        gpu.poison(&mut loss)?;
        session.run_version(version, &mut grad, &exp, |g| {
            ce.forward_backward(gpu, &mut plan, &logits_dev, &targets_dev, g, &mut loss)
        })?;
        print_memory(name, plan.scratch.bytes(), free_before, free_bytes(gpu)?, 0);
        let got_loss = gpu.download(&loss)?;
        let report = check::compare(&got_loss, &[expected.loss], &[1], tolerance::CE_LOSS);
        session.check_also(name, "loss", report);
    }
    session.save_reference(&out_shape, &expected.dlogits)?;
    Ok(session.finish())
}
