//! day17 on the GPU: every version bit for bit against the CPU over shapes that are not
//! multiples of the tile (32 or 64), of the float4, or of the block: vectors, primes, odd
//! sizes. Each version is planned once and its plan launched twice, as a timed run does;
//! `Day17`'s one-shot calls (plan and launch) are checked too.

use common::session::{Refused, launch_and_read};
use common::{Gpu, Tolerance, measure::check, measure::inputs, testing};
use cudarc::driver::CudaSlice;
use day17::{Day17, Reverse, Transpose, reference};

const SHAPES: &[(usize, usize)] = &[
    (1, 1),
    (1, 1000),
    (1000, 1),
    (3, 5),
    (33, 65),
    (64, 64),
    (64, 68),
    (65, 64),
    (128, 256),
    (127, 131),
    (1000, 1001),
    (1024, 4),
    (4, 1024),
    (2003, 1999),
    (4096, 4100),
];

/// Launches into the poisoned `out` and asserts that what it wrote is `want` bit for bit
/// (`dims` its shape, `what` the case).
fn assert_exact(
    gpu: &Gpu,
    out: &mut CudaSlice<f32>,
    launch: &mut impl FnMut(&mut CudaSlice<f32>) -> anyhow::Result<()>,
    want: &[f64],
    dims: &[usize],
    what: &str,
) {
    let got = launch_and_read(gpu, out, launch).unwrap_or_else(|e| panic!("{what}: {e:#}"));
    let report = check::compare(&got, want, dims, Tolerance::EXACT);
    assert!(report.passed(), "{what}: {report}");
}

#[test]
fn copy_and_every_transpose_are_bit_exact_on_odd_shapes() {
    let Some((gpu, day)) = testing::day_or_skip("day17 transpose correctness", Day17::load) else {
        return;
    };
    for (i, &(rows, cols)) in SHAPES.iter().enumerate() {
        let n = rows * cols;
        let x: Vec<f32> = inputs::uniform(n, -1.0, 1.0, i as u64);
        let x_dev = gpu.upload(&x).unwrap();
        let mut out = gpu.alloc_poisoned::<f32>(n).unwrap();

        let same: Vec<f64> = x.iter().map(|&v| f64::from(v)).collect();
        let plan = day.plan_copy(n).unwrap();
        let what = format!("copy {rows}x{cols}");
        let dims = [rows, cols];
        for pass in 0..2 {
            let mut launch = |out: &mut _| plan.launch(&gpu, &x_dev, out);
            let what = format!("{what} launch {pass}");
            assert_exact(&gpu, &mut out, &mut launch, &same, &dims, &what);
        }
        let mut launch = |out: &mut _| day.copy(&gpu, &x_dev, out);
        assert_exact(&gpu, &mut out, &mut launch, &same, &dims, &what);

        let want: Vec<f64> = reference::transpose(&x, rows, cols)
            .into_iter()
            .map(f64::from)
            .collect();
        for version in Transpose::ALL {
            let plan = day.plan_transpose(version, rows, cols).unwrap();
            let what = format!("{} {rows}x{cols}", version.name());
            let dims = [cols, rows];
            for pass in 0..2 {
                let mut launch = |out: &mut _| plan.launch(&gpu, &x_dev, out);
                let what = format!("{what} launch {pass}");
                assert_exact(&gpu, &mut out, &mut launch, &want, &dims, &what);
            }
            let mut launch = |out: &mut _| day.transpose(&gpu, version, &x_dev, out, rows, cols);
            assert_exact(&gpu, &mut out, &mut launch, &want, &dims, &what);
        }
    }
}

#[test]
fn every_reversal_is_bit_exact_on_odd_lengths() {
    let Some((gpu, day)) = testing::day_or_skip("day17 reverse correctness", Day17::load) else {
        return;
    };
    // Odd and even counts of float4 (the in-place middle pack), and every n % 4.
    for (i, &n) in [
        1usize, 2, 3, 4, 5, 7, 8, 12, 13, 255, 256, 257, 1000, 1003, 65_536, 1_000_001,
    ]
    .iter()
    .enumerate()
    {
        let x: Vec<f32> = inputs::uniform(n, -1.0, 1.0, 50 + i as u64);
        let want: Vec<f64> = reference::reverse(&x).into_iter().map(f64::from).collect();
        let x_dev = gpu.upload(&x).unwrap();
        let mut out = gpu.alloc_poisoned::<f32>(n).unwrap();
        for version in Reverse::ALL {
            let plan = day.plan_reverse(version, n).unwrap();
            let what = format!("reverse {} n={n}", version.name());
            for pass in 0..2 {
                let mut launch = |out: &mut CudaSlice<f32>| {
                    if version == Reverse::InplaceVec4 {
                        gpu.stream.memcpy_dtod(&x_dev, out)?;
                        plan.launch_inplace(&gpu, out)
                    } else {
                        plan.launch(&gpu, &x_dev, out)
                    }
                };
                let what = format!("{what} launch {pass}");
                assert_exact(&gpu, &mut out, &mut launch, &want, &[n], &what);
            }
            let mut launch = |out: &mut CudaSlice<f32>| {
                if version == Reverse::InplaceVec4 {
                    gpu.stream.memcpy_dtod(&x_dev, out)?;
                    day.reverse_inplace(&gpu, out)
                } else {
                    day.reverse(&gpu, version, &x_dev, out)
                }
            };
            assert_exact(&gpu, &mut out, &mut launch, &want, &[n], &what);
        }
        // In place twice is the identity.
        let mut buf = gpu.upload(&x).unwrap();
        day.reverse_inplace(&gpu, &mut buf).unwrap();
        day.reverse_inplace(&gpu, &mut buf).unwrap();
        assert_eq!(gpu.download(&buf).unwrap(), x, "reverse twice n={n}");
    }
}

#[test]
fn mismatched_sizes_are_refused() {
    let Some((gpu, day)) = testing::day_or_skip("day17 refusals", Day17::load) else {
        return;
    };
    let x = gpu.upload(&[1.0f32; 12]).unwrap();
    let mut y = gpu.alloc_poisoned::<f32>(12).unwrap();
    let err = day
        .transpose(&gpu, Transpose::Padded, &x, &mut y, 5, 3)
        .unwrap_err();
    assert!(err.to_string().contains("elements"), "{err}");
    let mut short = gpu.alloc_poisoned::<f32>(11).unwrap();
    assert!(day.copy(&gpu, &x, &mut short).is_err());
    assert!(day.reverse(&gpu, Reverse::Vec4, &x, &mut short).is_err());
    assert!(day.reverse(&gpu, Reverse::InplaceVec4, &x, &mut y).is_err());
    // A plan launched on other sizes than it was made for, or the wrong way round.
    let mut x_short = gpu.alloc_poisoned::<f32>(11).unwrap();
    assert!(day.plan_copy(11).unwrap().launch(&gpu, &x, &mut y).is_err());
    let transpose = day.plan_transpose(Transpose::Tiled, 3, 4).unwrap();
    assert!(transpose.launch(&gpu, &x, &mut short).is_err());
    let reverse = day.plan_reverse(Reverse::Naive, 12).unwrap();
    assert!(reverse.launch(&gpu, &x, &mut short).is_err());
    assert!(reverse.launch_inplace(&gpu, &mut y).is_err());
    let inplace = day.plan_reverse(Reverse::InplaceVec4, 12).unwrap();
    assert!(inplace.launch(&gpu, &x, &mut y).is_err());
    assert!(inplace.launch_inplace(&gpu, &mut x_short).is_err());
    // Too many rows for the grid: refused when planned, never launched.
    let err = day
        .plan_transpose(Transpose::Naive, 65535 * 8 + 1, 1)
        .err()
        .expect("refused");
    assert!(err.is::<Refused>(), "{err:#}");
}
