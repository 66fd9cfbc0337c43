//! day14 on the GPU: every version against the f64 reference over m and n of 1, 3, 33, 1000
//! and 4097 (n not a multiple of 4: rows start off a 16-byte boundary and take the head and
//! tail paths), plus shapes where split_row has several column blocks and a last partial one.

use common::session::launch_and_read;
use common::{measure::check, measure::inputs, reference, testing};
use day14::{Gemv, VERSIONS};

const SIZES: &[usize] = &[1, 3, 33, 1000, 4097];

/// Beyond the grid: several 4096-column blocks with a ragged last one, 5 rows of 9 x 4096 + 5
/// columns; and 20 rows (more than one 16-row group) of 8195. Then the narrow rows of
/// `rows_vec4` (n = 4 to 128, whole float4s: gemv_narrow), with m that ends mid-warp and m of
/// more blocks than the GPU holds at once (300001 x 16: 1172 blocks of 256 rows, where 132 SMs
/// hold at most 8 blocks of 256 threads each, 1056).
const EXTRA: &[(usize, usize)] = &[
    (5, 9 * 4096 + 5),
    (20, 8195),
    (2, 1 << 16),
    (1, 4),
    (33, 8),
    (1000, 64),
    (4097, 64),
    (300001, 16),
    (3, 128),
    (5000, 32),
];

fn check_shape(gpu: &common::Gpu, day: &Gemv, m: usize, n: usize) {
    let seed = (m * 7919 + n) as u64;
    let a: Vec<f32> = inputs::uniform(m * n, -1.0, 1.0, seed);
    let x: Vec<f32> = inputs::uniform(n, -1.0, 1.0, seed + 1);
    let (expected, magnitudes) = reference::gemv::gemv(&a, &x, m, n);
    let max_magnitude = magnitudes.iter().copied().fold(0.0, f64::max);
    let (a_dev, x_dev) = (gpu.upload(&a).unwrap(), gpu.upload(&x).unwrap());
    for &version in VERSIONS {
        let plan = day
            .plan(gpu, version, m, n)
            .unwrap_or_else(|e| panic!("{version} {m}x{n}: {e:#}"));
        let tolerance = plan.tolerance(max_magnitude);
        let mut launch = plan.launch;
        let mut y = gpu.alloc_poisoned::<f32>(m).unwrap();
        let got = launch_and_read(gpu, &mut y, &mut |y| launch(&a_dev, &x_dev, y))
            .unwrap_or_else(|e| panic!("{version} {m}x{n}: {e:#}"));
        let report = check::compare(&got, &expected, &[m], tolerance);
        assert!(report.passed(), "{version} {m} x {n}: {report}");
    }
}

#[test]
fn every_version_matches_the_reference_on_odd_shapes() {
    let Some((gpu, day)) = testing::day_or_skip("day14 GPU correctness", Gemv::load) else {
        return;
    };
    for &m in SIZES {
        for &n in SIZES {
            check_shape(&gpu, &day, m, n);
        }
    }
    for &(m, n) in EXTRA {
        check_shape(&gpu, &day, m, n);
    }
}

#[test]
fn split_row_is_deterministic() {
    let Some((gpu, day)) = testing::day_or_skip("day14 GPU split-row determinism", Gemv::load)
    else {
        return;
    };
    let (m, n) = (7, 100_003);
    let a_dev = gpu
        .upload(&inputs::uniform::<f32>(m * n, -1.0, 1.0, 5))
        .unwrap();
    let x_dev = gpu
        .upload(&inputs::uniform::<f32>(n, -1.0, 1.0, 6))
        .unwrap();
    let mut launch = day.plan(&gpu, "split_row", m, n).unwrap().launch;
    let mut y = gpu.alloc_poisoned::<f32>(m).unwrap();
    let first = launch_and_read(&gpu, &mut y, &mut |y| launch(&a_dev, &x_dev, y)).unwrap();
    for _ in 0..5 {
        let again = launch_and_read(&gpu, &mut y, &mut |y| launch(&a_dev, &x_dev, y)).unwrap();
        let same = first
            .iter()
            .zip(&again)
            .all(|(p, q)| p.to_bits() == q.to_bits());
        assert!(same, "split_row gave different bits on a second run");
    }
}

#[test]
fn wrong_sizes_are_refused() {
    let Some((gpu, day)) = testing::day_or_skip("day14 GPU launcher checks", Gemv::load) else {
        return;
    };
    assert!(day.plan(&gpu, "warp_vec4", 0, 5).is_err());
    let mut launch = day.plan(&gpu, "warp_vec4", 4, 4).unwrap().launch;
    let a = gpu.upload(&[1.0f32; 16]).unwrap();
    let x = gpu.upload(&[1.0f32; 3]).unwrap();
    let mut y = gpu.alloc_poisoned::<f32>(4).unwrap();
    let err = launch(&a, &x, &mut y).unwrap_err();
    assert!(
        err.to_string().contains("do not make a 4 x 4 product"),
        "{err}"
    );
}
