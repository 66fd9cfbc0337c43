//! Day 16: reductions and scans. [`reduce`] launches the sum, count, dot-product and
//! segment-sum kernels of `reduce.cu`; [`scan`] the four prefix sums of `scan.cu`. Each
//! launcher checks sizes, picks its launch shape and states its summation depth, from which
//! `common::reference::reduce` derives the check's tolerance.

pub mod reduce;
pub mod scan;

pub use reduce::{CountVersion, DotVersion, Reductions, SegmentVersion, SumVersion};
pub use scan::{ScanVersion, Scans};

/// The problem keys the report and `peers/reduce.py` share.
pub mod keys {
    pub fn sum(n: usize) -> String {
        format!("sum/f32/{n}")
    }
    pub fn count(n: usize) -> String {
        format!("count/i32/{n}")
    }
    pub fn dot(n: usize) -> String {
        format!("dot/f32/{n}")
    }
    pub fn segment_sum(segments: usize, len: usize) -> String {
        format!("segment_sum/f32/{segments}x{len}")
    }
    pub fn scan(dtype: &str, n: usize) -> String {
        format!("scan/{dtype}/{n}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_reduction_kernel_compiles_for_sm90_without_spilling() {
        common::testing::assert_compiles_without_spills(
            &reduce::SOURCE,
            "sm_90",
            reduce::FUNCTIONS,
        );
    }

    #[test]
    fn every_scan_kernel_compiles_for_sm90_without_spilling() {
        let functions = scan::functions();
        let names: Vec<&str> = functions.iter().map(String::as_str).collect();
        common::testing::assert_compiles_without_spills(&scan::SOURCE, "sm_90", &names);
    }

    #[test]
    fn names_round_trip() {
        for v in SumVersion::ALL {
            assert_eq!(SumVersion::from_name(v.name()), Some(*v));
        }
        for v in CountVersion::ALL {
            assert_eq!(CountVersion::from_name(v.name()), Some(*v));
        }
        for v in ScanVersion::ALL {
            assert_eq!(ScanVersion::from_name(v.name()), Some(*v));
        }
        assert_eq!(
            SegmentVersion::from_name("block"),
            Some(SegmentVersion::Block)
        );
        assert_eq!(DotVersion::from_name("nope"), None);
    }

    #[test]
    fn scan_depth_grows_with_the_tile_for_chained_versions_only() {
        let n = 1 << 28;
        assert_eq!(Scans::depth(ScanVersion::SingleBlock, n, 0), 64);
        assert_eq!(
            Scans::depth(ScanVersion::DecoupledLookback, n, n - 1),
            64 + (n / scan::TILE - 1) as u64
        );
        assert_eq!(
            Scans::depth(ScanVersion::DecoupledLookbackFast, n, n - 1),
            64 + (n / scan::FAST_TILE - 1) as u64
        );
        // 2^28 -> 65536 tile totals -> 16 -> 1: three levels.
        assert_eq!(Scans::depth(ScanVersion::Hierarchical, n, n - 1), 192);
        assert_eq!(Scans::depth(ScanVersion::Hierarchical, 1, 0), 64);
    }
}
