//! day01 on the GPU: the naive softmax over the softmax test shapes (one row, one column, odd
//! widths, long rows, -inf entries and an all -inf row, defined as zeros), against the f64
//! reference, and the launcher's size checks.

use common::family::softmax::Rows;
use day01::{Day01, NaiveSoftmax};

#[test]
fn every_version_matches_the_reference() {
    common::family::softmax::test_every_version::<Day01>();
}

#[test]
fn wrong_sizes_are_refused() {
    let Some((gpu, naive)) =
        common::testing::day_or_skip("day01 GPU launcher checks", NaiveSoftmax::load)
    else {
        return;
    };
    let x = gpu.upload(&[0.5f32; 12]).unwrap();
    let mut out = gpu.alloc_poisoned::<f32>(12).unwrap();
    let mut launch = |rows, cols| {
        let on = Rows {
            gpu: &gpu,
            rows,
            cols,
        };
        let mut plan = naive.plan::<f32>(on).unwrap();
        (plan.launch)(&x, &mut out)
    };
    assert!(launch(5, 3).is_err());
    assert!(launch(0, 12).is_err());
    assert!(launch(4, 3).is_ok());
}
