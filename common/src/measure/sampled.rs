//! Sampled checks of large products. A full f64 reference of a 4096^3 GEMM is minutes of CPU,
//! so past [`FULL_CHECK_MACS`] a check compares a sample of the outputs: the edges (where
//! partial tiles end), random outputs, and two outputs in every [`CHECK_TILE`] square of every
//! product of a batch, so that every output tile of every version, whichever wave of a
//! persistent kernel computes it, is looked at ([`CheckedOutputs`]).

use std::borrow::Cow;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Random outputs a sampled reference checks, besides the edges (see [`sample_outputs`]).
pub const RANDOM_SAMPLES: usize = 4096;

/// Products up to this many multiply-adds have every output checked; larger ones a sample.
pub const FULL_CHECK_MACS: usize = 1 << 28;

/// The outputs a sampled check looks at, sorted: the whole last row and last column (where
/// partial tiles end), the first row, and `random` others drawn with `seed`.
pub fn sample_outputs(m: usize, n: usize, random: usize, seed: u64) -> Vec<usize> {
    let mut at: Vec<usize> = Vec::with_capacity(random + 2 * (m + n));
    at.extend(0..n);
    at.extend((m - 1) * n..m * n);
    at.extend((0..m).map(|i| i * n + n - 1));
    let mut rng = StdRng::seed_from_u64(seed);
    at.extend((0..random).map(|_| rng.random_range(0..m * n)));
    at.sort_unstable();
    at.dedup();
    at
}

/// The side of the squares [`tile_outputs`] visits: 64 divides every GEMM output tile in the
/// workspace (mma.sync's 128 x 128, wgmma's 128 x 256, 192, 128 and 64, in either orientation).
pub const CHECK_TILE: usize = 64;

/// Two flat outputs in every `CHECK_TILE` square of an `m x n` output: one at random in the
/// square (drawn with `seed`) and its last (bottom-right, clipped to the matrix). A sampled check
/// that includes them looks at every output tile of every version, whichever wave of a
/// persistent kernel computes it.
pub fn tile_outputs(m: usize, n: usize, seed: u64) -> Vec<usize> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut at = Vec::with_capacity(2 * m.div_ceil(CHECK_TILE) * n.div_ceil(CHECK_TILE));
    for i0 in (0..m).step_by(CHECK_TILE) {
        let i1 = (i0 + CHECK_TILE).min(m);
        for j0 in (0..n).step_by(CHECK_TILE) {
            let j1 = (j0 + CHECK_TILE).min(n);
            let (i, j) = (rng.random_range(i0..i1), rng.random_range(j0..j1));
            at.push(i * n + j);
            at.push((i1 - 1) * n + j1 - 1);
        }
    }
    at
}

/// [`sample_outputs`] and [`tile_outputs`] together, sorted and unique: the edges, `random`
/// outputs, and two in every output tile.
pub fn sample_outputs_every_tile(m: usize, n: usize, random: usize, seed: u64) -> Vec<usize> {
    let mut at = sample_outputs(m, n, random, seed);
    at.extend(tile_outputs(m, n, seed.wrapping_add(1)));
    at.sort_unstable();
    at.dedup();
    at
}

/// The outputs a check of `batch` products `C (m x n)`, stored back to back, compares: all of
/// them, or a sorted sample (flat indices into the whole batch).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckedOutputs {
    at: Option<Vec<usize>>,
}

impl CheckedOutputs {
    /// Every output where the products hold at most [`FULL_CHECK_MACS`] multiply-adds (`batch
    /// m n k`); beyond, the edges and [`RANDOM_SAMPLES`] outputs of the first product (drawn
    /// with `seed`) and the same places in the last, and in every product two outputs of
    /// every [`CHECK_TILE`] square ([`tile_outputs`], product `z` drawn with `seed + 1 + z`).
    /// One product's sample is [`sample_outputs_every_tile`]'s.
    pub fn of_products(batch: usize, m: usize, n: usize, k: usize, seed: u64) -> Self {
        let macs = batch.saturating_mul(m).saturating_mul(n).saturating_mul(k);
        if macs <= FULL_CHECK_MACS {
            return Self { at: None };
        }
        let one = sample_outputs(m, n, RANDOM_SAMPLES, seed);
        let mut at = one.clone();
        if batch > 1 {
            at.extend(one.iter().map(|i| i + (batch - 1) * m * n));
        }
        for z in 0..batch {
            let tiles = tile_outputs(m, n, seed.wrapping_add(1 + z as u64));
            at.extend(tiles.iter().map(|i| i + z * m * n));
        }
        at.sort_unstable();
        at.dedup();
        Self { at: Some(at) }
    }

    /// The sample, or None when every output is checked (as `Expected::at` takes it).
    pub fn at(&self) -> Option<&[usize]> {
        self.at.as_deref()
    }

    /// The flat outputs the reference is computed at: the sample, or all `outputs` of them.
    pub fn indices(&self, outputs: usize) -> Cow<'_, [usize]> {
        match &self.at {
            Some(at) => Cow::Borrowed(at),
            None => Cow::Owned((0..outputs).collect()),
        }
    }

    /// For the problem's description: `every output checked`, `4180 sampled outputs checked`.
    pub fn describe(&self) -> String {
        match &self.at {
            None => "every output checked".to_string(),
            Some(at) => format!("{} sampled outputs checked", at.len()),
        }
    }

    /// How many `tile_rows x tile_cols` output tiles of the `batch` products no checked output
    /// falls in (0 when every output is checked): a kernel's tiling against the sample.
    pub fn tiles_missed(
        &self,
        (batch, m, n): (usize, usize, usize),
        (tile_rows, tile_cols): (usize, usize),
    ) -> usize {
        let Some(at) = &self.at else { return 0 };
        let (rows, cols) = (m.div_ceil(tile_rows), n.div_ceil(tile_cols));
        let mut seen = vec![false; batch * rows * cols];
        for &flat in at {
            let (z, i, j) = (flat / (m * n), flat / n % m, flat % n);
            seen[(z * rows + i / tile_rows) * cols + j / tile_cols] = true;
        }
        seen.iter().filter(|s| !**s).count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_cover_the_edges_once_each() {
        let at = sample_outputs(5, 4, 0, 0);
        // First row (4), last row (4), last column (5), sharing 2 corners.
        assert_eq!(at.len(), 4 + 4 + 5 - 2);
        assert!(at.windows(2).all(|w| w[0] < w[1]));
        assert!(at.contains(&19) && at.contains(&3) && at.contains(&16));
        assert_eq!(sample_outputs(1, 1, 5, 0), vec![0]);
    }

    #[test]
    fn the_tiled_sample_touches_every_tile() {
        let (m, n) = (300, 1000);
        let at = sample_outputs_every_tile(m, n, 10, 7);
        assert!(at.windows(2).all(|w| w[0] < w[1]), "sorted and unique");
        for ti in 0..m.div_ceil(CHECK_TILE) {
            for tj in 0..n.div_ceil(CHECK_TILE) {
                let inside = |&i: &usize| i / n / CHECK_TILE == ti && i % n / CHECK_TILE == tj;
                assert!(
                    at.iter().filter(|i| inside(i)).count() >= 2,
                    "tile {ti}, {tj}"
                );
            }
        }
    }

    /// 8192^2 is 64 x 32 = 2048 tiles of 128 x 256 (15.5 waves of 132 SMs), which 4096 random
    /// samples alone leave some of unchecked; a batch of odd shapes must be covered in every
    /// product.
    #[test]
    fn a_batch_sample_covers_every_tile_of_every_product() {
        for (batch, m, n, k) in [(1, 8192, 8192, 8192), (3, 1000, 3001, 999)] {
            let checked = CheckedOutputs::of_products(batch, m, n, k, 7);
            let at = checked.at().expect("sampled at this size");
            assert!(at.windows(2).all(|w| w[0] < w[1]), "sorted and unique");
            for tile in [(128, 128), (128, 256), (256, 128)] {
                assert_eq!(checked.tiles_missed((batch, m, n), tile), 0, "{tile:?}");
            }
            assert_eq!(
                checked.describe(),
                format!("{} sampled outputs checked", at.len())
            );
        }
        // One product: the same sample as sample_outputs_every_tile's.
        let one = CheckedOutputs::of_products(1, 2000, 3000, 1000, 5);
        assert_eq!(
            one.at().unwrap(),
            sample_outputs_every_tile(2000, 3000, RANDOM_SAMPLES, 5)
        );
        let small = CheckedOutputs::of_products(2, 64, 64, 64, 1);
        assert_eq!(small.at(), None);
        assert_eq!(small.indices(3).as_ref(), [0, 1, 2]);
        assert_eq!(small.describe(), "every output checked");
        assert_eq!(small.tiles_missed((2, 64, 64), (128, 256)), 0);
    }

    #[test]
    fn a_missed_tile_is_counted() {
        let sparse = CheckedOutputs {
            at: Some(vec![0, 300 * 1000 - 1]),
        };
        // 3 x 8 squares of 128 over 300 x 1000; the first and the last are seen.
        assert_eq!(sparse.tiles_missed((1, 300, 1000), (128, 128)), 3 * 8 - 2);
    }
}
