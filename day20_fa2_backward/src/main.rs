//! `cargo run --release -p day20`: check every FlashAttention backward version (dQ, dK, dV)
//! against the f64 CPU reference, time it, and print the table; `--deterministic` runs the
//! atomic-free mode (and checks that a rerun gives the same bits); `--sweep` plots TFLOP/s
//! against the sequence length beside PyTorch's SDPA backends.

use std::process::ExitCode;

use anyhow::Result;
use clap::Parser;
use common::cli::{CommonArgs, check_host_fits, run_main};
use common::element::Element;
use common::family::attention::{self, AttentionArgs, AttentionDay, Run, SAMPLED_TILE};
use common::measure::report::DayReport;
use common::reference::attention::{AttentionShape, BackwardInputs};
use common::session::{Problem, Version as RunVersion};
use cudarc::driver::CudaSlice;
use day20::{
    BackwardProblem, BackwardTensors, FlashAttention, Gradient, Inputs, Mode, SampledGradients,
    Version,
};

/// Day 20: FlashAttention-2 backward (bf16/f16, causal or not, GQA, variable lengths).
#[derive(Parser)]
#[command(version, about)]
struct Args {
    #[command(flatten)]
    attention: AttentionArgs,
    /// The same bits every run (keys end in `-det`): dQ by a second pass without float atomics
    /// (fa2_*), or by adds ordered by key tile (fa_hopper).
    #[arg(long, display_order = attention::SWEEP_DISPLAY_ORDER)]
    deterministic: bool,
    #[command(flatten)]
    common: CommonArgs,
}

/// Up to this many multiply-adds (rows x keys x head dim), every row and key: half day 10's
/// limit, as the backward's reference does several times the forward's work.
const FULL_CHECK_WORK: usize = 1 << 27;

fn main() -> ExitCode {
    run_main(|| {
        let args: Args = common::cli::parse_args(&Version::NAMES);
        let mode = match args.deterministic {
            true => Mode::Deterministic,
            false => Mode::Atomic,
        };
        let attention_args = day10::with_hd256_benchmark(args.attention);
        attention::run(&attention_args, &args.common, |gpu| {
            Ok(Backward {
                day: FlashAttention::load(gpu)?,
                mode,
            })
        })
    })
}

/// The day's kernels and the mode to run them in, as the attention runner drives them.
struct Backward {
    day: FlashAttention,
    mode: Mode,
}

impl AttentionDay for Backward {
    const DAY: &'static str = "day20";
    const TITLE: &'static str = "FlashAttention-2 backward";
    const FLOPS: &'static str = "TFLOP/s (2.5 x 4 b h s^2 d, halved when causal)";
    const VERSIONS: &'static [&'static str] = &Version::NAMES;

    fn check_shape(shape: &AttentionShape, versions: &[&str]) -> Result<()> {
        day20::check_request(shape, versions)
    }

    fn run_problem<T: Element>(&self, run: &Run, shape: &AttentionShape) -> Result<DayReport> {
        let (gpu, day, mode) = (run.gpu, &self.day, self.mode);
        let d = shape.head_dim;
        let (q_len, k_len) = shape.lens();
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

        let seed = run.common.seed;
        // As day 10's, and dO from the same seed.
        let (q, k, v) = attention::random_qkv::<T>(shape, seed);
        let d_o: Vec<T> = attention::random_d_o(shape, seed);
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
        let x = Inputs {
            q: &q_dev,
            k: &k_dev,
            v: &v_dev,
        };
        day.forward_for_backward(gpu, &problem, x, &mut o_dev, &mut lse_dev)?;
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
        let expected = SampledGradients::new(&x, shape, FULL_CHECK_WORK, seed);

        let (description, key) = attention::describe(shape, T::DTYPE, "attention_bwd");
        let (description, key) = match mode {
            Mode::Deterministic => (format!("{description}, deterministic"), key + "-det"),
            Mode::Atomic => (description, key),
        };
        let checked = match expected.full {
            true => "every gradient checked".to_string(),
            false => format!(
                "{} query rows and {} keys checked, one in every {SAMPLED_TILE}-row tile",
                expected.checked.0, expected.checked.1
            ),
        };
        let mut session = run.session(Problem {
            day: Self::DAY,
            title: Self::TITLE,
            description: format!("{description} ({checked})"),
            key,
            bytes_per_run: io_bytes,
            // FlashAttention's count: 2.5 times the forward's (5 products instead of 2).
            flops_per_run: Some(shape.exact_flops() * 5 / 2),
        })?;
        session.save_input("q", &[shape.total_q(), shape.heads, d], &q)?;
        session.save_input("k", &[shape.total_k(), shape.kv_heads, d], &k)?;
        session.save_input("v", &[shape.total_k(), shape.kv_heads, d], &v)?;
        session.save_input("d_o", &[shape.total_q(), shape.heads, d], &d_o)?;

        let mut grads = gpu.alloc_poisoned::<T>(q_len + 2 * k_len)?;
        let plan = |name: &str| {
            let version = Version::from_name(name).expect("selected from Version::NAMES");
            let t = BackwardTensors {
                q: &q_dev,
                k: &k_dev,
                v: &v_dev,
                o: &o_dev,
                d_o: &d_o_dev,
                lse: &lse_dev,
            };
            day.plan::<T>(gpu, version, mode, &problem, t)
        };
        run.each_version(&mut session, plan, |session, name, mut plan| {
            let version_run = RunVersion {
                name,
                kernel: Some(plan.kernel()),
                global_bytes: None,
            };
            let mut launch = |g: &mut CudaSlice<T>| plan.launch(g);
            session.run_version_checked(
                version_run,
                &mut grads,
                &[q_len + 2 * k_len],
                |got| expected.check(got, Gradient::Dq),
                &mut launch,
            )?;
            // dK and dV of the last run (every run writes the same values up to atomics' order).
            let got = gpu.download(&grads)?;
            session.check_also(name, "dK", expected.check(&got, Gradient::Dk));
            session.check_also(name, "dV", expected.check(&got, Gradient::Dv));
            if mode == Mode::Deterministic {
                let again = common::session::launch_and_read(gpu, &mut grads, &mut launch)?;
                let same = got
                    .iter()
                    .zip(&again)
                    .all(|(a, b)| a.to_f64().to_bits() == b.to_f64().to_bits());
                let mut report = expected.check(&again, Gradient::Dq);
                if !same {
                    report.mismatches += 1;
                }
                session.check_also(name, "a rerun gives the same bits", report);
            }
            Ok(())
        })?;
        Ok(session.finish())
    }
}
