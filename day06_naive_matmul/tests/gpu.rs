//! day06 on the GPU: cuBLAS and both naive kernels over the matmul test shapes (1 x 1 x 1,
//! primes, a dimension of 1 in each place, 1000 x 1001 x 999), against the f64 reference.

#[test]
fn every_version_matches_the_reference() {
    common::family::matmul::test_every_version::<day06::Day06>();
}
