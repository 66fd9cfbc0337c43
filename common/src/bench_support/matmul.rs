//! The matmul days' bench cases: cuBLAS and the chosen versions on the day's first default
//! problem.

use std::rc::Rc;

use anyhow::Result;

use super::{BenchCase, Work, uniform_input};
use crate::family::matmul::{CEILING, MatmulDay, Shape};
use crate::gpu::Gpu;
use crate::gpu::cublas::Cublas;

/// cuBLAS SGEMM (the table's ceiling row, in the same process) and `versions` of `D` on `D`'s
/// first default problem, on the A and B its `main` makes from the default seed. Throughput in
/// FLOPs (2 m n k), which criterion shows as elements/s: read them as FLOP/s.
pub fn matmul_cases<'a, D: MatmulDay>(
    gpu: &'a Gpu,
    day: &'a D,
    versions: &[&str],
) -> Result<Vec<BenchCase<'a>>> {
    let shape = D::DEFAULT_PROBLEMS[0];
    let Shape { m, n, k } = shape;
    let a = Rc::new(uniform_input::<f32>(gpu, m * k, (-1.0, 1.0), 0)?);
    let b = Rc::new(uniform_input::<f32>(gpu, k * n, (-1.0, 1.0), 1)?);
    let work = Work::Flops(shape.flops());
    let mut cases = Vec::with_capacity(versions.len() + 1);
    let cublas = Cublas::open(gpu)?;
    let (a_ceiling, b_ceiling) = (Rc::clone(&a), Rc::clone(&b));
    let mut c_ceiling = gpu.alloc_poisoned::<f32>(m * n)?;
    cases.push(BenchCase::new(CEILING, work, move || {
        cublas.sgemm(m, n, k, &a_ceiling, &b_ceiling, &mut c_ceiling)
    }));
    for &name in versions {
        let mut plan = day.plan(gpu, name, shape)?;
        let mut c = gpu.alloc_poisoned::<f32>(m * n)?;
        let (a, b) = (Rc::clone(&a), Rc::clone(&b));
        cases.push(BenchCase::new(name, work, move || {
            (plan.launch)(&a, &b, &mut c)
        }));
    }
    Ok(cases)
}
