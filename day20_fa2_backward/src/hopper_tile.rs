//! `fa_hopper`'s backward tile per head dim: the one table both sides read, as day 10's forward
//! does (`common::gpu::hopper_tile` holds what both check). The launcher takes its block, its
//! shared memory, its query tiles and its TMA boxes from [`BackwardTile`]; `fa_hopper_bwd.cu`
//! gets the same numbers as NVRTC defines ([`hopper_defines`]) and its shared memory as the
//! struct [`BackwardTile::storage`] writes into `fa_hopper_bwd_params.cuh`, and `static_assert`s
//! that the struct's members are the defines' tile. Compiled without the defines, it stops at an
//! `#error`.

use common::gpu::shared_storage::{F32_BOXES, F32_TILE, SharedStorage};
use common::gpu::tile::{Defines, SETMAXNREG_MIN, Violations, WARPGROUP_THREADS, file_define};

/// Consumer warpgroups per block: each owns 64 of the block's keys, or (split head dim) half
/// of the queries of a step and half of the columns of dK, dV and dQ.
pub const CONSUMERS: usize = 2;

/// dS^T buffers in shared memory: with two, the consumers meet once per step (a buffer is
/// rewritten two steps later, after every reader of it has passed a later meeting).
pub const DS_STAGES: usize = 2;

/// Registers each producer thread keeps after `setmaxnreg.dec`: one thread issues the loads,
/// another is the dQ writer. The block is launched with 168 registers a thread (384 threads
/// share the SM's 64 K, in multiples of 8), and `setmaxnreg.inc` waits until the block's own
/// pool has the registers it asks for: 24 + 2 x 240 warpgroup-threads' worth is exactly that
/// pool, so the producer cannot keep more while the consumers take 240.
pub const PRODUCER_REGISTERS: usize = SETMAXNREG_MIN;

/// Query rows per block of the preprocess kernel (D and L transposed, dQ's accumulator
/// zeroed), which sets its grid: enough that a block keeps many of O's and dO's loads in
/// flight (up to four passes' before the first is used), which a warp per row did not at
/// head dim 64.
pub const PREPROCESS_ROWS: usize = 64;

/// Threads per block of the preprocess kernel: a row's 16-byte pieces on neighbouring
/// threads, `PREPROCESS_THREADS / (head dim / 8)` rows a pass.
pub const PREPROCESS_THREADS: usize = 256;

/// Prefix of the defines `fa_hopper_bwd.cu` reads.
const PREFIX: &str = "BH";

/// The name of the backward's shared storage template in C (`BhShared<T, D>`).
pub const STORAGE_NAME: &str = "BhShared";

/// What the generated header says of the storage template.
#[cfg(test)]
pub const STORAGE_DOC: &str =
    "fa_hopper_bwd's shared memory per head dim D, one specialization per tile of day 20's
BACKWARD_TILES: K and V, the Q/dO ring, dS^T (and P^T), the dQ tiles (unless dQ goes through
the stage), the L/D ring, the barriers.";

/// f32 columns of one 128-byte swizzle row of a dQ tile.
const DQ_BOX: usize = 32;

/// One head dim's tile of the backward.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BackwardTile {
    pub head_dim: usize,
    /// Keys per block: dK and dV of these keys stay in the consumers' registers for the
    /// kernel. 64 per consumer, or 64 in all where the consumers split the head dim.
    pub keys: usize,
    /// Queries per step: S^T and dP^T are 64 keys x this many queries per consumer.
    pub queries: usize,
    /// Query tiles (Q, dO, L, D) in flight: the ring.
    pub stages: usize,
    /// Registers per consumer thread after `setmaxnreg.inc`.
    pub consumer_registers: usize,
    /// Whether a block goes on to the next tile (one block per SM, each drawing tiles until
    /// none is left) or takes one (a block per tile).
    pub persistent: bool,
    /// Whether each consumer's f32 dQ leaves through the Q/dO stage of its step (its columns
    /// of dO and Q, 64 queries x 128 columns of bf16 or f16 each: the bytes of its 64 x 128
    /// f32 of dQ), free once dV and dK are done, instead of dQ tiles of its own; the dQ
    /// writer hands the stage back to the producer. Head dim 256 only (the split head dim).
    pub dq_in_stage: bool,
}

/// The tiles. Head dim 128: 64 queries per step, so that dK and dV (64 + 64 f32 a thread)
/// and S^T and dP^T (32 + 32) fit beside each other in 240 registers. Head dim 64: 128 queries
/// (dK, dV 32 + 32, S^T, dP^T 64 + 64), so that each product is as wide as head dim 128's.
/// Head dim 256: dK and dV of 64 keys would be 128 + 128 registers, so the block takes 64
/// keys and the consumers split the head dim (dK, dV 64 + 64 each, dQ 64, S^T and dP^T of 32
/// queries 16 + 16); its dQ leaves through the step's spent Q/dO stage, so that the 64 KiB
/// that f32 dQ tiles would take are a second stage. Head dims 64 and 128 run persistent
/// blocks: the next tile's K and V load while a tile's dK and dV leave. Head dim 256 takes a
/// block per tile (the kernel's one-tile form): when it had one Q/dO stage, its persistent
/// blocks measured 2% to 5% slower at 16384 tokens.
pub const BACKWARD_TILES: [BackwardTile; 3] = [
    BackwardTile {
        head_dim: 64,
        keys: 128,
        queries: 128,
        stages: 2,
        consumer_registers: 240,
        persistent: true,
        dq_in_stage: false,
    },
    BackwardTile {
        head_dim: 128,
        keys: 128,
        queries: 64,
        stages: 2,
        consumer_registers: 240,
        persistent: true,
        dq_in_stage: false,
    },
    BackwardTile {
        head_dim: 256,
        keys: 64,
        queries: 64,
        stages: 2,
        consumer_registers: 240,
        persistent: false,
        dq_in_stage: true,
    },
];

impl BackwardTile {
    /// The tile for head dim `d`, if `fa_hopper`'s backward is compiled for it.
    pub fn for_head_dim(d: usize) -> Option<&'static BackwardTile> {
        BACKWARD_TILES.iter().find(|t| t.head_dim == d)
    }

    /// Whether the consumers share the block's keys and split the head dim (and the queries
    /// of S^T and dP^T) instead of taking 64 keys each.
    pub fn splits_head_dim(&self) -> bool {
        self.keys == 64
    }

    /// Columns of the f32 dQ tile each consumer writes per step: half the head dim when it
    /// is split, 64 otherwise (head dim 128: half the columns; 64: all of half the queries).
    pub fn dq_columns(&self) -> usize {
        if self.splits_head_dim() {
            self.head_dim / 2
        } else {
            64
        }
    }

    /// Threads per block: the producer warpgroup and the consumers.
    pub fn threads(&self) -> usize {
        WARPGROUP_THREADS * (1 + CONSUMERS)
    }

    /// The block's shared memory, as `fa_hopper_bwd.cu` reads it (the struct
    /// `BhShared<T, D>` that [`SharedStorage::c_declaration`] writes from this): K and V, the
    /// ring of Q and dO (16-bit, in boxes of 64 dims, as the TMA writes them), the dS^T
    /// buffers (and as many of P^T when the head dim is split), each consumer's f32 dQ tile
    /// (64 x [`Self::dq_columns`]; none when dQ leaves through the stage), the ring of L and D
    /// (f32), the barriers.
    pub fn storage(&self) -> SharedStorage {
        let (d, bm, bn, stages) = (self.head_dim, self.queries, self.keys, self.stages);
        let (q_doc, q_empty_doc) = if self.dq_in_stage {
            (
                "Q: [stage][64-dim box][query][dim]; once the step's products are done, dQ too",
                "Per stage: the dQ writer's TMA has read the step's dQ",
            )
        } else {
            (
                "Q: [stage][64-dim box][query][dim]",
                "Per stage: every consumer warp is done with it",
            )
        };
        let storage = SharedStorage::new(STORAGE_NAME, d)
            .tiles("k", "K: [1][64-dim box][key][dim]", 1, bn, d)
            .tiles("v", "V, as K", 1, bn, d)
            .tiles("q", q_doc, stages, bm, d)
            .tiles("d_o", "dO, as Q", stages, bm, d)
            .tiles(
                "ds",
                "dS^T: [buffer][64-query box][key][query], the A operand of dQ = dS K",
                DS_STAGES,
                bn,
                bm,
            );
        let storage = if self.splits_head_dim() {
            storage.tiles(
                "pt",
                "P^T, as dS^T (split head dim only: the A operand of dV += P^T dO)",
                DS_STAGES,
                bn,
                bm,
            )
        } else {
            storage
        };
        let storage = if self.dq_in_stage {
            storage
        } else {
            storage.member(
                "dq",
                "dQ: [consumer][32-column box][query][column], f32, read by the TMA's reduce-adds",
                F32_TILE,
                &[CONSUMERS, self.dq_columns() / DQ_BOX, 64, DQ_BOX],
            )
        };
        let storage = storage
            .member(
                "lse2",
                "L in log2 units: [stage][query]",
                F32_BOXES,
                &[stages, bm],
            )
            .member(
                "delta",
                "D = rowsum(dO * O): [stage][query]",
                F32_BOXES,
                &[stages, bm],
            )
            .barriers("kv_full", "K and V have arrived", 1)
            .barriers("q_full", "Per stage: Q, dO, L and D have arrived", stages)
            .barriers("q_empty", q_empty_doc, stages)
            .barriers(
                "dq_full",
                "Per consumer (dQ through the stage: per stage and consumer): its dQ is written",
                CONSUMERS * if self.dq_in_stage { stages } else { 1 },
            );
        let storage = if self.dq_in_stage {
            storage
        } else {
            storage.barriers(
                "dq_empty",
                "Per consumer: the TMA has read its dQ tile",
                CONSUMERS,
            )
        };
        if !self.persistent {
            return storage;
        }
        storage
            .barriers(
                "kv_empty",
                "Persistent: every product of the tile is done with K and V",
                1,
            )
            .barriers(
                "tile_full",
                "Persistent: the producer has written the next tile's number",
                1,
            )
            .barriers("tile_empty", "Persistent: every reader has read it", 1)
            .member(
                "tile_slot",
                "Persistent: the next tile's number, -1 when there is none (the producer draws them)",
                ("int", 4, 4),
                &[1],
            )
    }

    /// The dynamic shared memory a block is launched with: [`Self::storage`] and the slack
    /// that aligns it to the swizzle's 1024-byte period.
    pub fn shared_bytes(&self) -> usize {
        self.storage().launch_bytes()
    }

    /// What stops this tile from compiling or running on an H100, as the kernel's
    /// `static_assert`s check it (one line each; empty when it fits).
    pub fn violations(&self) -> Vec<String> {
        let (d, bm) = (self.head_dim, self.queries);
        let mut v = Violations::new(format_args!("head dim {d}"));
        v.whole_boxes("head dim", d);
        // dQ is split between the two consumers: at head dim 128 each takes 64 columns of
        // the 64 queries, at 64 each takes all columns of its 64 of the 128 queries, with the
        // head dim split each takes half the columns of the 64 queries.
        let (keys, queries) = match d {
            64 => (64 * CONSUMERS, 128),
            128 => (64 * CONSUMERS, 64),
            256 => (64, 64),
            _ => (0, 0),
        };
        v.require(self.keys == keys, || {
            format!(
                "{} keys per block: 64 per consumer at head dims 64 and 128, 64 shared by both \
                 (the head dim split) at 256",
                self.keys
            )
        });
        v.require(bm == queries, || {
            format!(
                "{bm} queries per step: dQ's split between the consumers takes 64 at head dims \
                 128 and 256 and 128 at 64"
            )
        });
        v.require(self.stages >= 1, || {
            "at least one query tile in flight".into()
        });
        // A persistent block stages dK and dV in the dQ tiles (head dim 128); a consumer's
        // columns of a stage hold its dQ only where it owns half the head dim.
        v.require(
            !self.dq_in_stage || (self.splits_head_dim() && !self.persistent),
            || "dQ through the stage: the split head dim's one-tile form only".into(),
        );
        // The dQ writer finds a step's stage as the step's parity.
        v.require(!self.dq_in_stage || self.stages == 2, || {
            format!(
                "{} Q/dO stages: dQ through the stage takes two",
                self.stages
            )
        });
        v.registers(PRODUCER_REGISTERS, CONSUMERS, self.consumer_registers);
        // dK and dV (d / 2 each, or d / 4 split), S^T and dP^T (bm / 2 each, or bm / 4
        // split) live at once while dS is made.
        let live = if self.splits_head_dim() {
            (d + bm) / 2
        } else {
            d + bm
        };
        v.require(live < self.consumer_registers, || {
            format!(
                "{live} accumulator registers per consumer thread, not under {}",
                self.consumer_registers
            )
        });
        v.shared_bytes(self.shared_bytes());
        v.into_lines()
    }

    fn defines(&self) -> Vec<String> {
        Defines::tile(PREFIX, self.head_dim)
            .set("KEYS", self.keys)
            .set("QUERIES", self.queries)
            .set("STAGES", self.stages)
            .set("REGISTERS", self.consumer_registers)
            .set("PERSISTENT", usize::from(self.persistent))
            .set("DQ_IN_STAGE", usize::from(self.dq_in_stage))
            .into_vec()
    }
}

/// The NVRTC options that give `fa_hopper_bwd.cu` its tiles: the block's shape and every
/// tile's defines.
pub fn hopper_defines() -> Vec<String> {
    let mut defines = vec![
        file_define(PREFIX, "CONSUMERS", CONSUMERS),
        file_define(PREFIX, "DS_STAGES", DS_STAGES),
        file_define(PREFIX, "PRODUCER_REGISTERS", PRODUCER_REGISTERS),
        file_define(PREFIX, "PREPROCESS_ROWS", PREPROCESS_ROWS),
        file_define(PREFIX, "PREPROCESS_THREADS", PREPROCESS_THREADS),
    ];
    for tile in &BACKWARD_TILES {
        defines.extend(tile.defines());
    }
    defines
}

#[cfg(test)]
mod tests {
    use super::*;
    use common::testing::assert_violation;

    #[test]
    fn every_tile_fits_an_h100() {
        for tile in &BACKWARD_TILES {
            assert_eq!(tile.violations(), Vec::<String>::new(), "{tile:?}");
        }
        let dims: Vec<usize> = BACKWARD_TILES.iter().map(|t| t.head_dim).collect();
        assert_eq!(
            dims,
            day10::hopper_head_dims(),
            "the forward's head dims, each with a backward"
        );
    }

    #[test]
    fn the_layouts_add_up() {
        // Head dim 128: K, V 2 x 32 KiB; Q, dO 2 x 2 x 16 KiB; dS^T 2 x 16 KiB; dQ 2 x 16 KiB;
        // L, D 2 x 2 x 256 B; 10 barriers: 197,712 bytes, rounded up to the tiles' 1 KiB, and 1
        // KiB of slack.
        let d128 = BackwardTile::for_head_dim(128).unwrap();
        assert_eq!(d128.storage().offset("kv_full"), 192 * 1024 + 1024);
        assert_eq!(d128.shared_bytes(), 194 * 1024 + 1024);
        assert_eq!(d128.threads(), 384);
        // Head dim 64: K, V 2 x 16 KiB; Q, dO 2 x 2 x 16 KiB; dS^T 2 x 32 KiB; dQ 2 x 16 KiB.
        let d64 = BackwardTile::for_head_dim(64).unwrap();
        assert_eq!(d64.storage().offset("dq_empty"), 192 * 1024 + 2048 + 56);
        assert_eq!(d64.shared_bytes(), 195 * 1024 + 1024);
        // Head dim 256: K, V 2 x 32 KiB; Q, dO 2 x 2 x 32 KiB; dS^T and P^T 4 x 8 KiB; no dQ
        // tiles (dQ leaves through the stage); L, D 2 x 2 x 256 B; 9 barriers (a block per
        // tile: none for the tiles): every byte of the 227 KiB a block may have.
        let d256 = BackwardTile::for_head_dim(256).unwrap();
        assert!(d256.splits_head_dim() && !d128.splits_head_dim());
        assert_eq!(d256.storage().offset("pt"), 208 * 1024);
        assert_eq!(d256.shared_bytes(), 226 * 1024 + 1024);
        assert!(BackwardTile::for_head_dim(96).is_none());
    }

    #[test]
    fn tiles_that_do_not_fit_are_named() {
        let d128 = *BackwardTile::for_head_dim(128).unwrap();
        let wide = BackwardTile {
            queries: 128,
            ..d128
        };
        assert_violation(&wide.violations(), "128 queries", &wide);
        let deep = BackwardTile {
            stages: 3,
            ..BackwardTile::for_head_dim(64).copied().unwrap()
        };
        assert_violation(&deep.violations(), "shared memory", &deep);
        let many = BackwardTile {
            consumer_registers: 256,
            ..d128
        };
        assert_violation(&many.violations(), "registers, over", &many);
        // dQ through the stage: the dQ writer takes the step's parity for its stage, and only
        // the split head dim's one-tile form has a consumer's dQ in its columns of the stage.
        let d256 = *BackwardTile::for_head_dim(256).unwrap();
        let one_stage = BackwardTile { stages: 1, ..d256 };
        assert_violation(
            &one_stage.violations(),
            "dQ through the stage takes two",
            &one_stage,
        );
        let in_stage = BackwardTile {
            dq_in_stage: true,
            ..d128
        };
        assert_violation(&in_stage.violations(), "one-tile form only", &in_stage);
    }

    #[test]
    fn the_defines_carry_every_tile() {
        let defines = hopper_defines();
        assert_eq!(defines.len(), 5 + 6 * BACKWARD_TILES.len());
        for expected in [
            "-DBH_D128_KEYS=128",
            "-DBH_D256_KEYS=64",
            "-DBH_CONSUMERS=2",
            "-DBH_DS_STAGES=2",
            "-DBH_PRODUCER_REGISTERS=24",
            "-DBH_PREPROCESS_ROWS=64",
            "-DBH_PREPROCESS_THREADS=256",
            "-DBH_D128_QUERIES=64",
            "-DBH_D64_QUERIES=128",
            "-DBH_D128_PERSISTENT=1",
            "-DBH_D256_PERSISTENT=0",
            "-DBH_D256_DQ_IN_STAGE=1",
            "-DBH_D128_DQ_IN_STAGE=0",
        ] {
            assert!(defines.contains(&expected.to_string()), "{expected}");
        }
    }
}
