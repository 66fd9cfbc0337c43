//! `wgmma_auto`'s choice per problem: the tile width (`wgmma_tma_store`'s 256 or a narrow
//! tile's 192, 128, 64) and the number of persistent CTAs.
//!
//! A persistent kernel runs its tiles in waves of one tile per CTA, and a problem's time is
//! about its number of waves times the time of one tile. With 128 x 256 tiles a 3072^2 output
//! is 288 tiles: 3 waves of 132 SMs, the last 18% full, so a quarter of the machine idles.
//! 128 x 192 tiles make it 384: 3 waves, nearly full, each tile three quarters the work. So
//! the rule estimates `waves x tile width x cost of a column` for each width and takes the
//! cheapest (the widest on a tie within 1%); a narrower tile costs more per column because each of its
//! k steps loads the same 128 rows of A for fewer outputs. Then it launches the fewest CTAs
//! that still finish in that many waves (`ceil(tiles / waves)`): the same time on fewer SMs,
//! which leaves the rest idle, which keeps the clocks of a power-limited GPU up.

use crate::Version;
use crate::tile::{WG_NARROW_TILES, WG_TILE};

/// The versions `wgmma_auto` runs, widest tile first, with the relative time of one column of
/// a tile (the 256-wide tile's = 1), measured on the H100: over the square sizes 3584 to 8192,
/// each width's TFLOP/s divided by the fraction of its waves its tiles fill, against the
/// 256-wide tile's (the sweep in the day's notes). 64-wide tiles run their wgmma at half the rate
/// (m64n64k16 is too short to keep the tensor cores fed) and win only where nothing else
/// fills the GPU at all.
pub const CHOICES: [(Version, usize, f64); 4] = [
    (Version::WgmmaTmaStore, WG_TILE.bn, 1.0),
    (Version::WgmmaN192, WG_NARROW_TILES[0].bn, 1.015),
    (Version::WgmmaN128, WG_NARROW_TILES[1].bn, 1.08),
    (Version::WgmmaN64, WG_NARROW_TILES[2].bn, 2.1),
];

/// What `wgmma_auto` runs on a problem.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AutoChoice {
    pub version: Version,
    /// The tile's width (n) and the tiles of the whole problem.
    pub bn: usize,
    pub tiles: u64,
    /// Waves of `sms` tiles at a time, and the CTAs launched: the fewest that take no more.
    pub waves: u64,
    pub ctas: u64,
}

/// The choice for `batch` products of `m x n` outputs on a GPU of `sms` SMs; `narrow`: whether
/// the narrow tiles may run (16-bit operands; the FP8 kernels have the 256-wide tile only).
pub fn choose(m: usize, n: usize, batch: usize, sms: u32, narrow: bool) -> AutoChoice {
    let sms = u64::from(sms.max(1));
    let mut best: Option<(f64, AutoChoice)> = None;
    let widths = if narrow { &CHOICES[..] } else { &CHOICES[..1] };
    for &(version, bn, column_cost) in widths {
        let tiles = (batch as u64)
            .saturating_mul(m.div_ceil(WG_TILE.bm) as u64)
            .saturating_mul(n.div_ceil(bn) as u64);
        let waves = tiles.div_ceil(sms).max(1);
        let cost = waves as f64 * bn as f64 * column_cost;
        // Within 1% is a tie (the costs are measured to about that), which the wider tile,
        // seen first, keeps: fewer tiles read A and B fewer times.
        if best.is_none_or(|(b, _)| cost < 0.99 * b) {
            let choice = AutoChoice {
                version,
                bn,
                tiles,
                waves,
                ctas: tiles.div_ceil(waves).max(1),
            };
            best = Some((cost, choice));
        }
    }
    best.expect("CHOICES is not empty").1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn full_waves_keep_the_widest_tile_on_fewer_ctas() {
        // 4096^2: 512 tiles of 128 x 256 = 4 waves of 132, which 128 CTAs finish as well.
        let c = choose(4096, 4096, 1, 132, true);
        assert_eq!(
            (c.version, c.tiles, c.waves, c.ctas),
            (Version::WgmmaTmaStore, 512, 4, 128)
        );
        let c = choose(8192, 8192, 1, 132, true);
        assert_eq!(
            (c.version, c.waves, c.ctas),
            (Version::WgmmaTmaStore, 16, 128)
        );
    }

    #[test]
    fn a_badly_filled_last_wave_takes_a_narrower_tile() {
        // 3072^2: 288 wide tiles (3 waves, the last 18% full) or 384 of 192 (3 waves, 97%).
        let c = choose(3072, 3072, 1, 132, true);
        assert_eq!(
            (c.version, c.tiles, c.waves, c.ctas),
            (Version::WgmmaN192, 384, 3, 128)
        );
        // 1024^2: 32 wide tiles leave 100 SMs idle; 128 tiles of 64 fill the GPU once.
        let c = choose(1024, 1024, 1, 132, true);
        assert_eq!(
            (c.version, c.tiles, c.waves, c.ctas),
            (Version::WgmmaN64, 128, 1, 128)
        );
    }

    #[test]
    fn fp8_keeps_the_wide_tile() {
        let c = choose(3072, 3072, 1, 132, false);
        assert_eq!(
            (c.version, c.tiles, c.waves, c.ctas),
            (Version::WgmmaTmaStore, 288, 3, 96)
        );
    }

    #[test]
    fn every_choice_covers_its_tiles() {
        for (m, n, batch) in [
            (1, 1, 1),
            (1000, 1001, 3),
            (8192, 128_256, 1),
            (2600, 5000, 1),
        ] {
            let c = choose(m, n, batch, 132, true);
            assert!(c.ctas <= 132 && c.ctas * c.waves >= c.tiles, "{c:?}");
            assert!(
                CHOICES
                    .iter()
                    .any(|&(v, bn, _)| v == c.version && bn == c.bn)
            );
        }
    }
}
