//! `cargo run --release -p day10`: check every FlashAttention forward version against the f64
//! CPU reference (O and L), time it, and print the table; `--sweep` plots TFLOP/s against the
//! sequence length beside PyTorch's SDPA backends.

use std::process::ExitCode;

use anyhow::Result;
use clap::Parser;
use common::cli::{CommonArgs, check_host_fits, run_main};
use common::element::Element;
use common::family::attention::{self, AttentionArgs, AttentionDay, Run, SAMPLED_TILE};
use common::measure::report::DayReport;
use common::reference::attention::AttentionShape;
use common::session::{Problem, Version as RunVersion};
use common::sizes;
use day10::{DeviceProblem, ExpectedO, FlashAttention, Inputs, Version};

/// Day 10: FlashAttention-2 forward (bf16/f16, causal or not, GQA, variable lengths).
#[derive(Parser)]
#[command(version, about)]
struct Args {
    #[command(flatten)]
    attention: AttentionArgs,
    #[command(flatten)]
    common: CommonArgs,
}

/// Up to this many multiply-adds of the reference (rows x keys x head dim), every row.
const FULL_CHECK_WORK: usize = 1 << 28;

/// The prefill target of the default run: seqlen, query heads, K/V heads, head dim.
const PREFILL: (usize, usize, usize, usize) = (8192, 32, 8, 128);

fn main() -> ExitCode {
    run_main(|| {
        let args: Args = common::cli::parse_args(&Version::NAMES);
        let attention_args = day10::with_hd256_benchmark(args.attention);
        attention::run(&attention_args, &args.common, |gpu| {
            Ok(Forward(FlashAttention::load(gpu)?))
        })
    })
}

/// The day's kernels, as the attention runner drives them.
struct Forward(FlashAttention);

impl AttentionDay for Forward {
    const DAY: &'static str = "day10";
    const TITLE: &'static str = "FlashAttention-2 forward";
    const FLOPS: &'static str = "TFLOP/s (4 b h s^2 d, halved when causal)";
    const VERSIONS: &'static [&'static str] = &Version::NAMES;

    fn check_shape(shape: &AttentionShape, versions: &[&str]) -> Result<()> {
        day10::check_request(shape, versions)
    }

    /// A prefill as a server runs it: one sequence of 8192 tokens, 32 query heads sharing 8
    /// K/V heads (grouped-query), head dim 128, causal.
    fn more_targets() -> Vec<AttentionShape> {
        let (seqlen, heads, kv_heads, head_dim) = PREFILL;
        vec![AttentionShape::uniform(
            1, seqlen, seqlen, heads, kv_heads, head_dim, true,
        )]
    }

    fn run_problem<T: Element>(&self, run: &Run, shape: &AttentionShape) -> Result<DayReport> {
        let (gpu, day) = (run.gpu, &self.0);
        let d = shape.head_dim;
        let (q_len, k_len) = shape.lens();
        check_host_fits(
            "the inputs",
            ((q_len * 2 + k_len * 2) * T::DTYPE.size() + q_len * 8) as u64,
        )?;
        let problem = DeviceProblem::new(gpu, shape)?;
        let io_bytes =
            ((2 * q_len + 2 * k_len) * T::DTYPE.size() + shape.total_q() * shape.heads * 4) as u64;
        gpu.check_fits("the attention tensors", io_bytes)?;

        let seed = run.common.seed;
        let (q, k, v) = attention::random_qkv::<T>(shape, seed);

        let rows = attention::query_rows_to_check(shape, FULL_CHECK_WORK, seed);
        let full = rows.len() == shape.total_q() * shape.heads;
        check_host_fits(
            "the reference",
            sizes::product("the reference", &[rows.len(), d + 1, 8 * 3])? as u64,
        )?;
        // The f64 reference at the checked rows, on every host core, with each element's
        // magnitude for its rounding allowance (`day10::o_slack`).
        let expected = ExpectedO::at_rows(&q, &k, &v, shape, &rows);
        let o_at = attention::query_row_elements(shape, &rows);
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

        let (description, key) = attention::describe(shape, T::DTYPE, "attention");
        let checked = if full {
            "every row checked".to_string()
        } else {
            format!(
                "{} sampled rows checked, one in every {SAMPLED_TILE}-row tile",
                rows.len()
            )
        };
        let mut session = run.session(Problem {
            day: Self::DAY,
            title: Self::TITLE,
            description: format!("{description} ({checked})"),
            key,
            bytes_per_run: io_bytes,
            flops_per_run: Some(shape.exact_flops()),
        })?;
        session.save_input("q", &o_shape, &q)?;
        session.save_input("k", &[shape.total_k(), shape.kv_heads, d], &k)?;
        session.save_input("v", &[shape.total_k(), shape.kv_heads, d], &v)?;
        if full {
            session.save_reference(&o_shape, &expected.o)?;
        }

        let (q, k, v) = (&gpu.upload(&q)?, &gpu.upload(&k)?, &gpu.upload(&v)?);
        let mut o = gpu.alloc_poisoned::<T>(q_len)?;
        let mut lse = gpu.alloc_poisoned::<f32>(shape.total_q() * shape.heads)?;
        let plan = |name: &str| {
            let version = Version::from_name(name).expect("selected from Version::NAMES");
            day.plan::<T>(gpu, version, &problem, Inputs { q, k, v })
        };
        run.each_version(&mut session, plan, |session, name, plan| {
            let mut scores = match plan.version() {
                Version::Naive => {
                    gpu.check_fits("naive's score matrix", problem.score_bytes() + io_bytes)?;
                    Some(gpu.alloc_poisoned::<f32>(problem.score_bytes() as usize / 4)?)
                }
                _ => None,
            };
            gpu.poison(&mut lse)?;
            let version_run = RunVersion {
                name,
                kernel: Some(plan.kernel()),
                global_bytes: None,
            };
            session.run_version_checked(
                version_run,
                &mut o,
                &o_shape,
                |got| expected.check_o(got, o_at, &o_shape),
                |o| plan.launch(o, &mut lse, scores.as_mut()),
            )?;
            // L of the last run (every run writes the same values; poisoned before the first).
            let lse_got = gpu.download(&lse)?;
            let l_check = expected.check_lse(&lse_got, l_at, &l_shape);
            session.check_also(name, "L (log-sum-exp)", l_check);
            Ok(())
        })?;
        Ok(session.finish())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn problems(flags: &[&str]) -> Vec<AttentionShape> {
        let args =
            Args::try_parse_from(std::iter::once("day10").chain(flags.iter().copied())).unwrap();
        day10::with_hd256_benchmark(args.attention)
            .problems()
            .unwrap()
    }

    #[test]
    fn head_dim_256_alone_is_the_16k_benchmark_shape() {
        let hd256 = problems(&["--head-dim", "256"]);
        assert_eq!(
            hd256,
            [AttentionShape::uniform(1, 16384, 16384, 16, 16, 256, false)]
        );
        let causal = problems(&["--head-dim", "256", "--causal"]);
        assert!(causal[0].causal && causal[0].total_q() == 16384);
        // With any size flag, or at another head dim, the flags are taken as they are.
        let sized = problems(&["--head-dim", "256", "--seqlen", "1000"]);
        assert_eq!((sized[0].seqlens_q[0], sized[0].heads), (1000, 8));
        let hd64 = problems(&["--head-dim", "64"]);
        assert_eq!((hd64[0].seqlens_q[0], hd64[0].heads), (4096, 32));
        assert_eq!(problems(&["--head-dim", "256", "--sweep"]).len(), 6);
    }
}
