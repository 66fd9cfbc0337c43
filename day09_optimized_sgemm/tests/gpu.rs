//! day09 on the GPU: cuBLAS and every SGEMM version, both the 16-byte and the 4-byte forms
//! (the test shapes have k and n both multiples of 4 and not), against the f64 reference.

#[test]
fn every_version_matches_the_reference() {
    common::family::matmul::test_every_version::<day09::Day09>();
}
