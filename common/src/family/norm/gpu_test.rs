//! The GPU test every normalization day runs.

use super::*;

/// Rows of the GPU tests: one, a few (not a multiple of the rows per block), many.
pub const TEST_ROWS: &[usize] = &[1, 3, 17, 1000];
/// Widths of the GPU tests: 1, primes and widths no pack divides, exactly one warp's pack,
/// the 64-thread backward tier full (512) and one pack short of full (504), the 128-thread
/// tier's (1000), the default 4096 and one past it, the backward's register limit (8192) and
/// one past it.
pub const TEST_COLS: &[usize] = &[1, 7, 127, 128, 504, 512, 1000, 4096, 4097, 8192, 8193];
/// Widths at the forward's register limit and one past it, with fewer rows (the f64
/// reference of 1000 x 32769 would dominate the test's time).
pub const TEST_WIDE: &[(usize, usize)] = &[(1, 32768), (3, 32769), (17, 32768), (17, 32769)];
/// Many rows, so that the kernels whose row groups loop over rows go round many times: at
/// 1000 rows `bwd_saved`'s warp-per-row tiers (8 rows a block, a block per 8 rows) give each
/// row group a single row, and its staged rows (day 12: 3 per group) never wrap. 30000 x 128
/// puts ~14 rows on each warp of the warp tiers on an H100, 4000 x 4096 ~10 on each block of
/// 128 threads. 20000 x 512 and 8000 x 1000 do the same for the backward's 64- and 128-thread
/// tiers (~9 and ~8 rows on each of their resident blocks on an H100).
pub const TEST_TALL: &[(usize, usize)] = &[(30000, 128), (20000, 512), (8000, 1000), (4000, 4096)];

fn test_shapes() -> Vec<(usize, usize)> {
    let mut shapes: Vec<(usize, usize)> = TEST_ROWS
        .iter()
        .flat_map(|&r| TEST_COLS.iter().map(move |&c| (r, c)))
        .collect();
    shapes.extend_from_slice(TEST_WIDE);
    shapes.extend_from_slice(TEST_TALL);
    shapes
}

/// The GPU test of a normalization day: every version of both passes, every dtype, every
/// test shape it does not refuse, against the reference, each backward part (dx, dweight,
/// dbias) against its own tolerance; outputs poisoned before each launch.
pub fn test_every_version<D: NormDay>() {
    let Some(gpu) = testing::gpu_or_skip(&format!("{} GPU correctness", D::DAY)) else {
        return;
    };
    let day = D::load(&gpu).expect("kernels load");
    for dtype in [Dtype::F32, Dtype::F16, Dtype::Bf16] {
        match dtype {
            Dtype::F32 => test_dtype::<f32, D>(&gpu, &day),
            Dtype::F16 => test_dtype::<f16, D>(&gpu, &day),
            _ => test_dtype::<bf16, D>(&gpu, &day),
        }
    }
}

fn test_dtype<T: Element, D: NormDay>(gpu: &Gpu, day: &NormKernels<D>) {
    let eps = D::DEFAULT_EPS as f32;
    let mut ran: std::collections::BTreeMap<&str, usize> = Default::default();
    for (i, (rows, cols)) in test_shapes().into_iter().enumerate() {
        let host = HostInputs::<T>::new(rows, cols, 100 + i as u64);
        for pass in [Pass::Forward, Pass::Backward] {
            let inputs = host.upload(gpu, D::KIND, pass, eps).expect("upload");
            let (forward, grads) = match pass {
                Pass::Forward => (Some(host.forward(D::KIND, rows, cols, eps)), None),
                Pass::Backward => (None, Some(host.backward(D::KIND, rows, cols, eps))),
            };
            let len = match pass {
                Pass::Forward => rows * cols,
                Pass::Backward => backward_len(D::KIND, rows, cols),
            };
            let mut out = gpu.alloc_poisoned::<T>(len).expect("alloc");
            for &version in versions_of::<D>(pass) {
                let what = format!("{version} {} {rows} x {cols}", T::NAME);
                let mut plan = match day.plan::<T>(gpu, version, rows, cols, eps) {
                    Ok(plan) => plan,
                    Err(e) if e.is::<Refused>() => continue,
                    Err(e) => panic!("{what}: {e:#}"),
                };
                let got =
                    launch_and_read(gpu, &mut out, &mut |out| (plan.launch)(&inputs, out, None))
                        .unwrap_or_else(|e| panic!("{what}: {e:#}"));
                let report = match (&forward, &grads) {
                    (Some(f), _) => check::compare(
                        &got,
                        &f.y,
                        &[rows, cols],
                        reference::forward_tolerance::<T>(f, plan.row_terms),
                    ),
                    (_, Some(g)) => {
                        let tols =
                            reference::backward_tolerances::<T>(g, plan.row_terms, plan.col_terms);
                        check_backward(&got, g, cols, tols)
                    }
                    _ => unreachable!(),
                };
                assert!(report.passed(), "{what}: {report}");
                if pass == Pass::Backward {
                    // The same launch into dx and the parameters' gradients kept apart (the
                    // PyTorch layers' two tensors): the same values, nothing left unwritten.
                    let apart = backward_apart::<T, D>(gpu, rows, cols, &mut |dx, params| {
                        (plan.launch)(&inputs, dx, Some(params))
                    })
                    .unwrap_or_else(|e| panic!("{what}, outputs apart: {e:#}"));
                    let g = grads.as_ref().expect("a backward's reference");
                    let tols =
                        reference::backward_tolerances::<T>(g, plan.row_terms, plan.col_terms);
                    let report = check_backward(&apart, g, cols, tols);
                    assert!(report.passed(), "{what}, outputs apart: {report}");
                }
                *ran.entry(version).or_insert(0) += 1;
            }
        }
    }
    for &version in D::FORWARD_VERSIONS.iter().chain(D::BACKWARD_VERSIONS) {
        let n = ran.get(version).copied().unwrap_or(0);
        assert!(
            n >= 10,
            "{version} {}: ran on only {n} test shapes",
            T::NAME
        );
    }
}

/// A backward launched with dx and the parameters' gradients in buffers of their own, both
/// poisoned first; returns them back to back, as the one-buffer launch writes them.
fn backward_apart<T: Element, D: NormDay>(
    gpu: &Gpu,
    rows: usize,
    cols: usize,
    launch: &mut impl FnMut(&mut CudaSlice<T>, &mut CudaSlice<T>) -> Result<()>,
) -> Result<Vec<T>> {
    let mut dx = gpu.alloc_poisoned::<T>(rows * cols)?;
    let mut params = gpu.alloc_poisoned::<T>(backward_len(D::KIND, rows, cols) - rows * cols)?;
    launch(&mut dx, &mut params)?;
    gpu.synchronize()?;
    let mut both = gpu.download(&dx)?;
    both.extend(gpu.download(&params)?);
    Ok(both)
}

/// The register versions refuse rows one past their widest tier instead of writing garbage,
/// and `streaming` (a forward version that takes any width) and `bwd_split` take them.
pub fn test_register_refusals<D: NormDay>(streaming: &str) {
    let Some(gpu) = testing::gpu_or_skip(&format!("{} refusals", D::DAY)) else {
        return;
    };
    let day = D::load(&gpu).expect("kernels load");
    let eps = D::DEFAULT_EPS as f32;
    // Any error other than a refusal fails the test: "not refused" must mean "planned".
    let refused = |version: &str, cols: usize| match day.plan::<f32>(&gpu, version, 4, cols, eps) {
        Ok(_) => false,
        Err(e) if e.is::<Refused>() => true,
        Err(e) => panic!("{version} on 4 x {cols}: {e:#}"),
    };
    assert!(!refused("vec_regs", MAX_REGISTER_ROW));
    assert!(refused("vec_regs", MAX_REGISTER_ROW + 1));
    assert!(!refused("bwd_vec_regs", MAX_BACKWARD_REGISTER_ROW));
    assert!(refused("bwd_vec_regs", MAX_BACKWARD_REGISTER_ROW + 1));
    assert!(!refused(streaming, MAX_REGISTER_ROW + 1));
    assert!(!refused("bwd_split", MAX_BACKWARD_REGISTER_ROW + 1));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_shapes_reach_past_both_register_limits() {
        let shapes = test_shapes();
        assert!(shapes.contains(&(1000, 8193)) && shapes.contains(&(17, 32769)));
        assert!(shapes.contains(&(1, 1)));
        assert!(TEST_TALL.iter().all(|s| shapes.contains(s)));
    }
}
