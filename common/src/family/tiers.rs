//! The register tiers of the row kernels (day 5's softmax, days 11 and 12's normalizations): a
//! row of `cols` goes to the first tier (threads per row, elements per thread) whose capacity,
//! the product, holds it, so that each thread keeps its share of the row in registers and the
//! row is read once.

use crate::dtype::Dtype;

/// Elements in one 16-byte pack of `dtype`.
pub fn pack(dtype: Dtype) -> usize {
    16 / dtype.size()
}

/// `v` (16-byte loads) when every row starts on a 16-byte boundary, i.e. the width is a
/// multiple of the pack; `s` (scalar loads) otherwise.
pub fn load_suffix(dtype: Dtype, cols: usize) -> &'static str {
    if cols.is_multiple_of(pack(dtype)) {
        "v"
    } else {
        "s"
    }
}

/// The tiers, smallest first: a warp with one pack a thread, a warp with 16 elements a
/// thread, then blocks of 128 to 1024 threads with 32 each.
pub fn register_tiers(dtype: Dtype) -> [(usize, usize); 6] {
    [
        (32, pack(dtype)),
        (32, 16),
        (128, 32),
        (256, 32),
        (512, 32),
        (1024, 32),
    ]
}

/// The widest row the register tiers take: 32 elements in each of 1024 threads.
pub const MAX_REGISTER_ROW: usize = 32 * 1024;

/// The first tier of `tiers` that holds `cols`.
pub fn tier_for(tiers: &[(usize, usize)], cols: usize) -> Option<(usize, usize)> {
    tiers.iter().copied().find(|(g, e)| g * e >= cols)
}

/// Panics unless, for every float dtype, the capacities of the tiers `tiers_of` gives grow
/// from each tier to the next and the last is `widest`: the test of every list of tiers.
#[cfg(test)]
pub(crate) fn assert_tiers_grow_to<Tiers: AsRef<[(usize, usize)]>>(
    tiers_of: impl Fn(Dtype) -> Tiers,
    widest: usize,
) {
    for dtype in [Dtype::F32, Dtype::F16, Dtype::Bf16] {
        let tiers = tiers_of(dtype);
        let caps: Vec<usize> = tiers.as_ref().iter().map(|(g, e)| g * e).collect();
        assert!(caps.windows(2).all(|w| w[0] < w[1]), "{caps:?}");
        assert_eq!(*caps.last().unwrap(), widest);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tiers_grow_to_the_register_limit() {
        assert_tiers_grow_to(register_tiers, MAX_REGISTER_ROW);
        assert_eq!(
            tier_for(&register_tiers(Dtype::Bf16), 4096),
            Some((128, 32))
        );
        assert_eq!(
            tier_for(&register_tiers(Dtype::F32), MAX_REGISTER_ROW + 1),
            None
        );
        assert_eq!(
            (load_suffix(Dtype::Bf16, 16), load_suffix(Dtype::Bf16, 12)),
            ("v", "s")
        );
    }
}
