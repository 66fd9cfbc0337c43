//! `cargo bench -p day20`: criterion statistics of the naive baseline, `fa2_mma` and the
//! fastest backward this GPU runs (`fa_hopper` on Hopper) on the day's first default problem
//! (batch 4 x seqlen 4096 x 16 heads x d 128, bf16, no mask, atomic dQ; the inputs `cargo run -p
//! day20` makes, O and L from day 10's fastest forward), timed on the GPU with CUDA events.
//! Throughput is 2.5 x 4 b h s^2 d FLOPs per run, which criterion shows as elements/s: read them
//! as FLOP/s. Skips with one line without a GPU.

use anyhow::Result;
use common::bench_support::{BenchCase, Work, attention_default_problem, default_seed};
use common::family::attention::{random_d_o, random_qkv};
use common::{Gpu, reference::attention::AttentionShape};
use cudarc::driver::CudaSlice;
use day20::{BackwardProblem, BackwardTensors, FlashAttention, Inputs, Mode, Version};
use half::bf16;

/// The attention days' default dtype.
type T = bf16;

struct Problem {
    day: FlashAttention,
    shape: AttentionShape,
    problem: BackwardProblem,
    q: CudaSlice<T>,
    k: CudaSlice<T>,
    v: CudaSlice<T>,
    o: CudaSlice<T>,
    d_o: CudaSlice<T>,
    lse: CudaSlice<f32>,
}

fn setup(gpu: &Gpu) -> Result<Problem> {
    let shape = attention_default_problem()?;
    let seed = default_seed()?;
    let (q, k, v) = random_qkv::<T>(&shape, seed);
    let day = FlashAttention::load(gpu)?;
    let problem = BackwardProblem::new(gpu, &shape)?;
    let (q, k, v) = (gpu.upload(&q)?, gpu.upload(&k)?, gpu.upload(&v)?);
    // O and L as main.rs makes them: day 10's fastest forward on this GPU.
    let mut o = gpu.alloc_poisoned::<T>(q.len())?;
    let mut lse = gpu.alloc_poisoned::<f32>(shape.total_q() * shape.heads)?;
    let x = Inputs {
        q: &q,
        k: &k,
        v: &v,
    };
    day.forward_for_backward(gpu, &problem, x, &mut o, &mut lse)?;
    Ok(Problem {
        d_o: gpu.upload(&random_d_o::<T>(&shape, seed))?,
        day,
        shape,
        problem,
        q,
        k,
        v,
        o,
        lse,
    })
}

fn cases<'a>(gpu: &'a Gpu, p: &'a Problem) -> Result<Vec<BenchCase<'a>>> {
    // The baseline, the best portable version, and the fastest on this GPU (the same one
    // off Hopper).
    let mut versions = vec![Version::Naive, Version::Fa2Mma, p.day.fastest().1];
    versions.dedup();
    // FlashAttention's count: 2.5 times the forward's (5 products instead of 2).
    let work = Work::Flops(p.shape.exact_flops() * 5 / 2);
    let (q_len, k_len) = p.problem.lens();
    versions
        .into_iter()
        .map(|version| {
            // A version that refuses the problem fails here, not in criterion's loop; the
            // plan (its workspace and, for fa_hopper, the tensor maps) is made once, outside
            // the timed runs.
            let t = BackwardTensors {
                q: &p.q,
                k: &p.k,
                v: &p.v,
                o: &p.o,
                d_o: &p.d_o,
                lse: &p.lse,
            };
            let mut plan = p.day.plan::<T>(gpu, version, Mode::Atomic, &p.problem, t)?;
            let mut grads = gpu.alloc_poisoned::<T>(q_len + 2 * k_len)?;
            Ok(BenchCase::new(version.name(), work, move || {
                plan.launch(&mut grads)
            }))
        })
        .collect()
}

common::gpu_criterion_bench!("day20_fa2_backward", setup, cases);
