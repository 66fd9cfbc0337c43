//! day03 on the GPU: every version, every dtype it takes, over the softmax test shapes
//! (one row, one column, odd widths, widths no vector divides, long rows, -inf entries and an
//! all -inf row), against the f64 reference.

#[test]
fn every_version_matches_the_reference() {
    common::family::softmax::test_every_version::<day03::Day03>();
}
