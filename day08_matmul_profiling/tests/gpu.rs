//! day08 on the GPU: cuBLAS and the kernels it profiles over the matmul test shapes, against
//! the f64 reference (they are days 6 and 7's kernels; this checks day 8's wiring of them).

#[test]
fn every_version_matches_the_reference() {
    common::family::matmul::test_every_version::<day08::Day08>();
}
