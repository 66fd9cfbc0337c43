//! `cargo run --release -p day10`: check every FlashAttention forward version against the f64
//! CPU reference (O and L), time it, and print the table; `--sweep` plots TFLOP/s against the
//! sequence length beside PyTorch's SDPA backends.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use clap::Parser;
use common::cli::{CommonArgs, check_host_fits, finish_reports, run_main};
use common::dtype::Dtype;
use common::element::Element;
use common::plot::{self, LinePlot};
use common::reference::attention::{AttentionShape, QueryRow};
use common::report::DayReport;
use common::session::{Problem, Refused, Session, Version as RunVersion};
use common::sizes::positive;
use common::{Gpu, UsageError, inputs, sizes, sweep};
use day10::{DeviceProblem, ExpectedO, FlashAttention, Tensors, Version};
use half::{bf16, f16};

/// Day 10: FlashAttention-2 forward (bf16/f16, causal or not, GQA, variable lengths).
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
/// On large problems, one query row is checked in every tile of this many rows of every head
/// of every sequence: the smallest query tile of any version (`fa2_mma`'s 64), so every block
/// of every version, and every work item of `fa_hopper`'s persistent grid, has checked rows.
const SAMPLED_TILE: usize = 64;
/// Up to this many multiply-adds of the reference (rows x keys x head dim), every row.
const FULL_CHECK_WORK: usize = 1 << 28;
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
    // Everything a user can get wrong is refused here, before the GPU is opened: the same
    // error on a machine without one.
    day10::check_dtype(args.dtype)?;
    let shapes = problems(&args)?;
    let versions: Vec<Version> = selected
        .iter()
        .filter_map(|n| Version::from_name(n))
        .collect();
    for shape in &shapes {
        day10::validate(shape)?;
        day10::check_head_dim(shape.head_dim, &versions)?;
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
    let full = rows.len() == shape.total_q() * shape.heads;
    check_host_fits(
        "the reference",
        sizes::product("the reference", &[rows.len(), d + 1, 8 * 3])? as u64,
    )?;
    // The f64 reference at the checked rows, on every host core, with each element's
    // magnitude for its rounding allowance (`day10::o_slack`).
    let expected = ExpectedO::at_rows(&q, &k, &v, shape, &rows);
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
    let (o_at, l_at) = match full {
        true => (None, None),
        false => (Some(&o_at[..]), Some(&l_at[..])),
    };

    let (description, key) = describe(shape, T::DTYPE);
    let checked = if full {
        "every row checked".to_string()
    } else {
        format!(
            "{} sampled rows checked, one in every {SAMPLED_TILE}-row tile",
            rows.len()
        )
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
        session.save_reference(&o_shape, &expected.o)?;
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
        session.run_version_checked(
            run,
            &mut o,
            &o_shape,
            |got| expected.check_o(got, o_at, &o_shape),
            |o| {
                let tensors = Tensors {
                    q: &q_dev,
                    k: &k_dev,
                    v: &v_dev,
                    lse: &mut lse,
                    scores: scores.as_mut(),
                };
                day.forward(gpu, version, &problem, tensors, o)
            },
        )?;
        // L of the last run (every run writes the same values; poisoned before the first).
        let lse_got = gpu.download(&lse)?;
        let l_check = expected.check_lse(&lse_got, l_at, &l_shape);
        session.check_also(name, "L (log-sum-exp)", l_check);
    }
    Ok(session.finish())
}

/// Every query row when the reference is cheap; otherwise a random row in every
/// [`SAMPLED_TILE`]-row tile of every head of every sequence, and the first and last.
fn checked_rows(shape: &AttentionShape, seed: u64) -> Vec<QueryRow> {
    let max_k = shape.seqlens_k.iter().max().copied().unwrap_or(0);
    let work = (shape.total_q() * shape.heads)
        .saturating_mul(max_k)
        .saturating_mul(shape.head_dim);
    if work <= FULL_CHECK_WORK {
        return shape.all_query_rows();
    }
    shape.sampled_query_rows(SAMPLED_TILE, seed)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_problems_check_every_row_and_large_ones_one_in_every_tile() {
        let small = AttentionShape::uniform(2, 100, 100, 2, 2, 64, true);
        assert_eq!(checked_rows(&small, 1).len(), 2 * 100 * 2);
        let large = benchmark_shape(4096, 128, false);
        let rows = checked_rows(&large, 1);
        // 64 tiles x 16 heads x 4 sequences, and the first and last.
        assert_eq!(rows.len(), 64 * 16 * 4 + 2);
        assert_eq!(rows, large.sampled_query_rows(SAMPLED_TILE, 1));
    }
}
