//! `cargo bench -p day14`: criterion statistics of the baseline and the fastest GEMV on the
//! day's first default shape (8192 x 8192, the inputs `cargo run -p day14` makes), timed on the
//! GPU with CUDA events, throughput in bytes (A, x read once, y written once). Skips with one
//! line without a GPU.

use anyhow::Result;
use common::Gpu;
use common::bench_support::{BenchCase, Work, uniform_input};
use cudarc::driver::CudaSlice;
use day14::Gemv;

/// The first of main.rs's default shapes: the square problem, the one the day's goal is set on.
const M: usize = day14::DEFAULT_SHAPES[0].0;
const N: usize = day14::DEFAULT_SHAPES[0].1;

/// The baseline (the day's first version) and the fastest on this shape in the README's table.
const VERSIONS: &[&str] = &["warp_scalar", "rows_vec4"];

struct Problem {
    day: Gemv,
    a: CudaSlice<f32>,
    x: CudaSlice<f32>,
}

fn setup(gpu: &Gpu) -> Result<Problem> {
    Ok(Problem {
        day: Gemv::load(gpu)?,
        a: uniform_input(gpu, M * N, (-1.0, 1.0), 0)?,
        x: uniform_input(gpu, N, (-1.0, 1.0), 1)?,
    })
}

fn cases<'a>(gpu: &'a Gpu, p: &'a Problem) -> Result<Vec<BenchCase<'a>>> {
    // As the table: A and x read once, y written once.
    let work = Work::Bytes(4 * (M * N + N + M) as u64);
    VERSIONS
        .iter()
        .map(|&name| {
            let mut plan = p.day.plan(gpu, name, M, N)?;
            let mut y = gpu.alloc_poisoned::<f32>(M)?;
            Ok(BenchCase::new(name, work, move || {
                (plan.launch)(&p.a, &p.x, &mut y)
            }))
        })
        .collect()
}

common::gpu_criterion_bench!("day14_gemv", setup, cases);
