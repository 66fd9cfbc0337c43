//! `cargo bench -p day10`: criterion statistics of the naive baseline, `fa2_mma` and the
//! fastest forward this GPU runs (`fa_hopper` on Hopper) on the day's first default problem
//! (batch 4 x seqlen 4096 x 16 heads x d 128, bf16, no mask; the inputs `cargo run -p day10`
//! makes), timed on the GPU with CUDA events. Throughput is 4 b h s^2 d FLOPs per run, which
//! criterion shows as elements/s: read them as FLOP/s. Skips with one line without a GPU.

use anyhow::Result;
use common::bench_support::{BenchCase, Work, attention_default_problem, default_seed};
use common::family::attention::random_qkv;
use common::{Gpu, reference::attention::AttentionShape};
use cudarc::driver::CudaSlice;
use day10::{DeviceProblem, FlashAttention, Inputs, Version};
use half::bf16;

/// The attention days' default dtype.
type T = bf16;

struct Problem {
    day: FlashAttention,
    shape: AttentionShape,
    problem: DeviceProblem,
    q: CudaSlice<T>,
    k: CudaSlice<T>,
    v: CudaSlice<T>,
}

fn setup(gpu: &Gpu) -> Result<Problem> {
    let shape = attention_default_problem()?;
    let (q, k, v) = random_qkv::<T>(&shape, default_seed()?);
    Ok(Problem {
        day: FlashAttention::load(gpu)?,
        problem: DeviceProblem::new(gpu, &shape)?,
        q: gpu.upload(&q)?,
        k: gpu.upload(&k)?,
        v: gpu.upload(&v)?,
        shape,
    })
}

fn cases<'a>(gpu: &'a Gpu, p: &'a Problem) -> Result<Vec<BenchCase<'a>>> {
    // The baseline, the best portable version, and the fastest on this GPU (the same one
    // off Hopper).
    let mut versions = vec![Version::Naive, Version::Fa2Mma, p.day.fastest()];
    versions.dedup();
    let work = Work::Flops(p.shape.exact_flops());
    let rows = p.shape.total_q() * p.shape.heads;
    versions
        .into_iter()
        .map(|version| {
            // A version that refuses the problem fails here, not in criterion's loop; the
            // plan (for fa_hopper, the tensor maps) is made once, outside the timed runs.
            let inputs = Inputs {
                q: &p.q,
                k: &p.k,
                v: &p.v,
            };
            let plan = p.day.plan::<T>(gpu, version, &p.problem, inputs)?;
            let mut o = gpu.alloc_poisoned::<T>(p.q.len())?;
            let mut lse = gpu.alloc_poisoned::<f32>(rows)?;
            let mut scores = match version {
                Version::Naive => {
                    Some(gpu.alloc_poisoned::<f32>(p.problem.score_bytes() as usize / 4)?)
                }
                _ => None,
            };
            Ok(BenchCase::new(version.name(), work, move || {
                plan.launch(&mut o, &mut lse, scores.as_mut())
            }))
        })
        .collect()
}

common::gpu_criterion_bench!("day10_fa2_forward", setup, cases);
