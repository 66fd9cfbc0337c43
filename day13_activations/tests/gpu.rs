//! day13 on the GPU: every op, version and storage type against the f64 reference, over
//! shapes whose element counts are 1, primes, and not multiples of the 16-byte pack, of the
//! 256-thread block or of a vec block's 512 packs; bias-dropout-add also with widths that no
//! pack divides (the one-column kernel) and more row groups than the grid's 65535 in y. The
//! GELU ops' `vec_fast` runs over the same shapes and all three storage types.

use common::session::{Refused, launch_and_read};
use common::{Element, Gpu, measure::check, testing};
use day13::{Activations, HostInputs, Op};
use half::{bf16, f16};

/// (rows, cols): 1; primes; 4097 and 1000 (no pack divides them); 8 x 4096 (whole packs,
/// several blocks); 3 x 65537 (a long leftover run after 24576 packs); 4 x 8 (one pack per row).
const SHAPES: &[(usize, usize)] = &[
    (1, 1),
    (1, 3),
    (1, 7),
    (3, 7),
    (13, 331),
    (1, 4097),
    (7, 1000),
    (8, 4096),
    (3, 65_537),
    (4, 8),
];

fn check_op<T: Element>(gpu: &Gpu, day: &Activations, op: Op, rows: usize, cols: usize) {
    let host = HostInputs::<T>::random(op, rows, cols, (rows * 31 + cols) as u64);
    let expected = host.reference();
    let inputs = host.upload(gpu).unwrap();
    for &version in op.versions() {
        let what = format!("{} {version} {} {rows}x{cols}", op.name(), T::NAME);
        let plan = day
            .plan::<T>(gpu, version, &inputs)
            .unwrap_or_else(|e| panic!("{what}: {e:#}"));
        let mut launch = plan.launch;
        let mut out = gpu.alloc_poisoned::<T>(op.outputs() * rows * cols).unwrap();
        let got = launch_and_read(gpu, &mut out, &mut |out| launch(out))
            .unwrap_or_else(|e| panic!("{what}: {e:#}"));
        let report = check::compare(&got, &expected, &[op.outputs(), rows, cols], plan.tolerance);
        assert!(report.passed(), "{what}: {report}");
    }
}

fn every_op<T: Element>(gpu: &Gpu, day: &Activations) {
    for op in Op::ALL {
        for &(rows, cols) in SHAPES {
            check_op::<T>(gpu, day, op, rows, cols);
        }
    }
}

#[test]
fn every_op_and_version_matches_the_reference() {
    let Some(gpu) = testing::gpu_or_skip("day13 GPU correctness") else {
        return;
    };
    let day = Activations::load(&gpu).unwrap();
    every_op::<f32>(&gpu, &day);
    every_op::<f16>(&gpu, &day);
    every_op::<bf16>(&gpu, &day);
}

#[test]
fn bias_dropout_add_over_more_row_groups_than_the_grid_holds() {
    let Some(gpu) = testing::gpu_or_skip("day13 GPU bias-dropout-add, many rows") else {
        return;
    };
    let day = Activations::load(&gpu).unwrap();
    // 262147 rows = 65537 groups of 4 (and 3 rows over): the grid's y stops at 65535, so
    // blocks go round the row loop twice.
    check_op::<f16>(&gpu, &day, Op::BiasDropoutAdd, 262_147, 8);
    check_op::<f32>(&gpu, &day, Op::BiasDropoutAdd, 262_147, 3);
}

#[test]
fn wrong_versions_and_sizes_are_refused() {
    let Some(gpu) = testing::gpu_or_skip("day13 GPU launcher checks") else {
        return;
    };
    let day = Activations::load(&gpu).unwrap();
    let inputs = HostInputs::<f32>::random(Op::GeluTanh, 2, 8, 0)
        .upload(&gpu)
        .unwrap();
    let Err(err) = day.plan::<f32>(&gpu, "unfused", &inputs) else {
        panic!("gelu_tanh has no unfused version");
    };
    assert!(err.is::<Refused>(), "{err}");
    let swiglu = HostInputs::<f32>::random(Op::Swiglu, 2, 8, 0)
        .upload(&gpu)
        .unwrap();
    let Err(err) = day.plan::<f32>(&gpu, "vec_fast", &swiglu) else {
        panic!("swiglu has no vec_fast version");
    };
    assert!(err.is::<Refused>(), "{err}");

    let plan = day.plan::<f32>(&gpu, "vec", &inputs).unwrap();
    let mut launch = plan.launch;
    let mut short = gpu.alloc_poisoned::<f32>(15).unwrap();
    let err = launch(&mut short).unwrap_err();
    assert!(err.to_string().contains("output holds 15"), "{err}");

    let mut bad = HostInputs::<f32>::random(Op::Swiglu, 2, 8, 0)
        .upload(&gpu)
        .unwrap();
    bad.tensors[1] = gpu.upload(&[1.0f32; 15]).unwrap();
    let Err(err) = day.plan::<f32>(&gpu, "vec", &bad) else {
        panic!("an x of the wrong length must be refused");
    };
    assert!(err.to_string().contains("`x` holds 15"), "{err}");
}
