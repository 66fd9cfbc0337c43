//! day00 on the GPU: every version against the CPU reference over sizes that are not
//! multiples of the block, of the float4, or of the grid-stride sweep.

use common::session::launch_and_read;
use common::{Tolerance, measure::check, measure::inputs, testing};
use day00::{VectorAdd, Version};

const SIZES: &[usize] = &[
    1,
    2,
    3,
    4,
    5,
    255,
    256,
    257,
    1000,
    4097,
    65_537,
    (1 << 20) + 3,
    // More float4s than one wave of the grid-stride version has threads: the loop goes round.
    (1 << 22) + 7,
];

#[test]
fn every_version_matches_the_reference_on_odd_sizes() {
    let Some((gpu, day)) = testing::day_or_skip("day00 GPU correctness", VectorAdd::load) else {
        return;
    };
    for (i, &n) in SIZES.iter().enumerate() {
        let a: Vec<f32> = inputs::uniform(n, -10.0, 10.0, 2 * i as u64);
        let b: Vec<f32> = inputs::uniform(n, -10.0, 10.0, 2 * i as u64 + 1);
        let expected = day00::reference::vector_add(&a, &b);
        let (a_dev, b_dev) = (gpu.upload(&a).unwrap(), gpu.upload(&b).unwrap());
        for version in Version::ALL {
            let mut out = gpu.alloc_poisoned::<f32>(n).unwrap();
            let got = launch_and_read(&gpu, &mut out, &mut |out| {
                day.launch(&gpu, version, &a_dev, &b_dev, out)
            })
            .unwrap();
            let report = check::compare(&got, &expected, &[n], Tolerance::new(0.0, 6e-8));
            assert!(report.passed(), "{} n={n}: {report}", version.name());
        }
    }
}

#[test]
fn mismatched_or_empty_buffers_are_refused() {
    let Some((gpu, day)) = testing::day_or_skip("day00 GPU launcher checks", VectorAdd::load)
    else {
        return;
    };
    let a = gpu.upload(&[1.0f32; 8]).unwrap();
    let b = gpu.upload(&[1.0f32; 7]).unwrap();
    let mut out = gpu.alloc_poisoned::<f32>(8).unwrap();
    let err = day
        .launch(&gpu, Version::Naive, &a, &b, &mut out)
        .unwrap_err();
    assert!(err.to_string().contains("lengths must be equal"), "{err}");
}
