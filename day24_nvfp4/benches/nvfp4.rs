//! `cargo bench -p day24`: criterion statistics of the bf16 GEMV baseline and the NVFP4
//! GEMVs on the day's first default GEMV problem (W 8192 x 8192, the inputs `cargo run -p
//! day24` makes), timed on the GPU with CUDA events, throughput in the bytes each version
//! must read. Skips with one line without a GPU.

use anyhow::Result;
use common::bench_support::{BenchCase, Work, default_seed};
use common::{Gpu, measure::inputs};
use cudarc::driver::CudaSlice;
use day24::gemv::{self, Gemv, Weights};
use day24::reference as fmt;
use day24::{Nvfp4Dev, nvfp4_bytes};
use half::bf16;

const N: usize = day24::DEFAULT_GEMV_SHAPES[0].0;
const K: usize = day24::DEFAULT_GEMV_SHAPES[0].1;

/// The baseline and every NVFP4 version.
const VERSIONS: [gemv::Version; 4] = gemv::Version::ALL;

struct Problem {
    day: Gemv,
    w_bf16: CudaSlice<bf16>,
    w: Nvfp4Dev,
    x: CudaSlice<bf16>,
}

fn setup(gpu: &Gpu) -> Result<Problem> {
    let seed = default_seed()?;
    // As the run (`problem.rs`): W uniform in [-1, 1) (seed + 20), quantized on the CPU; x
    // (seed + 21).
    let w_bf16: Vec<bf16> = inputs::uniform(N * K, -1.0, 1.0, seed.wrapping_add(20));
    let x: Vec<bf16> = inputs::uniform(K, -1.0, 1.0, seed.wrapping_add(21));
    let w = fmt::quantize(&w_bf16, N, K);
    Ok(Problem {
        day: Gemv::load(gpu)?,
        w_bf16: gpu.upload(&w_bf16)?,
        w: Nvfp4Dev::upload(gpu, &w)?,
        x: gpu.upload(&x)?,
    })
}

fn cases<'a>(gpu: &'a Gpu, p: &'a Problem) -> Result<Vec<BenchCase<'a>>> {
    let x_bytes = 2 * K as u64 + 4 * N as u64;
    VERSIONS
        .into_iter()
        .map(|version| {
            let mut y = gpu.alloc_poisoned::<f32>(N)?;
            let plan = p.day.plan(version, N, K)?;
            let (weights, bytes) = if version == gemv::Version::Bf16Warp {
                (Weights::Bf16(&p.w_bf16), 2 * (N * K) as u64 + x_bytes)
            } else {
                (Weights::Nvfp4(&p.w), nvfp4_bytes(N, K) + x_bytes)
            };
            Ok(BenchCase::new(
                version.name(),
                Work::Bytes(bytes),
                move || plan.launch(gpu, weights, &p.x, &mut y),
            ))
        })
        .collect()
}

common::gpu_criterion_bench!("day24_nvfp4", setup, cases);
