//! day07 on the GPU: cuBLAS, the baseline and every tile size over the matmul test shapes,
//! against the f64 reference.

#[test]
fn every_version_matches_the_reference() {
    common::family::matmul::test_every_version::<day07::Day07>();
}
