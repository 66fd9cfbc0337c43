//! `cargo bench -p day18`: criterion statistics of cuBLAS, the baseline and the fastest
//! tensor-core GEMM on the day's first default problem (4096^3 bf16, C = A B^T, the inputs
//! `cargo run -p day18` makes), timed on the GPU with CUDA events. Throughput is 2 m n k FLOPs
//! per run, which criterion shows as elements/s: read them as FLOP/s. Skips with one line
//! without a GPU; the wgmma version, on a GPU other than Hopper, with one line of its own.

use anyhow::{Context, Result};
use common::bench_support::{BenchCase, Work, uniform_input};
use common::gpu::cublas::Cublas;
use common::session::Refused;
use common::{Gpu, testing};
use cudarc::driver::CudaSlice;
use day18::{GemmShape, TensorCoreGemm, Version};
use half::bf16;

/// main.rs's first default problem (its default layout and batch: B stored [n, k], one
/// product), in its default dtype.
const SHAPE: GemmShape = GemmShape::square(4096);
type T = bf16;

/// The baseline (the first version) and the fastest in the README's table.
const VERSIONS: &[&str] = &["mma_ldmatrix", "wgmma_tma"];

struct Problem {
    day: TensorCoreGemm,
    cublas: Cublas,
    a: CudaSlice<T>,
    b: CudaSlice<T>,
}

fn setup(gpu: &Gpu) -> Result<Problem> {
    Ok(Problem {
        day: TensorCoreGemm::load(gpu)?,
        cublas: Cublas::open(gpu)?,
        a: uniform_input(gpu, SHAPE.a_len(), (-1.0, 1.0), 0)?,
        b: uniform_input(gpu, SHAPE.b_len(), (-1.0, 1.0), 1)?,
    })
}

fn cases<'a>(gpu: &'a Gpu, p: &'a Problem) -> Result<Vec<BenchCase<'a>>> {
    let g = SHAPE.gemm_ex();
    let work = Work::Flops(SHAPE.flops());
    let mut c_cublas = gpu.alloc_poisoned::<T>(SHAPE.c_len())?;
    let mut cases = vec![BenchCase::new("cublas", work, move || {
        p.cublas.gemm_ex::<T, T>(&g, &p.a, &p.b, &mut c_cublas)
    })];
    for &name in VERSIONS {
        let version = Version::from_name(name).context("a day18 version")?;
        match p.day.plan::<T>(version, &g) {
            Ok(_) => {}
            Err(e) if e.is::<Refused>() => {
                testing::note_skip(&format!("day18 criterion bench {name}"), &e.to_string());
                continue;
            }
            Err(e) => return Err(e),
        }
        let mut c = gpu.alloc_poisoned::<T>(SHAPE.c_len())?;
        cases.push(BenchCase::new(name, work, move || {
            p.day.gemm(gpu, version, &g, &p.a, &p.b, &mut c)
        }));
    }
    Ok(cases)
}

common::gpu_criterion_bench!("day18_tensor_core_gemm", setup, cases);
