//! `cargo run --release -p day10`: check every FlashAttention forward version against the f64
//! CPU reference (O and L), time it, and print the table; `--sweep` plots TFLOP/s against the
//! sequence length beside PyTorch's SDPA backends.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use clap::Parser;
use common::check::{self, Tolerance};
use common::cli::{CommonArgs, check_host_fits, finish_reports, run_main};
use common::dtype::Dtype;
use common::element::Element;
use common::plot::{self, LinePlot};
use common::reference::attention::{self as reference, AttentionShape, QueryRow};
use common::report::DayReport;
use common::session::{Expected, Problem, Refused, Session, Version as RunVersion};
use common::{Gpu, UsageError, inputs, sweep};
use day10::{DeviceProblem, FlashAttention, Tensors, Version};
use half::{bf16, f16};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Day 10: FlashAttention-2 forward (bf16/f16, causal or not, GQA, variable lengths).
#[derive(Parser)]
#[command(version, about)]
struct Args {
    /// Query length of every sequence (default: the FlashAttention benchmark shapes at 4096).
    #[arg(long)]
    seqlen: Option<usize>,
    /// Key length, when it differs from the query length.
    #[arg(long)]
    seqlen_k: Option<usize>,
    /// Sequences in the batch (default: 16384 tokens / seqlen).
    #[arg(long)]
    batch: Option<usize>,
    /// Variable lengths in one batch, instead of --seqlen/--batch: `--varlen 1,17,1000`
    /// (keys as long as queries unless --seqlen-k).
    #[arg(long, value_delimiter = ',')]
    varlen: Vec<usize>,
    /// Query heads (default: hidden 2048 / head dim).
    #[arg(long)]
    heads: Option<usize>,
    /// Key/value heads (grouped-query attention; 1 = multi-query). Default: --heads.
    #[arg(long)]
    kv_heads: Option<usize>,
    #[arg(long, default_value_t = 128)]
    head_dim: usize,
    /// Bottom-right aligned causal mask.
    #[arg(long)]
    causal: bool,
    #[arg(long, value_enum, default_value_t = Dtype::Bf16)]
    dtype: Dtype,
    /// Sequence lengths 512 to 16384 at 16384 tokens, hidden 2048; plotted to --plot.
    #[arg(long)]
    sweep: bool,
    #[arg(long, default_value = "sweep.svg")]
    plot: PathBuf,
    #[command(flatten)]
    common: CommonArgs,
}

/// FlashAttention's benchmark: batch x seqlen = 16384 tokens, hidden 2048.
const TOKENS: usize = 16384;
const HIDDEN: usize = 2048;
/// Query rows checked against the CPU reference on large problems (every row on small ones).
const SAMPLED_ROWS: usize = 384;
const FULL_CHECK_WORK: usize = 1 << 28;

fn main() -> ExitCode {
    run_main(|| run(Args::parse()))
}

fn benchmark_shape(seqlen: usize, head_dim: usize, causal: bool) -> AttentionShape {
    let heads = HIDDEN / head_dim;
    AttentionShape::uniform(
        TOKENS / seqlen,
        seqlen,
        seqlen,
        heads,
        heads,
        head_dim,
        causal,
    )
}

fn problems(args: &Args) -> Result<Vec<AttentionShape>> {
    if args.sweep {
        return Ok((9..=14)
            .map(|p| benchmark_shape(1 << p, args.head_dim, args.causal))
            .collect());
    }
    let custom = args.seqlen.is_some()
        || !args.varlen.is_empty()
        || args.heads.is_some()
        || args.batch.is_some()
        || args.kv_heads.is_some()
        || args.seqlen_k.is_some();
    if !custom {
        // The targets of GPU_TARGETS.md: hd128 and hd64 at 4096, and hd128 causal.
        return Ok(vec![
            benchmark_shape(4096, 128, args.causal),
            benchmark_shape(4096, 64, args.causal),
            benchmark_shape(4096, 128, true),
        ]
        .into_iter()
        .take(if args.causal { 2 } else { 3 })
        .collect());
    }
    let heads = args.heads.unwrap_or((HIDDEN / args.head_dim).max(1));
    let kv_heads = args.kv_heads.unwrap_or(heads);
    let shape = if args.varlen.is_empty() {
        let seqlen = args.seqlen.unwrap_or(4096);
        let batch = args.batch.unwrap_or((TOKENS / seqlen).max(1));
        let seqlen_k = args.seqlen_k.unwrap_or(seqlen);
        AttentionShape::uniform(
            batch,
            seqlen,
            seqlen_k,
            heads,
            kv_heads,
            args.head_dim,
            args.causal,
        )
    } else {
        if args.seqlen.is_some() || args.batch.is_some() {
            return Err(UsageError::new("--varlen replaces --seqlen and --batch").into());
        }
        let keys = match args.seqlen_k {
            Some(k) => vec![k; args.varlen.len()],
            None => args.varlen.clone(),
        };
        AttentionShape {
            heads,
            kv_heads,
            head_dim: args.head_dim,
            seqlens_q: args.varlen.clone(),
            seqlens_k: keys,
            causal: args.causal,
        }
    };
    if shape.seqlens_q.contains(&0) || shape.seqlens_k.contains(&0) {
        return Err(UsageError::new("sequence lengths must be at least 1").into());
    }
    Ok(vec![shape])
}

/// The problem in words and as the key the peers script writes.
fn describe(shape: &AttentionShape, dtype: Dtype) -> (String, String) {
    let lens = |v: &[usize]| -> String {
        if v.iter().all(|&l| l == v[0]) {
            format!("{}", v[0])
        } else {
            v.iter()
                .map(|l| l.to_string())
                .collect::<Vec<_>>()
                .join("+")
        }
    };
    let (lq, lk) = (lens(&shape.seqlens_q), lens(&shape.seqlens_k));
    let mask = if shape.causal { "-causal" } else { "" };
    let key = format!(
        "attention/{dtype}/b{}-h{}-kv{}-d{}-q{lq}-k{lk}{mask}",
        shape.batch(),
        shape.heads,
        shape.kv_heads,
        shape.head_dim
    );
    let text = format!(
        "batch {} x seqlen {lq}{} x heads {} (kv {}) x d {}{}, {dtype}",
        shape.batch(),
        if lq == lk {
            String::new()
        } else {
            format!(" (keys {lk})")
        },
        shape.heads,
        shape.kv_heads,
        shape.head_dim,
        if shape.causal { ", causal" } else { "" }
    );
    (text, key)
}

fn run(args: Args) -> Result<()> {
    let names: Vec<&str> = Version::ALL.iter().map(|v| v.name()).collect();
    let mut selected = args.common.select_versions(&names)?;
    if args.sweep && args.common.kernel.is_empty() {
        // The naive version's S matrix is the point of the sweep's longer sequences: it is
        // left to the default run.
        selected.retain(|&v| v != "naive");
    }
    let shapes = problems(&args)?;
    for shape in &shapes {
        day10::validate(shape)?;
    }
    let gpu = Gpu::open(args.common.device)?;
    let day = FlashAttention::load(&gpu)?;
    let mut reports = Vec::new();
    for shape in &shapes {
        let report = match args.dtype {
            Dtype::Bf16 => run_problem::<bf16>(&gpu, &day, &args, shape, &selected)?,
            Dtype::F16 => run_problem::<f16>(&gpu, &day, &args, shape, &selected)?,
            other => {
                return Err(
                    UsageError::new(format!("attention takes bf16 or f16, not {other}")).into(),
                );
            }
        };
        reports.push(report);
    }
    if args.sweep {
        plot_sweep(&args, &gpu, &reports)?;
    }
    finish_reports(&args.common, &reports)
}

/// Tolerances for O: inputs rounded to 16 bits, P rounded to 16 bits before P V (fa2_mma),
/// O stored in 16 bits. With |V| <= 1, each is a relative error of at most 2^-8 (bf16) or
/// 2^-11 (f16) on terms whose weighted sum is bounded by max |V|; the f32 sums add far less.
/// The absolute term covers outputs near zero, where the relative one says nothing.
fn o_tolerance(dtype: Dtype) -> Tolerance {
    match dtype {
        Dtype::F16 => Tolerance::new(2e-3, 4e-3).with_max_rel_l2(2e-3),
        _ => Tolerance::new(1.6e-2, 3e-2).with_max_rel_l2(1e-2),
    }
}

/// L is computed from f32 scores of the stored inputs (exact products, f32 sums over d) and
/// f32 exponentials; no 16-bit rounding enters it.
const L_TOLERANCE: Tolerance = Tolerance::new(2e-4, 2e-5);

fn run_problem<T: Element>(
    gpu: &Gpu,
    day: &FlashAttention,
    args: &Args,
    shape: &AttentionShape,
    selected: &[&str],
) -> Result<DayReport> {
    let d = shape.head_dim;
    let (q_len, k_len) = (
        shape.total_q() * shape.heads * d,
        shape.total_k() * shape.kv_heads * d,
    );
    check_host_fits(
        "the inputs",
        ((q_len * 2 + k_len * 2) * T::DTYPE.size() + q_len * 8) as u64,
    )?;
    let problem = DeviceProblem::new(gpu, shape)?;
    let io_bytes =
        ((2 * q_len + 2 * k_len) * T::DTYPE.size() + shape.total_q() * shape.heads * 4) as u64;
    gpu.check_fits("the attention tensors", io_bytes)?;

    let seed = args.common.seed;
    // Scores of scale * q.k with q, k uniform in [-2, 2): standard deviation 4/3, so rows
    // are peaked enough that a wrong max or a wrong key shows; V in [-1, 1).
    let q: Vec<T> = inputs::uniform(q_len, -2.0, 2.0, seed);
    let k: Vec<T> = inputs::uniform(k_len, -2.0, 2.0, seed.wrapping_add(1));
    let v: Vec<T> = inputs::uniform(k_len, -1.0, 1.0, seed.wrapping_add(2));

    let rows = checked_rows(shape, seed);
    let expected_out = reference::attention_rows(&q, &k, &v, shape, shape.default_scale(), &rows);
    let o_at: Vec<usize> = rows
        .iter()
        .flat_map(|r| (0..d).map(move |c| (r.token * shape.heads + r.head) * d + c))
        .collect();
    let l_at: Vec<usize> = rows
        .iter()
        .map(|r| r.token * shape.heads + r.head)
        .collect();
    let o_shape = [shape.total_q(), shape.heads, d];
    let l_shape = [shape.total_q(), shape.heads];
    let full = rows.len() == shape.total_q() * shape.heads;
    let expected = Expected {
        values: &expected_out.o,
        shape: &o_shape,
        tolerance: o_tolerance(T::DTYPE),
        at: (!full).then_some(&o_at[..]),
    };

    let (description, key) = describe(shape, T::DTYPE);
    let checked = if full {
        "every row checked".to_string()
    } else {
        format!("{} sampled rows checked", rows.len())
    };
    let mut session = Session::new(
        gpu,
        &args.common,
        Problem {
            day: "day10",
            title: "FlashAttention-2 forward",
            description: format!("{description} ({checked})"),
            key,
            bytes_per_run: io_bytes,
            flops_per_run: Some(shape.exact_flops()),
        },
    )?;
    if args.sweep {
        session = session.quiet();
    }
    session.save_input("q", &o_shape, &q)?;
    session.save_input("k", &[shape.total_k(), shape.kv_heads, d], &k)?;
    session.save_input("v", &[shape.total_k(), shape.kv_heads, d], &v)?;
    if full {
        session.save_reference(&o_shape, &expected_out.o)?;
    }

    let (q_dev, k_dev, v_dev) = (gpu.upload(&q)?, gpu.upload(&k)?, gpu.upload(&v)?);
    let mut o = gpu.alloc_poisoned::<T>(q_len)?;
    let mut lse = gpu.alloc_poisoned::<f32>(shape.total_q() * shape.heads)?;
    for &name in selected {
        let version = Version::from_name(name).expect("selected from Version::ALL");
        let (kernel, launch) = match day.plan::<T>(version, &problem) {
            Ok(plan) => plan,
            Err(e) if e.is::<Refused>() => {
                session.skip_version(name, &e.to_string());
                continue;
            }
            Err(e) => return Err(e),
        };
        let mut scores = match version {
            Version::Naive => {
                gpu.check_fits("naive's score matrix", problem.score_bytes() + io_bytes)?;
                Some(gpu.alloc_poisoned::<f32>(problem.score_bytes() as usize / 4)?)
            }
            _ => None,
        };
        gpu.poison(&mut lse)?;
        let run = RunVersion {
            name,
            kernel: Some((kernel, launch)),
            global_bytes: None,
        };
        session.run_version(run, &mut o, &expected, |o| {
            let tensors = Tensors {
                q: &q_dev,
                k: &k_dev,
                v: &v_dev,
                lse: &mut lse,
                scores: scores.as_mut(),
            };
            day.forward(gpu, version, &problem, tensors, o)
        })?;
        // L of the last run (every run writes the same values; poisoned before the first).
        let lse_got = gpu.download(&lse)?;
        let l_check = match full {
            true => check::compare(&lse_got, &expected_out.lse, &l_shape, L_TOLERANCE),
            false => check::compare_at(&lse_got, &l_at, &expected_out.lse, &l_shape, L_TOLERANCE),
        };
        session.check_also(name, "L (log-sum-exp)", l_check);
    }
    Ok(session.finish())
}

/// Every query row when the reference is cheap; otherwise a sample that always holds the
/// first and last row of the first and last sequence, and random rows between.
fn checked_rows(shape: &AttentionShape, seed: u64) -> Vec<QueryRow> {
    let (total, heads) = (shape.total_q(), shape.heads);
    let work = total * heads * shape.seqlens_k.iter().max().copied().unwrap_or(0) * shape.head_dim;
    if work <= FULL_CHECK_WORK {
        return (0..total)
            .flat_map(|token| (0..heads).map(move |head| QueryRow { token, head }))
            .collect();
    }
    let mut rng = StdRng::seed_from_u64(seed ^ 0x5eed);
    let mut rows = vec![
        QueryRow { token: 0, head: 0 },
        QueryRow {
            token: total - 1,
            head: heads - 1,
        },
    ];
    rows.extend((2..SAMPLED_ROWS).map(|_| QueryRow {
        token: rng.random_range(0..total),
        head: rng.random_range(0..heads),
    }));
    rows
}

/// TFLOP/s against sequence length for each version and each peer, and the summary table.
fn plot_sweep(args: &Args, gpu: &Gpu, reports: &[DayReport]) -> Result<()> {
    let seqlen_of = |r: &DayReport| -> f64 {
        r.key
            .split('-')
            .find_map(|part| part.strip_prefix('q'))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0)
    };
    let mut series =
        sweep::version_series(reports, sweep::row_versions(reports), seqlen_of, |row| {
            row.tflops
        });
    series.extend(sweep::peer_series(
        reports,
        " (peer)",
        seqlen_of,
        sweep::peer_tflops,
    ));
    let title = format!(
        "day10 FlashAttention-2 forward: hd{}, hidden {HIDDEN}, {TOKENS} tokens{}, {}, {}",
        args.head_dim,
        if args.causal { ", causal" } else { "" },
        args.dtype,
        gpu.info.name
    );
    plot::write_svg(
        &args.plot,
        &LinePlot {
            title: &title,
            x_label: "sequence length",
            y_label: "TFLOP/s (4 b h s^2 d, halved when causal)",
            log2_x: true,
            series: &series,
            hlines: &[],
        },
    )?;
    let table = sweep::summary_table("seqlen", "TFLOP/s", 1, &series);
    println!("{title}\n{table}\nplot: {}", args.plot.display());
    Ok(())
}
