//! The normalization days' bench cases: the chosen versions of each pass on the day's default
//! problems (one forward, one backward).

use std::rc::Rc;

use anyhow::{Result, bail};
use half::{bf16, f16};

use super::{BenchCase, Work, default_seed};
use crate::dtype::Dtype;
use crate::element::Element;
use crate::family::norm::{
    HostInputs, NormDay, NormKernels, Pass, Shape, backward_len, bytes_per_run,
};
use crate::gpu::Gpu;

/// `versions` of `D` (forward and backward names together), each on the default problem of
/// its pass, on the inputs its `main` makes from the default seed, with the day's default
/// eps. Throughput in bytes, as the table counts them. A name that is no version of either
/// pass is an error, so a typo cannot shorten the bench in silence.
pub fn norm_cases<'a, D: NormDay>(
    gpu: &'a Gpu,
    day: &'a NormKernels<D>,
    versions: &[&str],
) -> Result<Vec<BenchCase<'a>>> {
    if let Some(unknown) = versions
        .iter()
        .find(|v| !D::FORWARD_VERSIONS.contains(v) && !D::BACKWARD_VERSIONS.contains(v))
    {
        bail!("{} has no version `{unknown}`", D::DAY);
    }
    let mut cases = Vec::new();
    for shape in D::DEFAULT_PROBLEMS {
        let of_pass = match shape.pass {
            Pass::Forward => D::FORWARD_VERSIONS,
            Pass::Backward => D::BACKWARD_VERSIONS,
        };
        let chosen: Vec<&str> = versions
            .iter()
            .copied()
            .filter(|v| of_pass.contains(v))
            .collect();
        if chosen.is_empty() {
            continue;
        }
        cases.extend(match shape.dtype {
            Dtype::F32 => typed::<f32, D>(gpu, day, shape, &chosen)?,
            Dtype::F16 => typed::<f16, D>(gpu, day, shape, &chosen)?,
            Dtype::Bf16 => typed::<bf16, D>(gpu, day, shape, &chosen)?,
            integer => bail!("normalizations take float dtypes only, not {integer}"),
        });
    }
    Ok(cases)
}

fn typed<'a, T: Element, D: NormDay>(
    gpu: &'a Gpu,
    day: &'a NormKernels<D>,
    shape: &Shape,
    versions: &[&str],
) -> Result<Vec<BenchCase<'a>>> {
    let (rows, cols) = (shape.rows, shape.cols);
    let host = HostInputs::<T>::new(rows, cols, default_seed()?);
    // Shared by every case of the pass; each has its own output.
    let inputs = Rc::new(host.upload(gpu, D::KIND, shape.pass, D::DEFAULT_EPS as f32)?);
    drop(host);
    let out_len = match shape.pass {
        Pass::Forward => rows * cols,
        Pass::Backward => backward_len(D::KIND, rows, cols),
    };
    let work = Work::Bytes(bytes_per_run(D::KIND, shape));
    versions
        .iter()
        .map(|&name| {
            let mut plan = day.plan::<T>(gpu, name, rows, cols, D::DEFAULT_EPS as f32)?;
            let mut out = gpu.alloc_poisoned::<T>(out_len)?;
            let inputs = Rc::clone(&inputs);
            Ok(BenchCase::new(name, work, move || {
                (plan.launch)(&inputs, &mut out, None)
            }))
        })
        .collect()
}
