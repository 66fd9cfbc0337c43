//! `cargo bench -p day19`: criterion statistics of the naive (whole logits at once) and the
//! chunked fused linear + cross-entropy forward and backward on the day's default problem
//! (T 8192 x Hd 4096 x V 128256, bf16, the inputs `cargo run -p day19` makes), on cuBLAS's
//! GEMMs, timed on the GPU with CUDA events. Throughput is 3 x 2 T Hd V FLOPs per run (the
//! logits, dH and dW GEMMs), which criterion shows as elements/s: read them as FLOP/s. Skips
//! with one line without a GPU.

use anyhow::Result;
use common::bench_support::{BenchCase, Work, default_seed};
use common::gpu::cublas::Cublas;
use common::{Gpu, session::Refused, testing};
use cudarc::driver::CudaSlice;
use day19::reference::{CeOptions, IGNORE_INDEX};
use day19::{CrossEntropy, FusedPlan, Shape, default_chunk, make_inputs};
use half::bf16;

/// main.rs's default `--tokens`, `--hidden` and `--vocab`.
const SHAPE: Shape = Shape {
    tokens: day19::DEFAULT_TOKENS as usize,
    hidden: day19::DEFAULT_HIDDEN as usize,
    vocab: day19::DEFAULT_VOCAB as usize,
};
/// main.rs's defaults: no label smoothing, no z-loss, no target ignored.
const OPTIONS: CeOptions = CeOptions {
    label_smoothing: 0.0,
    z_loss: 0.0,
    ignore_index: IGNORE_INDEX,
};
const IGNORE_FRACTION: f64 = 0.0;

/// The baseline (the first version: one chunk of every token) and the chunked version on
/// cuBLAS; `chunked_day18` is left out, its NVRTC compile of day 18's kernels takes tens of
/// seconds and it measured no faster than `chunked_cublas`.
const VERSIONS: &[&str] = &["naive", "chunked_cublas"];

struct Problem {
    ce: CrossEntropy,
    cublas: Cublas,
    h: CudaSlice<bf16>,
    w: CudaSlice<bf16>,
    targets: CudaSlice<i32>,
}

fn setup(gpu: &Gpu) -> Result<Problem> {
    let (h, w, targets) = make_inputs(SHAPE, IGNORE_FRACTION, IGNORE_INDEX, default_seed()?);
    Ok(Problem {
        ce: CrossEntropy::load(gpu)?,
        cublas: Cublas::open(gpu)?,
        h: gpu.upload(&h)?,
        w: gpu.upload(&w)?,
        targets: gpu.upload(&targets)?,
    })
}

fn cases<'a>(gpu: &'a Gpu, p: &'a Problem) -> Result<Vec<BenchCase<'a>>> {
    let Shape {
        tokens,
        hidden,
        vocab,
    } = SHAPE;
    let work = Work::Flops(3 * 2 * (tokens * hidden * vocab) as u64);
    let mut cases = Vec::new();
    for &name in VERSIONS {
        let chunk = match name {
            "naive" => tokens,
            _ => default_chunk(SHAPE).min(tokens),
        };
        let mut plan = match FusedPlan::new(gpu, SHAPE, chunk, &OPTIONS) {
            Ok(plan) => plan,
            // The naive version's whole logits may not fit a smaller GPU: said, not failed.
            Err(e) if e.is::<Refused>() => {
                testing::note_skip(&format!("day19 criterion bench {name}"), &e.to_string());
                continue;
            }
            Err(e) => return Err(e),
        };
        let mut grads = gpu.alloc_poisoned::<bf16>((tokens + vocab) * hidden)?;
        let mut loss = gpu.alloc_poisoned::<f32>(1)?;
        let launches = plan.prepare(gpu, &p.ce, &p.cublas, &p.h, &p.w, &grads)?;
        cases.push(BenchCase::new(name, work, move || {
            plan.run(
                gpu, &launches, &p.h, &p.w, &p.targets, &OPTIONS, &mut grads, &mut loss,
            )
        }));
    }
    Ok(cases)
}

common::gpu_criterion_bench!("day19_fused_linear_cross_entropy", setup, cases);
