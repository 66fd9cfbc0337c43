//! `cargo bench -p day21`: criterion statistics of the baseline and the fastest 1D convolution
//! on the day's first default problem (2^26 f32, 7 taps, the inputs `cargo run -p day21`
//! makes), timed on the GPU with CUDA events, throughput in bytes (input read once, output
//! written once). Skips with one line without a GPU.

use anyhow::Result;
use common::bench_support::{BenchCase, Work, default_seed};
use common::{Element, Gpu};
use cudarc::driver::CudaSlice;
use day21::{Conv, HostInputs, Op, Shape};

type T = f32;
const OP: Op = Op::Conv1d;

/// The baseline (the day's first version) and the versions after it.
const VERSIONS: &[&str] = &["naive", "const_filter", "vec_regs"];

struct Problem {
    day: Conv,
    shape: Shape,
    x: CudaSlice<T>,
    w: CudaSlice<T>,
}

fn setup(gpu: &Gpu) -> Result<Problem> {
    let shape = OP.default_shape();
    if OP.default_dtype() != T::DTYPE {
        anyhow::bail!("the default {} problem is not in {}", OP.name(), T::NAME);
    }
    let (x, w) = HostInputs::<T>::random(shape, default_seed()?).upload(gpu)?;
    Ok(Problem {
        day: Conv::load(gpu)?,
        shape,
        x,
        w,
    })
}

fn cases<'a>(gpu: &'a Gpu, p: &'a Problem) -> Result<Vec<BenchCase<'a>>> {
    let work = Work::Bytes(p.shape.elements_moved() * T::DTYPE.size() as u64);
    VERSIONS
        .iter()
        .map(|&name| {
            let mut plan = p.day.plan::<T>(gpu, name, &p.shape)?;
            let mut y = gpu.alloc_poisoned::<T>(p.shape.output_len())?;
            Ok(BenchCase::new(name, work, move || {
                (plan.launch)(&p.x, &p.w, &mut y)
            }))
        })
        .collect()
}

common::gpu_criterion_bench!("day21_convolution", setup, cases);
