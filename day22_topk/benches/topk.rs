//! `cargo bench -p day22`: criterion statistics of every top-k version on the day's first
//! default problem (4096 rows of 32768 f32, k 64, the inputs `cargo run -p day22` makes),
//! timed on the GPU with CUDA events, throughput in bytes (input read once, values and indices
//! written once). Skips with one line without a GPU.

use anyhow::Result;
use common::bench_support::{BenchCase, Work, default_seed};
use common::{Element, Gpu, measure::inputs};
use cudarc::driver::CudaSlice;
use day22::{Shape, TopK, VERSIONS};

type T = f32;
/// The first of `run::DEFAULT_PROBLEMS`: rows, width, k.
const PROBLEM: (usize, usize, usize) = (4096, 32768, 64);

struct Problem {
    day: TopK,
    shape: Shape,
    x: CudaSlice<T>,
}

fn setup(gpu: &Gpu) -> Result<Problem> {
    let (rows, width, k) = PROBLEM;
    let shape = Shape::new(rows, width, k)?;
    Ok(Problem {
        day: TopK::load(gpu)?,
        shape,
        x: gpu.upload(&inputs::logits::<T>(shape.elements(), default_seed()?))?,
    })
}

fn cases<'a>(gpu: &'a Gpu, p: &'a Problem) -> Result<Vec<BenchCase<'a>>> {
    let work = Work::Bytes(p.shape.bytes_per_run(T::DTYPE.size()));
    VERSIONS
        .iter()
        .map(|&name| {
            let mut plan = p.day.plan::<T>(gpu, name, p.shape)?;
            let mut values = gpu.alloc_poisoned::<T>(p.shape.outputs())?;
            let mut indices = gpu.alloc_poisoned::<u32>(p.shape.outputs())?;
            Ok(BenchCase::new(name, work, move || {
                (plan.launch)(&p.x, &mut values, &mut indices)
            }))
        })
        .collect()
}

common::gpu_criterion_bench!("day22_topk", setup, cases);
