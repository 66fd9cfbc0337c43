//! day16 on the GPU: every version against the reference over sizes that are not multiples of
//! the block, the float4, the tile (4096) or the grid-stride sweep, with poisoned outputs.

use common::session::launch_and_read;
use common::{Gpu, Tolerance, measure::check, measure::inputs, testing};
use day16::reduce::tolerance;
use day16::reference;
use day16::scan::{FAST_TILE, ScanElement, ScanReference, TILE, quarter_inputs};
use day16::{CountVersion, DotVersion, Reductions, ScanVersion, Scans, SegmentVersion, SumVersion};

/// 1, 2, primes and odd sizes around the warp, the float4 and the tile; 2^20 + 3; and a size
/// whose grid-stride versions go round their loop many times (more than one wave of blocks
/// would cover: one wave of 132 x 8 blocks x 256 threads x 16 elements is 4.3 M).
const SIZES: &[usize] = &[
    1,
    2,
    3,
    31,
    33,
    1000,
    4095,
    4096,
    4097,
    3 * 4096 + 5,
    65_537,
    (1 << 20) + 3,
    (1 << 24) + 7,
];

fn floats(n: usize, seed: u64) -> Vec<f32> {
    inputs::uniform(n, -0.5, 1.5, seed)
}

fn assert_passes<T: common::Element>(got: &[T], expected: &[f64], tol: Tolerance, what: &str) {
    let report = check::compare(got, expected, &[expected.len()], tol);
    assert!(report.passed(), "{what}: {report}");
}

#[test]
fn sum_and_dot_match_the_reference_within_their_bounds() {
    let Some((gpu, day)) = testing::day_or_skip("day16 sum and dot", Reductions::load) else {
        return;
    };
    for (i, &n) in SIZES.iter().enumerate() {
        let x = floats(n, i as u64);
        let y = floats(n, 100 + i as u64);
        let (x_dev, y_dev) = (gpu.upload(&x).unwrap(), gpu.upload(&y).unwrap());
        let (sum, abs) = (reference::sum(&x), reference::abs_sum(&x));
        for version in SumVersion::ALL {
            let mut plan = day.plan_sum(&gpu, version, n).unwrap();
            let mut out = gpu.alloc_poisoned::<f32>(1).unwrap();
            let got =
                launch_and_read(&gpu, &mut out, &mut |out| plan.launch(&gpu, &x_dev, out)).unwrap();
            let tol = tolerance(&[sum], &[abs], plan.depth);
            assert_passes(&got, &[sum], tol, &format!("sum {} n={n}", version.name()));
        }
        let (dot, dot_abs) = reference::dot(&x, &y);
        for version in DotVersion::ALL {
            let mut plan = day.plan_dot(&gpu, version, n).unwrap();
            let mut out = gpu.alloc_poisoned::<f32>(1).unwrap();
            let got = launch_and_read(&gpu, &mut out, &mut |out| {
                plan.launch(&gpu, &x_dev, &y_dev, out)
            })
            .unwrap();
            let tol = tolerance(&[dot], &[dot_abs], plan.depth);
            assert_passes(&got, &[dot], tol, &format!("dot {} n={n}", version.name()));
        }
    }
}

#[test]
fn the_two_stage_sum_is_the_same_bit_for_bit_on_every_run() {
    let Some((gpu, day)) = testing::day_or_skip("day16 deterministic sum", Reductions::load) else {
        return;
    };
    let n = (1 << 22) + 1;
    let x_dev = gpu.upload(&floats(n, 7)).unwrap();
    for version in SumVersion::ALL {
        let mut plan = day.plan_sum(&gpu, version, n).unwrap();
        let mut out = gpu.alloc_poisoned::<f32>(1).unwrap();
        let mut run = || {
            launch_and_read(&gpu, &mut out, &mut |out| plan.launch(&gpu, &x_dev, out)).unwrap()[0]
                .to_bits()
        };
        let first = run();
        assert!((0..5).all(|_| run() == first), "{}", version.name());
    }
}

#[test]
fn counts_are_exact_for_every_version() {
    let Some((gpu, day)) = testing::day_or_skip("day16 count", Reductions::load) else {
        return;
    };
    for (i, &n) in SIZES.iter().enumerate() {
        let x: Vec<i32> = inputs::uniform(n, 0.51, 16.49, 50 + i as u64);
        let x_dev = gpu.upload(&x).unwrap();
        for version in CountVersion::ALL {
            let mut plan = day.plan_count(&gpu, version, n).unwrap();
            // A value with many matches, one with few, and one with none.
            for value in [7, 16, 99] {
                let count = reference::count_equal(&x, value) as f64;
                let mut out = gpu.alloc_poisoned::<u32>(1).unwrap();
                let got = launch_and_read(&gpu, &mut out, &mut |out| {
                    plan.launch(&gpu, &x_dev, value, out)
                })
                .unwrap();
                let what = format!("count {} n={n} value={value}", version.name());
                assert_passes(&got, &[count], Tolerance::EXACT, &what);
            }
        }
    }
}

#[test]
fn segment_sums_match_for_aligned_and_unaligned_lengths() {
    let Some((gpu, day)) = testing::day_or_skip("day16 segment sum", Reductions::load) else {
        return;
    };
    // (segments, length): lengths 1, 3, 4, primes, a multiple of 4 that is not of the warp's
    // 128 elements per step, and long segments.
    let shapes = [
        (1, 1),
        (7, 3),
        (5, 4),
        (33, 31),
        (9, 33),
        (17, 1000),
        (3, 4097),
        (1, 1 << 20),
        (1000, 4096),
        (4099, 12),
    ];
    for (i, &(segments, len)) in shapes.iter().enumerate() {
        let x = floats(segments * len, 200 + i as u64);
        let (sums, abs) = reference::segment_sums(&x, len);
        let x_dev = gpu.upload(&x).unwrap();
        for version in SegmentVersion::ALL {
            let plan = day.plan_segment(version, segments, len).unwrap();
            let mut out = gpu.alloc_poisoned::<f32>(segments).unwrap();
            let got =
                launch_and_read(&gpu, &mut out, &mut |out| plan.launch(&gpu, &x_dev, out)).unwrap();
            let tol = tolerance(&sums, &abs, plan.depth);
            let what = format!("segment_sum {} {segments}x{len}", version.name());
            assert_passes(&got, &sums, tol, &what);
        }
    }
}

/// Every scan version on `x`, each output exact where the scan cannot round and otherwise
/// within its own bound (`ScanReference`); counts into `ran` (per version) what ran.
fn check_scans<T: ScanElement>(gpu: &Gpu, day: &Scans, x: &[T], what: &str, ran: &mut [usize]) {
    let n = x.len();
    let reference = ScanReference::new(x);
    let x_dev = gpu.upload(x).unwrap();
    for (v, version) in ScanVersion::ALL.into_iter().enumerate() {
        // The single block walks every tile alone: keep its test sizes moderate.
        if version == ScanVersion::SingleBlock && n > (1 << 22) {
            continue;
        }
        let mut plan = day.plan::<T>(gpu, version, n).unwrap();
        let mut out = gpu.alloc_poisoned::<T>(n).unwrap();
        // Twice: the second run finds the look-back state of the first and must reset it.
        for run in 0..2 {
            let got =
                launch_and_read(gpu, &mut out, &mut |out| plan.launch(gpu, &x_dev, out)).unwrap();
            let report = reference.check(&got, version);
            let what = format!("scan {} {what} n={n} run {run}", version.name());
            assert!(report.passed(), "{what}: {report}");
        }
        ran[v] += 1;
    }
}

#[test]
fn scans_match_the_reference_on_sizes_that_are_not_whole_tiles() {
    let Some((gpu, day)) = testing::day_or_skip("day16 scans", Scans::load) else {
        return;
    };
    let mut sizes = SIZES.to_vec();
    // More tiles than one wave of resident blocks (132 SMs x 8), so the look-back waits on
    // tiles of blocks that started long before; and more than 4096 tiles, so the
    // hierarchical scan recurses twice.
    sizes.extend([1056 * TILE * 3 + 1, 4096 * TILE + TILE + 3]);
    // Around decoupled_lookback_fast's tile of 8192: one element short, whole, one over, and
    // a partial fourth tile that is not a multiple of 4.
    sizes.extend([FAST_TILE - 1, FAST_TILE, FAST_TILE + 1, 3 * FAST_TILE + 5]);
    let mut ran = vec![0; ScanVersion::ALL.len()];
    for (i, &n) in sizes.iter().enumerate() {
        // Floats of a positive mean (each output within its own rounding bound), quarters
        // (the default run's inputs: exact), integers (exact).
        check_scans(&gpu, &day, &floats(n, 300 + i as u64), "f32", &mut ran);
        check_scans(
            &gpu,
            &day,
            &quarter_inputs(n, 500 + i as u64),
            "f32 quarters",
            &mut ran,
        );
        let ints: Vec<i32> = inputs::uniform(n, -2.49, 4.49, 400 + i as u64);
        check_scans(&gpu, &day, &ints, "i32", &mut ran);
    }
    // A version that ran no shape would pass the loop above without a check.
    for (version, ran) in ScanVersion::ALL.iter().zip(&ran) {
        assert!(*ran > 0, "scan {} ran no shape", version.name());
    }
}

#[test]
fn bad_sizes_are_refused() {
    let Some((gpu, day)) = testing::day_or_skip("day16 launcher checks", Reductions::load) else {
        return;
    };
    let scans = Scans::load(&gpu).unwrap();
    let x = gpu.upload(&[1.0f32; 8]).unwrap();
    let y = gpu.upload(&[1.0f32; 7]).unwrap();
    let mut two = gpu.alloc_poisoned::<f32>(2).unwrap();
    let mut sum = day.plan_sum(&gpu, SumVersion::Vec4, 8).unwrap();
    let err = sum.launch(&gpu, &x, &mut two).unwrap_err();
    assert!(err.to_string().contains("one output"), "{err}");
    let mut one = gpu.alloc_poisoned::<f32>(1).unwrap();
    let mut dot = day.plan_dot(&gpu, DotVersion::Vec4, 8).unwrap();
    let err = dot.launch(&gpu, &x, &y, &mut one).unwrap_err();
    assert!(err.to_string().contains("lengths must be equal"), "{err}");
    let mut three = gpu.alloc_poisoned::<f32>(3).unwrap();
    let segment = day.plan_segment(SegmentVersion::Block, 3, 3).unwrap();
    let err = segment.launch(&gpu, &x, &mut three).unwrap_err();
    assert!(err.to_string().contains("segments"), "{err}");
    let mut short = gpu.alloc_poisoned::<f32>(7).unwrap();
    for version in [
        ScanVersion::DecoupledLookback,
        ScanVersion::DecoupledLookbackFast,
    ] {
        let mut plan = scans.plan::<f32>(&gpu, version, 8).unwrap();
        let err = plan.launch(&gpu, &x, &mut short).unwrap_err();
        assert!(err.to_string().contains("lengths must be equal"), "{err}");
    }
}
