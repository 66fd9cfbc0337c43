//! `cargo run --release -p day20`: check every FlashAttention backward version (dQ, dK, dV)
//! against the f64 CPU reference, time it, and print the table; `--deterministic` runs the
//! atomic-free mode (and checks that a rerun gives the same bits); `--sweep` plots TFLOP/s
//! against the sequence length beside PyTorch's SDPA backends.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use clap::Parser;
use common::check::{self, CheckReport};
use common::cli::{CommonArgs, check_host_fits, finish_reports, run_main};
use common::dtype::Dtype;
use common::element::Element;
use common::plot::{self, LinePlot};
use common::reference::attention::{
    self as reference, AttentionShape, BackwardInputs, KeyRow, QueryRow, Terms, in_parallel,
    in_parallel_pairs,
};
use common::report::DayReport;
use common::session::{Problem, Refused, Session, Version as RunVersion};
use common::sizes::positive;
use common::{Gpu, UsageError, inputs, sizes, sweep};
use day20::{BackwardProblem, BackwardTensors, FlashAttention, Mode, Tensors, Version};
use half::{bf16, f16};

/// Day 20: FlashAttention-2 backward (bf16/f16, causal or not, GQA, variable lengths).
#[derive(Parser)]
#[command(version, about)]
struct Args {
    /// Query length of every sequence (default: the FlashAttention benchmark shapes at 4096).
    #[arg(long, value_parser = positive)]
    seqlen: Option<usize>,
    /// Key length, when it differs from the query length.
    #[arg(long, value_parser = positive)]
    seqlen_k: Option<usize>,
    /// Sequences in the batch (default: 16384 tokens / seqlen).
    #[arg(long, value_parser = positive)]
    batch: Option<usize>,
    /// Variable lengths in one batch, instead of --seqlen/--batch: `--varlen 1,17,1000`
    /// (keys as long as queries unless --seqlen-k).
    #[arg(long, value_delimiter = ',', value_parser = positive)]
    varlen: Vec<usize>,
    /// Query heads (default: hidden 2048 / head dim).
    #[arg(long, value_parser = positive)]
    heads: Option<usize>,
    /// Key/value heads (grouped-query attention; 1 = multi-query). Default: --heads.
    #[arg(long, value_parser = positive)]
    kv_heads: Option<usize>,
    /// Head dimension (default 128; given alone, the benchmark shape at 4096 with this head
    /// dim and hidden 2048).
    #[arg(long, value_parser = positive)]
    head_dim: Option<usize>,
    /// Bottom-right aligned causal mask.
    #[arg(long)]
    causal: bool,
    #[arg(long, value_enum, default_value_t = Dtype::Bf16)]
    dtype: Dtype,
    /// The same bits every run (keys end in `-det`): dQ by a second pass without float atomics
    /// (fa2_*), or by adds ordered by key tile (fa_hopper).
    #[arg(long)]
    deterministic: bool,
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
/// On large problems, one query row (for dQ) and one key row (for dK, dV) is checked in every
/// tile of this many rows of every head of every sequence: the smallest tiles of any version
/// (`fa2_mma`'s 64 x 64), so every block of every version, the second and later waves of a
/// grid included, has checked outputs.
const SAMPLED_TILE: usize = 64;
const FULL_CHECK_WORK: usize = 1 << 27;
/// The most sequences a batch can have (the grid's limit), checked before the lengths are
/// built.
const MAX_BATCH: usize = 65535;

fn main() -> ExitCode {
    run_main(|| run(Args::parse()))
}

impl Args {
    fn head_dim(&self) -> usize {
        self.head_dim.unwrap_or(128)
    }
}

fn benchmark_shape(seqlen: usize, head_dim: usize, causal: bool) -> AttentionShape {
    let heads = (HIDDEN / head_dim).max(1);
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
            .map(|p| benchmark_shape(1 << p, args.head_dim(), args.causal))
            .collect());
    }
    let custom = args.seqlen.is_some()
        || !args.varlen.is_empty()
        || args.heads.is_some()
        || args.batch.is_some()
        || args.kv_heads.is_some()
        || args.seqlen_k.is_some()
        || args.head_dim.is_some();
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
    let heads = args.heads.unwrap_or((HIDDEN / args.head_dim()).max(1));
    let kv_heads = args.kv_heads.unwrap_or(heads);
    let shape = if args.varlen.is_empty() {
        let seqlen = args.seqlen.unwrap_or(4096);
        let batch = args.batch.unwrap_or((TOKENS / seqlen).max(1));
        sizes::at_most("--batch", batch, MAX_BATCH)?;
        let seqlen_k = args.seqlen_k.unwrap_or(seqlen);
        AttentionShape::uniform(
            batch,
            seqlen,
            seqlen_k,
            heads,
            kv_heads,
            args.head_dim(),
            args.causal,
        )
    } else {
        if args.seqlen.is_some() || args.batch.is_some() {
            return Err(UsageError::new("--varlen replaces --seqlen and --batch").into());
        }
        sizes::at_most("the sequences of --varlen", args.varlen.len(), MAX_BATCH)?;
        let keys = match args.seqlen_k {
            Some(k) => vec![k; args.varlen.len()],
            None => args.varlen.clone(),
        };
        AttentionShape {
            heads,
            kv_heads,
            head_dim: args.head_dim(),
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
fn describe(shape: &AttentionShape, dtype: Dtype, deterministic: bool) -> (String, String) {
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
        "attention_bwd/{dtype}/b{}-h{}-kv{}-d{}-q{lq}-k{lk}{mask}{}",
        shape.batch(),
        shape.heads,
        shape.kv_heads,
        shape.head_dim,
        if deterministic { "-det" } else { "" }
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
    let text = match deterministic {
        true => format!("{text}, deterministic"),
        false => text,
    };
    (text, key)
}

fn run(args: Args) -> Result<()> {
    let names: Vec<&str> = Version::ALL.iter().map(|v| v.name()).collect();
    let mut selected = args.common.select_versions(&names)?;
    if args.sweep && args.common.kernel.is_empty() {
        // The naive version's P and dS are the point of the default run, not of the sweep.
        selected.retain(|&v| v != "naive");
    }
    // Everything a user can get wrong is refused here, before the GPU is opened: the same
    // error on a machine without one.
    day20::check_dtype(args.dtype)?;
    let shapes = problems(&args)?;
    let versions: Vec<Version> = selected
        .iter()
        .filter_map(|n| Version::from_name(n))
        .collect();
    for shape in &shapes {
        day20::validate(shape)?;
        day20::check_head_dim(shape.head_dim, &versions)?;
    }
    let gpu = args.common.open_gpu()?;
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

/// The reference gradients at the checked rows and keys, with where they sit in the
/// `[dQ | dK | dV]` buffer and the sums of their terms' absolute values (each element's own
/// rounding allowance, [`day20::grad_slack`]).
struct Expected {
    parts: [(Vec<usize>, Vec<f64>, Vec<f64>); 3],
    full: bool,
    /// Query rows and key rows checked.
    checked: (usize, usize),
}

impl Expected {
    fn check<T: Element>(&self, got: &[T], part: usize, dtype: Dtype) -> CheckReport {
        let (at, values, magnitudes) = &self.parts[part];
        let tolerance = day20::grad_tolerance(dtype, values);
        let slack = day20::grad_slack(dtype, magnitudes);
        check::compare_at_with_slack(got, Some(at), values, &slack, &[got.len()], tolerance)
    }
}

fn expected_gradients<T: Element>(
    x: &BackwardInputs<T>,
    shape: &AttentionShape,
    seed: u64,
) -> Expected {
    let d = shape.head_dim;
    let (q_len, k_len) = (x.q.len(), x.k.len());
    let (rows, keys) = checked_rows(shape, seed);
    let full = rows.len() == shape.total_q() * shape.heads;
    let checked = (rows.len(), keys.len());
    let scale = shape.default_scale();
    // The f64 reference over thousands of sampled rows: chunks on every host core, in order.
    let dq_of = |terms| {
        in_parallel(&rows, |chunk| {
            reference::attention_backward_dq(x, shape, scale, chunk, terms)
        })
    };
    let dkv_of = |terms| {
        in_parallel_pairs(&keys, |chunk| {
            reference::attention_backward_dkv(x, shape, scale, chunk, terms)
        })
    };
    let (dq, dq_size) = (dq_of(Terms::Signed), dq_of(Terms::Absolute));
    let ((dk, dv), (dk_size, dv_size)) = (dkv_of(Terms::Signed), dkv_of(Terms::Absolute));
    let q_at: Vec<usize> = rows
        .iter()
        .flat_map(|r| (0..d).map(move |c| (r.token * shape.heads + r.head) * d + c))
        .collect();
    let k_at = |base: usize| -> Vec<usize> {
        keys.iter()
            .flat_map(|r| {
                (0..d).map(move |c| base + (r.token * shape.kv_heads + r.kv_head) * d + c)
            })
            .collect()
    };
    Expected {
        parts: [
            (q_at, dq, dq_size),
            (k_at(q_len), dk, dk_size),
            (k_at(q_len + k_len), dv, dv_size),
        ],
        full,
        checked,
    }
}

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
    let rows = shape.total_q() * shape.heads;
    check_host_fits(
        "the inputs and references",
        ((4 * q_len + 4 * k_len) * T::DTYPE.size() + (q_len + rows) * 8) as u64,
    )?;
    let problem = BackwardProblem::new(gpu, shape)?;
    // Least traffic: Q, K, V, O, dO and L read once, dQ, dK, dV written once.
    let io_bytes = ((4 * q_len + 4 * k_len) * T::DTYPE.size() + rows * 4) as u64;
    gpu.check_fits(
        "the attention tensors and gradients",
        io_bytes + (rows * 4) as u64,
    )?;

    let seed = args.common.seed;
    // As day 10: Q, K in [-2, 2) (peaked rows), V in [-1, 1); dO in [-1, 1).
    let q: Vec<T> = inputs::uniform(q_len, -2.0, 2.0, seed);
    let k: Vec<T> = inputs::uniform(k_len, -2.0, 2.0, seed.wrapping_add(1));
    let v: Vec<T> = inputs::uniform(k_len, -1.0, 1.0, seed.wrapping_add(2));
    let d_o: Vec<T> = inputs::uniform(q_len, -1.0, 1.0, seed.wrapping_add(3));
    let (q_dev, k_dev, v_dev, d_o_dev) = (
        gpu.upload(&q)?,
        gpu.upload(&k)?,
        gpu.upload(&v)?,
        gpu.upload(&d_o)?,
    );

    // O and L from day 10's fastest forward on this GPU (checked there); the reference is
    // given the same ones.
    let mut o_dev = gpu.alloc_poisoned::<T>(q_len)?;
    let mut lse_dev = gpu.alloc_poisoned::<f32>(rows)?;
    let fwd_version = match day20::HEAD_DIMS.contains(&d) {
        true => day.fastest().0,
        false => day10::Version::Naive,
    };
    let mut fwd_scores = match fwd_version {
        day10::Version::Naive => {
            Some(gpu.alloc_poisoned::<f32>((problem.forward.score_bytes() / 4).max(1) as usize)?)
        }
        _ => None,
    };
    let tensors = Tensors {
        q: &q_dev,
        k: &k_dev,
        v: &v_dev,
        lse: &mut lse_dev,
        scores: fwd_scores.as_mut(),
    };
    day.forward(gpu, fwd_version, &problem, tensors, &mut o_dev)?;
    drop(fwd_scores);
    let o: Vec<f64> = gpu.download(&o_dev)?.iter().map(|x| x.to_f64()).collect();
    let lse: Vec<f64> = gpu.download(&lse_dev)?.iter().map(|&x| x as f64).collect();
    let x = BackwardInputs {
        q: &q,
        k: &k,
        v: &v,
        d_o: &d_o,
        o: &o,
        lse: &lse,
    };
    let expected = expected_gradients(&x, shape, seed);

    let (description, key) = describe(shape, T::DTYPE, args.deterministic);
    let checked = match expected.full {
        true => "every gradient checked".to_string(),
        false => format!(
            "{} query rows and {} keys checked, one in every {SAMPLED_TILE}-row tile",
            expected.checked.0, expected.checked.1
        ),
    };
    let mut session = Session::new(
        gpu,
        &args.common,
        Problem {
            day: "day20",
            title: "FlashAttention-2 backward",
            description: format!("{description} ({checked})"),
            key,
            bytes_per_run: io_bytes,
            // FlashAttention's count: 2.5 times the forward's (5 products instead of 2).
            flops_per_run: Some(shape.exact_flops() * 5 / 2),
        },
    )?;
    if args.sweep {
        session = session.quiet();
    }
    session.save_input("q", &[shape.total_q(), shape.heads, d], &q)?;
    session.save_input("k", &[shape.total_k(), shape.kv_heads, d], &k)?;
    session.save_input("v", &[shape.total_k(), shape.kv_heads, d], &v)?;
    session.save_input("d_o", &[shape.total_q(), shape.heads, d], &d_o)?;

    let mode = match args.deterministic {
        true => Mode::Deterministic,
        false => Mode::Atomic,
    };
    let mut grads = gpu.alloc_poisoned::<T>(q_len + 2 * k_len)?;
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
        let mut ws = day.workspace(gpu, version, &problem)?;
        let run = RunVersion {
            name,
            kernel: Some((kernel, launch)),
            global_bytes: None,
        };
        let mut launch = |g: &mut cudarc::driver::CudaSlice<T>| {
            let t = BackwardTensors {
                q: &q_dev,
                k: &k_dev,
                v: &v_dev,
                o: &o_dev,
                d_o: &d_o_dev,
                lse: &lse_dev,
            };
            day.backward(gpu, version, mode, &problem, t, &mut ws, g)
        };
        session.run_version_checked(
            run,
            &mut grads,
            &[q_len + 2 * k_len],
            |got| expected.check(got, 0, T::DTYPE),
            &mut launch,
        )?;
        // dK and dV of the last run (every run writes the same values up to atomics' order).
        let got = gpu.download(&grads)?;
        session.check_also(name, "dK", expected.check(&got, 1, T::DTYPE));
        session.check_also(name, "dV", expected.check(&got, 2, T::DTYPE));
        if mode == Mode::Deterministic {
            let again = common::session::launch_and_read(gpu, &mut grads, &mut launch)?;
            let same = got
                .iter()
                .zip(&again)
                .all(|(a, b)| a.to_f64().to_bits() == b.to_f64().to_bits());
            let mut report = expected.check(&again, 0, T::DTYPE);
            if !same {
                report.mismatches += 1;
            }
            session.check_also(name, "a rerun gives the same bits", report);
        }
    }
    Ok(session.finish())
}

/// Every query row and key when the reference is cheap; otherwise a random query row and a
/// random key in every [`SAMPLED_TILE`]-row tile of every head of every sequence, and the
/// first and last of each.
fn checked_rows(shape: &AttentionShape, seed: u64) -> (Vec<QueryRow>, Vec<KeyRow>) {
    let max_k = shape.seqlens_k.iter().max().copied().unwrap_or(0);
    let work = (shape.total_q() * shape.heads)
        .saturating_mul(max_k)
        .saturating_mul(shape.head_dim);
    if work <= FULL_CHECK_WORK {
        return (shape.all_query_rows(), shape.all_key_rows());
    }
    (
        shape.sampled_query_rows(SAMPLED_TILE, seed),
        shape.sampled_key_rows(SAMPLED_TILE, seed),
    )
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
    let versions: Vec<&str> = reports
        .iter()
        .flat_map(|r| r.rows.iter().map(|row| row.version.as_str()))
        .fold(Vec::new(), |mut names, n| {
            if !names.contains(&n) {
                names.push(n);
            }
            names
        });
    let mut series = sweep::version_series(reports, versions, seqlen_of, |row| row.tflops);
    let mut peers: Vec<&str> = Vec::new();
    for r in reports {
        for p in &r.peers {
            if !peers.contains(&p.peer.as_str()) {
                peers.push(&p.peer);
            }
        }
    }
    for peer in peers {
        series.push(plot::Series {
            name: format!("{peer} (peer)"),
            points: reports
                .iter()
                .filter_map(|r| {
                    let fig = r.peers.iter().find(|p| p.peer == peer)?;
                    let flops = r.flops_per_run? as f64;
                    Some((seqlen_of(r), flops / (fig.median_ms * 1e-3) / 1e12))
                })
                .collect(),
        });
    }
    let title = format!(
        "day20 FlashAttention-2 backward: hd{}, hidden {HIDDEN}, {TOKENS} tokens{}, {}, {}",
        args.head_dim(),
        if args.causal { ", causal" } else { "" },
        args.dtype,
        gpu.info.name
    );
    plot::write_svg(
        &args.plot,
        &LinePlot {
            title: &title,
            x_label: "sequence length",
            y_label: "TFLOP/s (2.5 x 4 b h s^2 d, halved when causal)",
            log2_x: true,
            series: &series,
            hlines: &[],
        },
    )?;
    let table = sweep::summary_table("seqlen", "TFLOP/s", 1, &series);
    println!("{title}\n{table}\nplot: {}", args.plot.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_problems_check_every_row_and_large_ones_one_in_every_tile() {
        let small = AttentionShape::uniform(2, 100, 100, 2, 2, 64, true);
        assert_eq!(checked_rows(&small, 1).0.len(), 2 * 100 * 2);
        let large = benchmark_shape(4096, 128, false);
        let (rows, keys) = checked_rows(&large, 1);
        // 64 tiles x 16 heads x 4 sequences, and the first and last.
        assert_eq!(rows.len(), 64 * 16 * 4 + 2);
        assert_eq!(rows, large.sampled_query_rows(SAMPLED_TILE, 1));
        assert_eq!(keys, large.sampled_key_rows(SAMPLED_TILE, 1));
    }
}
