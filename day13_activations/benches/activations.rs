//! `cargo bench -p day13`: criterion statistics of the baseline and the fastest GELU (tanh) on
//! the day's first default problem (16384 x 4096 bf16, the input `cargo run -p day13` makes),
//! timed on the GPU with CUDA events, throughput in bytes (x read once, y written once). Skips
//! with one line without a GPU.

use anyhow::{Context, Result};
use common::bench_support::{BenchCase, Work, default_seed};
use common::{Element, Gpu};
use day13::problem::{DeviceInputs, HostInputs, bytes_per_run};
use day13::{Activations, Op};
use half::bf16;

/// main.rs's first default op, its default `--rows` and `--cols`, in the op's default dtype.
const OP: Op = Op::GeluTanh;
const ROWS: usize = day13::DEFAULT_ROWS as usize;
const COLS: usize = day13::DEFAULT_COLS as usize;
type T = bf16;

/// The fastest on this problem in the README's table; the baseline is the op's first version.
const FASTEST: &str = "vec_fast";

struct Problem {
    day: Activations,
    inputs: DeviceInputs<T>,
}

fn setup(gpu: &Gpu) -> Result<Problem> {
    anyhow::ensure!(
        OP.default_dtype() == T::DTYPE,
        "{} runs in {}",
        OP.name(),
        T::NAME
    );
    Ok(Problem {
        day: Activations::load(gpu)?,
        inputs: HostInputs::<T>::random(OP, ROWS, COLS, default_seed()?).upload(gpu)?,
    })
}

fn cases<'a>(gpu: &'a Gpu, p: &'a Problem) -> Result<Vec<BenchCase<'a>>> {
    let baseline = *OP.versions().first().context("the op has versions")?;
    let work = Work::Bytes(bytes_per_run(OP, T::DTYPE.size(), ROWS, COLS));
    [baseline, FASTEST]
        .into_iter()
        .map(|name| {
            let mut plan = p.day.plan::<T>(gpu, name, &p.inputs)?;
            let mut out = gpu.alloc_poisoned::<T>(OP.outputs() * ROWS * COLS)?;
            Ok(BenchCase::new(name, work, move || (plan.launch)(&mut out)))
        })
        .collect()
}

common::gpu_criterion_bench!("day13_activations", setup, cases);
