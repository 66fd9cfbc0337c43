//! `cargo run --release -p day19`: the fused linear + cross-entropy (forward and backward) at
//! T = 8192, Hd = 4096, V = 128256 bf16, and cross-entropy alone on 8192 x 128256 bf16
//! logits; every version checked, timed, and its extra device memory reported.

use anyhow::{Result, anyhow};
use clap::Parser;
use common::cli::{CommonArgs, bytes_for, check_host_fits, finish_reports, run_main};
use common::{UsageError, sizes};
use day19::reference::{CeOptions, IGNORE_INDEX};
use day19::run::{Request, run_ce_only, run_fused};
use day19::{CE_VERSIONS, CrossEntropy, FUSED_VERSIONS, FusedVersion, RowKernel, Shape};

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
    let fused: Vec<FusedVersion> = selected
        .iter()
        .filter_map(|v| FusedVersion::from_name(v))
        .collect();
    let ce_only: Vec<RowKernel> = selected
        .iter()
        .filter(|v| CE_VERSIONS.contains(v))
        .map(|v| {
            RowKernel::from_name(v)
                .ok_or_else(|| anyhow!("day19 has no cross-entropy version `{v}`"))
        })
        .collect::<Result<_>>()?;

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
    let request = Request {
        common: &args.common,
        shape,
        opts,
        chunk: args.chunk.map(|c| c as usize),
        ignore_fraction: args.ignore_fraction,
    };
    let mut reports = Vec::new();
    if !fused.is_empty() {
        // H, W, dH, dW in bf16; the chunk's logits come on top, checked per version.
        gpu.check_fits("H, W and their gradients", 2 * h_w * 2)?;
        reports.push(run_fused(&gpu, &ce, &request, &fused)?);
    }
    if !ce_only.is_empty() {
        gpu.check_fits("the logits and their gradient", 2 * logits * 2)?;
        reports.push(run_ce_only(&gpu, &ce, &request, &ce_only)?);
    }
    finish_reports(&args.common, &reports)
}
