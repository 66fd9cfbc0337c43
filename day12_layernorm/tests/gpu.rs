//! day12 on the GPU: every version of both passes, every dtype, over the normalization test
//! shapes (rows 1, 3, 17, 1000; widths 1, 7, 127, 128, 1000, 4096, 4097, 8192, 8193 and the
//! register limits 32768 / 32769), against the f64 reference, with poisoned outputs.

use common::family::norm::{NormDay, Refused};
use common::testing::gpu_or_skip;
use day12::{Day12, MAX_BACKWARD_REGISTER_ROW, MAX_REGISTER_ROW};

#[test]
fn every_version_matches_the_reference() {
    common::family::norm::test_every_version::<Day12>();
}

/// The register versions refuse rows one past their widest tier instead of writing garbage.
#[test]
fn register_versions_refuse_rows_past_their_tiers() {
    let Some(gpu) = gpu_or_skip("day12 refusals") else {
        return;
    };
    let day = Day12::load(&gpu).expect("kernels load");
    // Any error other than a refusal fails the test: "not refused" must mean "planned".
    let refused = |version: &str, cols: usize| match day.plan::<f32>(&gpu, version, 4, cols, 1e-5) {
        Ok(_) => false,
        Err(e) if e.is::<Refused>() => true,
        Err(e) => panic!("{version} on 4 x {cols}: {e:#}"),
    };
    assert!(!refused("vec_regs", MAX_REGISTER_ROW));
    assert!(refused("vec_regs", MAX_REGISTER_ROW + 1));
    assert!(!refused("bwd_vec_regs", MAX_BACKWARD_REGISTER_ROW));
    assert!(refused("bwd_vec_regs", MAX_BACKWARD_REGISTER_ROW + 1));
    // The streaming versions take any width.
    assert!(!refused("welford_block", MAX_REGISTER_ROW + 1));
    assert!(!refused("bwd_split", MAX_BACKWARD_REGISTER_ROW + 1));
}
