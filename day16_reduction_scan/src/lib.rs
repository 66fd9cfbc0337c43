//! Day 16: reductions and scans. [`reduce`] plans and launches the sum, count, dot-product
//! and segment-sum kernels of `reduce.cu`; [`scan`] the prefix sums of `scan.cu`. Each plan
//! checks sizes, picks its launch shape and states its summation depth, from which
//! [`reference`] derives the check's tolerance. [`problem`] makes the day's problems for the
//! shared runner of multi-op days.

pub mod problem;
pub mod reduce;
pub mod reference;
pub mod scan;

pub use reduce::{CountVersion, DotVersion, Reductions, SegmentVersion, SumVersion};
pub use scan::{ScanVersion, Scans};

use common::gpu::kernel_build::KernelBuild;

/// The default `--n` of every problem (the flags, and the bench): 2^28, 1 GiB of f32, 20x the L2.
pub const DEFAULT_N: u64 = 1 << 28;

/// Floats for sums and scans: a positive mean (0.5) with negatives among them, so that
/// `sum |x|` is 1.25 `|sum x|` and the error bound is a meaningful relative error (see
/// [`reference`]).
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
    vec![reduce::build(), scan::build()]
}

common::test_kernel_builds!();
