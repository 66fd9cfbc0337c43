//! The tiles of the tensor-core GEMMs, written once: the launchers take their grid, block,
//! shared memory and TMA boxes from [`MmaTile`] and [`WgTile`], and the kernel files get the
//! same numbers as NVRTC defines ([`MmaTile::defines`], [`WgTile::defines`]) and
//! `static_assert` that their own shared-memory layouts take exactly what the host gives.
//! Compiled without the defines, a kernel file stops at an `#error`.
//!
//! Day 23's INT8 GEMM runs the same tiles in bytes (an int8 k step of 128 bytes is a bf16 one
//! of 64 values), so it reads [`MMA_TILE`] and [`WG_TILE`] from here too.

use common::gpu::tile::{Defines, SharedLayout, Violations, WARPGROUP_THREADS};

/// Bytes of one row of the 128-byte swizzle that the cp.async ring, the TMA boxes and the
/// staged output chunks all use.
pub const SWIZZLE_ROW_BYTES: usize = 128;

/// The tile of the `mma.sync` versions fed by a cp.async ring: a block of 8 warps as 2 (m) x
/// 4 (n), each warp 64 x 32 outputs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MmaTile {
    /// Output rows (of A) and columns (of B) per block.
    pub bm: usize,
    pub bn: usize,
    pub threads: usize,
    /// k per stage of the ring, in bytes: one swizzled row.
    pub k_bytes: usize,
    pub stages: usize,
}

/// A warp's share of an [`MmaTile`]: 64 rows x 32 columns.
const WARP_M: usize = 64;
const WARP_N: usize = 32;

/// `mma_pipelined`'s tile (and day 23's `mma_sync`): 128 x 128 per block of 256 threads, a
/// 4-stage ring of 128-byte k steps.
pub const MMA_TILE: MmaTile = MmaTile {
    bm: 128,
    bn: 128,
    threads: 256,
    k_bytes: SWIZZLE_ROW_BYTES,
    stages: 4,
};

impl MmaTile {
    /// The ring's dynamic shared memory: per stage a `bm`-row tile of A and a `bn`-row tile
    /// of B, `k_bytes` each row.
    pub const fn shared_bytes(&self) -> usize {
        SharedLayout::new()
            .region(self.stages * (self.bm + self.bn) * self.k_bytes)
            .bytes()
    }

    /// What stops this tile from compiling or running on an H100, as the kernels'
    /// `static_assert`s check it (one line each; empty when it fits).
    pub fn violations(&self) -> Vec<String> {
        let mut v = Violations::new(format_args!("mma {}x{}", self.bm, self.bn));
        v.require(self.bm == self.bn, || {
            "one stage loop fills A's and B's tiles alike: bm must equal bn".into()
        });
        let warps = (self.bm / WARP_M) * (self.bn / WARP_N);
        v.require(
            self.bm.is_multiple_of(WARP_M)
                && self.bn.is_multiple_of(WARP_N)
                && self.threads == 32 * warps,
            || {
                format!(
                    "{} threads do not tile {}x{} in warps of {WARP_M}x{WARP_N}",
                    self.threads, self.bm, self.bn
                )
            },
        );
        v.require(self.k_bytes == SWIZZLE_ROW_BYTES, || {
            format!("a stage's rows are one {SWIZZLE_ROW_BYTES}-byte swizzle row")
        });
        v.require(self.stages >= 2, || {
            "the ring needs at least two stages".into()
        });
        v.shared_bytes(self.shared_bytes());
        v.into_lines()
    }

    /// The kernel file's defines under `prefix` (`GEMM_MMA`): the tile and the shared memory
    /// the host gives.
    pub fn defines(&self, prefix: &str) -> Vec<String> {
        Defines::new(prefix)
            .set("BM", self.bm)
            .set("BN", self.bn)
            .set("THREADS", self.threads)
            .set("BK_BYTES", self.k_bytes)
            .set("STAGES", self.stages)
            .set("SHARED_BYTES", self.shared_bytes())
            .into_vec()
    }
}

/// How a Hopper kernel's epilogue writes C, which decides what shared memory it needs beside
/// the ring.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Staging {
    /// Straight from registers: nothing.
    Registers,
    /// Through shared memory and TMA stores: two chunks of `out_rows x 128` bytes per
    /// consumer, which alternate.
    TmaStore,
    /// Day 18's `wgmma_prefetch_c`: per consumer its whole `64 x bn` slice of C (which the TMA
    /// loads during the main loop), and one barrier per consumer that counts it.
    PrefetchC,
}

/// The tile of the Hopper versions (TMA + wgmma, warp specialized, persistent): a producer
/// warpgroup and `consumers` warpgroups of 64 rows each, a `bm x bn` output tile, a ring of
/// `stages` stages of `k_bytes` of k.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WgTile {
    pub bm: usize,
    /// One wgmma's N.
    pub bn: usize,
    pub k_bytes: usize,
    pub stages: usize,
    pub consumers: usize,
    /// Rows of a staged output chunk (and of C's TMA box): a consumer's 64.
    pub out_rows: usize,
    /// Registers per producer thread after `setmaxnreg.dec`, per consumer thread after
    /// `.inc`.
    pub producer_registers: usize,
    pub consumer_registers: usize,
}

/// The Hopper tile: 128 x 256 per block of two consumers, 4 stages of 128 x 128 bytes of A and
/// 256 x 128 bytes of B.
pub const WG_TILE: WgTile = WgTile {
    bm: 128,
    bn: 256,
    k_bytes: SWIZZLE_ROW_BYTES,
    stages: 4,
    consumers: 2,
    out_rows: 64,
    producer_registers: 40,
    consumer_registers: 232,
};

/// The narrower tiles of `wgmma_n192`, `wgmma_n128` and `wgmma_n64`: `wgmma_tma_store`'s kernel
/// on 128 x `bn` tiles, so a problem has more tiles and the last wave of SMs fills better
/// (`day18::Gemm` picks among the widths per problem). Each has as many stages as fit beside
/// the staging; the narrower a tile, the more of them.
pub const WG_NARROW_TILES: [WgTile; 3] = [
    WgTile { bn: 192, ..WG_TILE },
    WgTile {
        bn: 128,
        stages: 6,
        ..WG_TILE
    },
    WgTile {
        bn: 64,
        stages: 8,
        ..WG_TILE
    },
];

/// `wgmma_prefetch_c`'s: 3 stages, which make room for the whole slice of C beside them.
pub const WG_PREFETCH_TILE: WgTile = WgTile {
    stages: 3,
    ..WG_TILE
};

impl WgTile {
    pub const fn threads(&self) -> usize {
        WARPGROUP_THREADS * (1 + self.consumers)
    }

    /// Bytes of one staged output chunk: `out_rows` rows of 128 bytes.
    pub const fn out_chunk_bytes(&self) -> usize {
        self.out_rows * SWIZZLE_ROW_BYTES
    }

    /// The dynamic shared memory of a block with `staging`, as the kernels lay it out: 1 KiB
    /// of slack to align the tiles to the swizzle's 1024-byte period, the stages' tiles of A
    /// and B, the staging, then the full and empty barrier of each stage (and with
    /// [`Staging::PrefetchC`] one per consumer).
    pub const fn shared_bytes(&self, staging: Staging) -> usize {
        let (staging_bytes, extra_barriers) = match staging {
            Staging::Registers => (0, 0),
            Staging::TmaStore => (self.consumers * 2 * self.out_chunk_bytes(), 0),
            Staging::PrefetchC => (
                self.consumers * (self.bn * 2 / SWIZZLE_ROW_BYTES) * self.out_chunk_bytes(),
                self.consumers,
            ),
        };
        SharedLayout::new()
            .region(1024)
            .region(self.stages * (self.bm + self.bn) * self.k_bytes)
            .region(staging_bytes)
            .region(8 * (2 * self.stages + extra_barriers))
            .bytes()
    }

    /// What stops this tile from compiling or running on an H100 with each of `stagings`
    /// (one line each; empty when it fits).
    pub fn violations(&self, stagings: &[Staging]) -> Vec<String> {
        let mut v = Violations::new(format_args!(
            "wgmma {}x{}, {} stages",
            self.bm, self.bn, self.stages
        ));
        v.require(self.bm == 64 * self.consumers, || {
            format!(
                "{} consumers of 64 rows do not make {} rows",
                self.consumers, self.bm
            )
        });
        v.require(self.bm <= 256 && self.bn <= 256, || {
            "a TMA box has at most 256 rows".into()
        });
        // MN-major operands arrive as 64-wide boxes, and a staged chunk is 64 16-bit columns
        // (day 23: 32 int32 ones, two chunks a box).
        v.require(self.bn.is_multiple_of(64), || {
            format!("bn = {} is not whole 64-column chunks", self.bn)
        });
        v.require(self.k_bytes == SWIZZLE_ROW_BYTES, || {
            format!("a stage holds one {SWIZZLE_ROW_BYTES}-byte swizzle row of k")
        });
        v.require(self.out_rows == 64, || {
            "a staged chunk is one consumer's 64 rows".into()
        });
        v.require(self.stages >= 2, || {
            "the ring needs at least two stages".into()
        });
        v.registers(
            self.producer_registers,
            self.consumers,
            self.consumer_registers,
        );
        for &staging in stagings {
            v.shared_bytes(self.shared_bytes(staging));
        }
        v.into_lines()
    }

    /// The kernel file's defines under `prefix` (`GEMM_WG`): the tile, and the shared memory
    /// the host gives with the registers' epilogue (`SHARED_BYTES`) and the TMA stores'
    /// (`TMA_STORE_SHARED_BYTES`).
    pub fn defines(&self, prefix: &str) -> Vec<String> {
        Defines::new(prefix)
            .set("BM", self.bm)
            .set("BN", self.bn)
            .set("BK_BYTES", self.k_bytes)
            .set("STAGES", self.stages)
            .set("CONSUMERS", self.consumers)
            .set("OUT_ROWS", self.out_rows)
            .set("PRODUCER_REGISTERS", self.producer_registers)
            .set("CONSUMER_REGISTERS", self.consumer_registers)
            .set("SHARED_BYTES", self.shared_bytes(Staging::Registers))
            .set(
                "TMA_STORE_SHARED_BYTES",
                self.shared_bytes(Staging::TmaStore),
            )
            .into_vec()
    }
}

/// `gemm.cu`'s defines: [`MMA_TILE`] as `GEMM_MMA_*`, [`WG_TILE`] as `GEMM_WG_*`,
/// `wgmma_prefetch_c`'s stages and shared memory ([`WG_PREFETCH_TILE`]), and each narrow tile's
/// ([`WG_NARROW_TILES`]) as `GEMM_WG_N<bn>_*`.
pub fn gemm_defines() -> Vec<String> {
    let mut defines = MMA_TILE.defines("GEMM_MMA");
    defines.extend(WG_TILE.defines("GEMM_WG"));
    defines.extend(
        Defines::new("GEMM_WG")
            .set("PREFETCH_STAGES", WG_PREFETCH_TILE.stages)
            .set(
                "PREFETCH_C_SHARED_BYTES",
                WG_PREFETCH_TILE.shared_bytes(Staging::PrefetchC),
            )
            .into_vec(),
    );
    for tile in &WG_NARROW_TILES {
        defines.extend(
            Defines::new(format_args!("GEMM_WG_N{}", tile.bn))
                .set("STAGES", tile.stages)
                .set(
                    "TMA_STORE_SHARED_BYTES",
                    tile.shared_bytes(Staging::TmaStore),
                )
                .into_vec(),
        );
    }
    defines
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_tile_fits_an_h100() {
        assert_eq!(MMA_TILE.violations(), Vec::<String>::new());
        let stagings = [Staging::Registers, Staging::TmaStore];
        assert_eq!(WG_TILE.violations(&stagings), Vec::<String>::new());
        let prefetch = [Staging::PrefetchC];
        assert_eq!(WG_PREFETCH_TILE.violations(&prefetch), Vec::<String>::new());
        for tile in &WG_NARROW_TILES {
            assert_eq!(tile.violations(&[Staging::TmaStore]), Vec::<String>::new());
        }
    }

    #[test]
    fn the_measured_tiles_keep_their_shared_memory() {
        // 4 stages x 2 operands x 128 rows x 128 bytes.
        assert_eq!(MMA_TILE.shared_bytes(), 128 * 1024);
        // 4 x 48 KiB of stages, 8 barriers, 1 KiB of alignment; + 32 KiB of staging.
        assert_eq!(WG_TILE.shared_bytes(Staging::Registers), 197_696);
        assert_eq!(WG_TILE.shared_bytes(Staging::TmaStore), 230_464);
        // 3 x 48 KiB, 2 consumers x 64 KiB of C, 6 + 2 barriers, 1 KiB.
        assert_eq!(
            WG_PREFETCH_TILE.shared_bytes(Staging::PrefetchC),
            3 * 49_152 + 65_536 + 64 + 1024
        );
        assert_eq!(WG_TILE.threads(), 384);
    }

    #[test]
    fn tiles_that_do_not_fit_are_named() {
        let five = WgTile {
            stages: 5,
            ..WG_TILE
        };
        let lines = five.violations(&[Staging::TmaStore]);
        assert!(
            lines.iter().any(|l| l.contains("shared memory")),
            "{lines:?}"
        );
        let greedy = WgTile {
            consumer_registers: 240,
            ..WG_TILE
        };
        let lines = greedy.violations(&[Staging::Registers]);
        assert!(
            lines.iter().any(|l| l.contains("registers, over")),
            "{lines:?}"
        );
        let three = WgTile {
            consumers: 3,
            ..WG_TILE
        };
        assert!(!three.violations(&[]).is_empty());
        let wide = MmaTile {
            bn: 256,
            ..MMA_TILE
        };
        assert!(
            wide.violations()
                .iter()
                .any(|l| l.contains("bm must equal bn"))
        );
    }

    #[test]
    fn the_defines_carry_every_number() {
        let d = gemm_defines();
        for expected in [
            "-DGEMM_MMA_BM=128",
            "-DGEMM_MMA_SHARED_BYTES=131072",
            "-DGEMM_WG_BN=256",
            "-DGEMM_WG_STAGES=4",
            "-DGEMM_WG_PRODUCER_REGISTERS=40",
            "-DGEMM_WG_SHARED_BYTES=197696",
            "-DGEMM_WG_TMA_STORE_SHARED_BYTES=230464",
            "-DGEMM_WG_PREFETCH_STAGES=3",
            "-DGEMM_WG_PREFETCH_C_SHARED_BYTES=214080",
            "-DGEMM_WG_N192_STAGES=4",
            "-DGEMM_WG_N128_STAGES=6",
            "-DGEMM_WG_N64_STAGES=8",
        ] {
            assert!(d.contains(&expected.to_string()), "{expected} not in {d:?}");
        }
    }
}
