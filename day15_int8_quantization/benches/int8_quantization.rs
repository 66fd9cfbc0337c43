//! `cargo bench -p day15`: criterion statistics of the baseline and the fastest symmetric int8
//! quantization on the day's first default problem (16384 x 4096 f32, the input `cargo run -p
//! day15` makes), timed on the GPU with CUDA events, throughput in bytes (4 read + 1 written
//! per element). Skips with one line without a GPU.

use anyhow::{Context, Result};
use common::Gpu;
use common::bench_support::{BenchCase, Work, uniform_input};
use cudarc::driver::CudaSlice;
use day15::quantize::{Quantize, Scheme, Version};

/// The default `--rows` and `--cols`.
const ROWS: usize = day15::DEFAULT_ROWS as usize;
const COLS: usize = day15::DEFAULT_COLS as usize;
const N: usize = ROWS * COLS;

/// The baseline (the first version) and the fastest in the README's table.
const VERSIONS: &[&str] = &["two_pass", "two_pass_reverse"];

struct Problem {
    day: Quantize,
    x: CudaSlice<f32>,
}

fn setup(gpu: &Gpu) -> Result<Problem> {
    Ok(Problem {
        day: Quantize::load(gpu)?,
        // As the run (`problem.rs`): uniform in [-3, 5), so the range is not symmetric about 0.
        x: uniform_input(gpu, N, (-3.0, 5.0), 0)?,
    })
}

fn cases<'a>(gpu: &'a Gpu, p: &'a Problem) -> Result<Vec<BenchCase<'a>>> {
    VERSIONS
        .iter()
        .map(|&name| {
            let version = Version::from_name(name).context("a quantize version")?;
            let mut plan = p.day.plan(gpu, Scheme::Sym, version, N)?;
            let mut q = gpu.alloc_poisoned::<i8>(N)?;
            let mut params = gpu.alloc_poisoned::<f32>(2)?;
            Ok(BenchCase::new(name, Work::Bytes(5 * N as u64), move || {
                plan.launch(gpu, &p.x, &mut q, &mut params)
            }))
        })
        .collect()
}

common::gpu_criterion_bench!("day15_int8_quantization", setup, cases);
