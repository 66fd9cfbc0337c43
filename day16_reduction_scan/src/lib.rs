//! Day 16: reductions and scans. [`reduce`] launches the sum, count, dot-product and
//! segment-sum kernels of `reduce.cu`; [`scan`] the four prefix sums of `scan.cu`. Each
//! launcher checks sizes, picks its launch shape and states its summation depth, from which
//! `common::reference::reduce` derives the check's tolerance.

pub mod reduce;
pub mod scan;

pub use reduce::{CountVersion, DotVersion, Reductions, SegmentVersion, SumVersion};
pub use scan::{ScanVersion, Scans};

use common::gpu::kernel_build::KernelBuild;

/// The default `--n` of every problem (main.rs, and the bench): 2^28, 1 GiB of f32, 20x the L2.
pub const DEFAULT_N: u64 = 1 << 28;

/// Floats for sums and scans: a positive mean (0.5) with negatives among them, so that
/// `sum |x|` is 1.25 `|sum x|` and the error bound is a meaningful relative error (see
/// `common::reference::reduce`).
pub const FLOAT_RANGE: (f64, f64) = (-0.5, 1.5);

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

/// What the day compiles: `reduce.cu` and `scan.cu`, every kernel, for the GPU's own
/// architecture. The loaders compile the same, the compile test checks this list, and `cargo
/// xtask bundle` compiles it ahead of time for the GPU host's kernel cache.
pub fn kernel_builds() -> Vec<KernelBuild> {
    vec![
        KernelBuild::device(reduce::SOURCE, reduce::FUNCTIONS.iter().copied()),
        KernelBuild::device(scan::SOURCE, scan::functions()),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kernel_compiles_for_sm90_without_spilling() {
        common::testing::assert_builds_compile_without_spills(&kernel_builds());
    }

    #[test]
    fn names_round_trip() {
        for v in SumVersion::ALL {
            assert_eq!(SumVersion::from_name(v.name()), Some(v));
        }
        for v in CountVersion::ALL {
            assert_eq!(CountVersion::from_name(v.name()), Some(v));
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

    /// The old check covered every output with one `atol + rtol |ref|` (at 2^28, an atol of
    /// about 6.6e4 on every output). An error ten times below that atol must now fail: on the
    /// default quarter inputs every output is exact, and on general floats an early output is
    /// held to its own bound.
    #[test]
    fn a_scan_error_well_below_the_old_covering_bound_now_fails() {
        use common::measure::check;
        use common::reference::reduce as reference;
        let n = 1 << 22;
        let version = ScanVersion::DecoupledLookback;
        let depth = |i| Scans::depth(version, n, i);
        for (x, at) in [
            (scan::quarter_inputs(n, 1), n / 2),
            (
                common::measure::inputs::uniform::<f32>(n, -0.5, 1.5, 2),
                100,
            ),
        ] {
            let reference = scan::ScanReference::new(&x);
            let prefix = &reference.prefix;
            let (_, abs) = reference::inclusive_scan(&x);
            let old = reference::covering_tolerance_by(prefix, &abs, depth);
            let mut got: Vec<f32> = prefix.iter().map(|&p| p as f32).collect();
            let error = old.atol / 10.0;
            assert!(error >= 0.25, "{old:?}");
            got[at] += error as f32;
            let shape = [n];
            assert!(check::compare(&got, prefix, &shape, old).passed());
            let report = reference.check(&got, version);
            assert!(!report.passed(), "{report}");
            assert_eq!(report.mismatches, 1, "{report}");
        }
        // On the quarters the exact scan must be matched everywhere.
        let x = scan::quarter_inputs(n, 1);
        let reference = scan::ScanReference::new(&x);
        assert_eq!(reference.exact_len(), n);
        assert!(x.iter().all(|&v| v != 0.0 && (v * 4.0).fract() == 0.0));
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
