//! `cargo bench -p day23`: criterion statistics of cuBLASLt's INT8 GEMM (the ceiling) and
//! the tensor-core versions on the day's first default problem (4096^3 int8 -> int32, no zero
//! points: what `torch._int_mm` computes), with the inputs `cargo run -p day23` makes, timed on
//! the GPU with CUDA events. Throughput is 2 m n k operations per run, which criterion shows
//! as elements/s: read them as OP/s. Skips with one line without a GPU; the wgmma versions,
//! on a GPU other than Hopper, with one line each.

use anyhow::{Context, Result};
use common::bench_support::{BenchCase, Work, default_seed};
use common::session::Refused;
use common::{Gpu, measure::inputs, testing};
use day23::cublaslt::CublasLtInt8;
use day23::problem::{DeviceOperands, Quant, Shape};
use day23::{Int8Gemm, Out, Version};

/// main.rs's first default problem.
const SHAPE: Shape = Shape::square(4096);

/// The ceiling first, then the baseline and the wgmma versions.
const VERSIONS: &[&str] = &["mma_sync", "wgmma", "wgmma_tma_store"];

struct Problem {
    day: Int8Gemm,
    cublaslt: CublasLtInt8,
    a: Vec<i8>,
    b: Vec<i8>,
}

fn setup(gpu: &Gpu) -> Result<Problem> {
    let seed = default_seed()?;
    let Shape { m, n, k } = SHAPE;
    Ok(Problem {
        day: Int8Gemm::load(gpu)?,
        cublaslt: CublasLtInt8::open(gpu)?,
        a: inputs::uniform(m * k, -128.0, 127.0, seed.wrapping_add(10)),
        b: inputs::uniform(n * k, -128.0, 127.0, seed.wrapping_add(11)),
    })
}

fn cases<'a>(gpu: &'a Gpu, p: &'a Problem) -> Result<Vec<BenchCase<'a>>> {
    let Shape { m, n, k } = SHAPE;
    let work = Work::Flops(SHAPE.ops());
    let operands = || DeviceOperands::upload(gpu, SHAPE, &p.a, &p.b, &Quant::none());
    let lt_ops = operands()?;
    let plan = p.cublaslt.plan(m, n, k)?;
    let mut c_lt = gpu.alloc_poisoned::<i32>(m * n)?;
    let mut cases = vec![BenchCase::new("cublaslt", work, move || {
        p.cublaslt
            .run_int8(gpu, &plan, &lt_ops.a, &lt_ops.b, &mut c_lt)
    })];
    for &name in VERSIONS {
        let version = Version::from_name(name).context("a day23 version")?;
        match p.day.plan(version, Out::S32, &SHAPE) {
            Ok(_) => {}
            Err(e) if e.is::<Refused>() => {
                testing::note_skip(&format!("day23 criterion bench {name}"), &e.to_string());
                continue;
            }
            Err(e) => return Err(e),
        }
        let mut ops = operands()?;
        let mut c = gpu.alloc_poisoned::<i32>(m * n)?;
        cases.push(BenchCase::new(name, work, move || {
            p.day.run(gpu, version, &mut ops, &mut c)
        }));
    }
    Ok(cases)
}

common::gpu_criterion_bench!("day23_int8_tensor_cores", setup, cases);
