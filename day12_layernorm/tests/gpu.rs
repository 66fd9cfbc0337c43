//! day12 on the GPU: every version of both passes, every dtype, over the normalization test
//! shapes (rows 1, 3, 17, 1000; widths 1, 7, 127, 128, 1000, 4096, 4097, 8192, 8193 and the
//! register limits 32768 / 32769), against the f64 reference, with poisoned outputs.

use common::family::norm;
use day12::Day12;

#[test]
fn every_version_matches_the_reference() {
    norm::test_every_version::<Day12>();
}

/// The register versions refuse rows one past their widest tier instead of writing garbage.
#[test]
fn register_versions_refuse_rows_past_their_tiers() {
    norm::test_register_refusals::<Day12>("welford_block");
}
