//! The softmax days' bench cases: the chosen versions on the day's first default problem.

use std::rc::Rc;

use anyhow::{Result, bail};
use half::{bf16, f16};

use super::{BenchCase, Work, default_seed};
use crate::dtype::Dtype;
use crate::element::Element;
use crate::family::softmax::{Rows, Shape, SoftmaxDay};
use crate::gpu::Gpu;
use crate::measure::inputs;

/// `versions` of `D` (by `--kernel` name; a baseline and the fastest) on `D`'s first default
/// problem, on the logits its `main` makes from the default seed. Throughput in bytes: the
/// input read once and the output written once, as the table counts. A version that refuses
/// the problem is an error, not a silently shorter bench.
pub fn softmax_cases<'a, D: SoftmaxDay>(
    gpu: &'a Gpu,
    day: &'a D,
    versions: &[&str],
) -> Result<Vec<BenchCase<'a>>> {
    let shape = D::DEFAULT_PROBLEMS[0];
    match shape.dtype {
        Dtype::F32 => typed::<f32, D>(gpu, day, shape, versions),
        Dtype::F16 => typed::<f16, D>(gpu, day, shape, versions),
        Dtype::Bf16 => typed::<bf16, D>(gpu, day, shape, versions),
        integer => bail!("softmax takes float dtypes only, not {integer}"),
    }
}

fn typed<'a, T: Element, D: SoftmaxDay>(
    gpu: &'a Gpu,
    day: &'a D,
    shape: Shape,
    versions: &[&str],
) -> Result<Vec<BenchCase<'a>>> {
    let (rows, cols) = (shape.rows, shape.cols);
    // Shared by every case; each has its own output.
    let x = Rc::new(gpu.upload(&inputs::logits::<T>(rows * cols, default_seed()?))?);
    let work = Work::Bytes((rows * cols * shape.dtype.size() * 2) as u64);
    versions
        .iter()
        .map(|&name| {
            let mut plan = day.plan::<T>(name, Rows { gpu, rows, cols })?;
            let mut out = gpu.alloc_poisoned::<T>(rows * cols)?;
            let x = Rc::clone(&x);
            Ok(BenchCase::new(name, work, move || {
                (plan.launch)(&x, &mut out)
            }))
        })
        .collect()
}
