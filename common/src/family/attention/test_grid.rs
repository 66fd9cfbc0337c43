//! The attention GPU tests: their shapes, their run of every version over them, and the
//! refusals both days check.

use std::collections::BTreeMap;

use super::*;
use crate::session::Refused;
use crate::testing;

/// The GPU tests' grid: `per_block(head_dim, causal)` for both head dims, without and with
/// the mask, one block after another.
pub fn test_grid(per_block: impl Fn(usize, bool) -> Vec<AttentionShape>) -> Vec<AttentionShape> {
    let mut shapes = Vec::new();
    for d in [64, 128] {
        for causal in [false, true] {
            shapes.extend(per_block(d, causal));
        }
    }
    shapes
}

/// The odd shapes both days' GPU tests check at one head dim and mask: sequence lengths that
/// are not multiples of any tile, more and fewer queries than keys, GQA and MQA.
pub fn odd_test_shapes(d: usize, causal: bool) -> Vec<AttentionShape> {
    let mut shapes: Vec<AttentionShape> = [1, 17, 100, 257, 1000]
        .into_iter()
        .map(|len| AttentionShape::uniform(2, len, len, 2, 2, d, causal))
        .collect();
    shapes.extend([
        // More queries than keys (causal: the first 157 rows see nothing), and fewer.
        AttentionShape::uniform(1, 257, 100, 2, 2, d, causal),
        AttentionShape::uniform(1, 100, 257, 2, 2, d, causal),
        // GQA (2 query heads per kv head; the backward sums dK and dV over the group) and MQA.
        AttentionShape::uniform(2, 130, 130, 4, 2, d, causal),
        AttentionShape::uniform(1, 77, 150, 4, 1, d, causal),
    ]);
    shapes
}

/// Variable lengths in one batch, one of them with more queries than keys: the tests' varlen
/// shape at one head dim and mask.
pub fn varlen_test_shape(d: usize, causal: bool) -> AttentionShape {
    AttentionShape {
        heads: 2,
        kv_heads: 1,
        head_dim: d,
        seqlens_q: vec![1, 17, 100, 257, 65],
        seqlens_k: vec![1, 30, 100, 200, 64],
        causal,
    }
}

/// What an attention GPU test records over its grid: the shapes each version ran on, and every
/// failing case (the test goes on after one, so a GPU run reports them all).
#[derive(Default)]
pub struct GridOutcome {
    pub ran: BTreeMap<&'static str, usize>,
    pub failures: Vec<String>,
}

/// What checks every version on one shape stored as one type: `check(gpu, day, shape, seed,
/// outcome)`.
pub type CheckShape<D> = fn(&Gpu, &D, &AttentionShape, u64, &mut GridOutcome);

/// An attention day's GPU test over `shapes` (skipped, one line, without a GPU): `load` loads
/// the day's kernels, `[bf16, f16]` run every version on one shape, bf16 on every shape and
/// f16 on every third; then the test fails on any failing case, and on a version (of
/// `versions`) that ran on no shape unless it is `fa_hopper` on a GPU without sm_90a (one
/// `SKIPPED` line instead).
pub fn check_every_version<D>(
    test: &str,
    load: impl FnOnce(&Gpu) -> Result<D>,
    versions: &[&'static str],
    shapes: &[AttentionShape],
    [bf16, f16]: [CheckShape<D>; 2],
) {
    let Some(gpu) = testing::gpu_or_skip(test) else {
        return;
    };
    let day = load(&gpu).unwrap_or_else(|e| panic!("{test}: loading the kernels: {e:#}"));
    let mut outcome = GridOutcome::default();
    for (i, shape) in shapes.iter().enumerate() {
        bf16(&gpu, &day, shape, 10 * i as u64, &mut outcome);
        if i % 3 == 0 {
            f16(&gpu, &day, shape, 10 * i as u64 + 5, &mut outcome);
        }
    }
    // A version that refused (or failed to launch) every shape has checked nothing.
    let ran = &outcome.ran;
    let counts = versions
        .iter()
        .map(|&v| (v, ran.get(v).copied().unwrap_or(0)));
    let unavailable = |name: &str| {
        (name == "fa_hopper")
            .then(|| testing::needs_sm90a(&gpu))
            .flatten()
    };
    testing::assert_every_version_ran(test, counts, unavailable, outcome.failures);
}

/// The refusals both days' GPU tests check (skipped, one line, without a GPU): `load` loads
/// the day's kernels, `kernel_for(gpu, day, shape, version)` asks for a version's kernel and
/// launch shape on that shape (uploaded), stored as bf16. At `long`, whose naive matrices pass
/// the memory wall, the naive version is refused and `fa2_mma` planned; at head dim 96, which
/// only the naive version is compiled for, the naive version is planned and `fa2_scalar` and
/// `fa_hopper` refused. Returns the GPU and the day for the day's own checks.
pub fn check_refusals<D>(
    test: &str,
    load: impl FnOnce(&Gpu) -> Result<D>,
    long: &AttentionShape,
    mut kernel_for: impl FnMut(&Gpu, &D, &AttentionShape, &str) -> Result<()>,
) -> Option<(Gpu, D)> {
    let gpu = testing::gpu_or_skip(test)?;
    let day = load(&gpu).unwrap_or_else(|e| panic!("{test}: loading the kernels: {e:#}"));
    let mut kernel_for =
        |shape: &AttentionShape, version: &str| kernel_for(&gpu, &day, shape, version);
    let Err(err) = kernel_for(long, "naive") else {
        panic!("naive planned {long:?}, past the memory wall");
    };
    assert!(
        err.is::<Refused>() && err.to_string().contains("memory wall"),
        "{err}"
    );
    assert!(kernel_for(long, "fa2_mma").is_ok());
    let odd = AttentionShape::uniform(1, 10, 10, 1, 1, 96, false);
    assert!(kernel_for(&odd, "naive").is_ok());
    for version in ["fa2_scalar", "fa_hopper"] {
        let Err(err) = kernel_for(&odd, version) else {
            panic!("{version} planned head dim 96");
        };
        assert!(err.is::<Refused>(), "{err}");
    }
    Some((gpu, day))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_test_grid_has_every_odd_shape_at_both_head_dims_and_masks() {
        let grid = test_grid(|d, causal| {
            let mut shapes = odd_test_shapes(d, causal);
            shapes.push(varlen_test_shape(d, causal));
            shapes
        });
        assert_eq!(grid.len(), 4 * 10);
        assert_eq!(grid[0], AttentionShape::uniform(2, 1, 1, 2, 2, 64, false));
        assert!(grid[30..].iter().all(|s| s.head_dim == 128 && s.causal));
    }
}
