//! `cargo bench -p day17`: criterion statistics of the baseline and the fastest transpose on
//! the day's default 16384 x 16384 f32 matrix (the input `cargo run -p day17` makes), timed on
//! the GPU with CUDA events, throughput in bytes (read once, written once). Skips with one line
//! without a GPU.

use anyhow::{Context, Result};
use common::Gpu;
use common::bench_support::{BenchCase, Work, uniform_input};
use cudarc::driver::CudaSlice;
use day17::{Day17, Transpose};

/// main.rs's default `--rows` and `--cols`.
const ROWS: usize = day17::DEFAULT_ROWS as usize;
const COLS: usize = day17::DEFAULT_COLS as usize;

/// The baseline (the first version) and the fastest in the README's table.
const VERSIONS: &[&str] = &["naive", "vec4_swizzled"];

struct Problem {
    day: Day17,
    x: CudaSlice<f32>,
}

fn setup(gpu: &Gpu) -> Result<Problem> {
    Ok(Problem {
        day: Day17::load(gpu)?,
        x: uniform_input(gpu, ROWS * COLS, (-1.0, 1.0), 0)?,
    })
}

fn cases<'a>(gpu: &'a Gpu, p: &'a Problem) -> Result<Vec<BenchCase<'a>>> {
    VERSIONS
        .iter()
        .map(|&name| {
            let version = Transpose::ALL
                .into_iter()
                .find(|v| v.name() == name)
                .context("a transpose version")?;
            // Planned once; a shape this version refuses fails here, not in the middle of
            // criterion's run.
            let plan = p.day.plan_transpose(version, ROWS, COLS)?;
            let mut y = gpu.alloc_poisoned::<f32>(ROWS * COLS)?;
            Ok(BenchCase::new(
                name,
                Work::Bytes(8 * (ROWS * COLS) as u64),
                move || plan.launch(gpu, &p.x, &mut y),
            ))
        })
        .collect()
}

common::gpu_criterion_bench!("day17_transpose", setup, cases);
