//! `fa_hopper`'s tile per head dim: the one table both sides read. The launcher takes its block
//! size, its shared memory and its TMA boxes from [`HopperTile`]; the kernel gets the same
//! numbers as NVRTC defines ([`hopper_defines`]) and its shared memory as the struct
//! [`HopperTile::storage`] writes into `fa_hopper_params.cuh`, and `static_assert`s that the
//! struct's rings are the defines' tile and that the tile fits an SM. Compiled without the
//! defines, `fa_hopper.cu` stops at an `#error`.

use common::gpu::shared_storage::SharedStorage;
use common::gpu::tile::{Defines, SETMAXNREG_MIN, Violations, WARPGROUP_THREADS, file_define};
use common::reference::attention::AttentionShape;

/// Registers each producer thread keeps after `setmaxnreg.dec` (one thread issues every TMA
/// copy; 24 is the instruction's floor).
pub const HOPPER_PRODUCER_REGISTERS: usize = SETMAXNREG_MIN;

/// The name of `fa_hopper`'s shared storage template in C (`FhShared<T, D, NC>`).
pub const STORAGE_NAME: &str = "FhShared";

/// What the generated header says of the storage template.
#[cfg(test)]
pub const STORAGE_DOC: &str =
    "fa_hopper's shared memory per tile (head dim D, NC consumers), one specialization per
tile of day 10's HOPPER_TILES: the Q ring, the K and V rings, their barriers and the item slots.";

/// One tile of `fa_hopper`: a head dim and how its block is cut.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HopperTile {
    pub head_dim: usize,
    /// Consumer warpgroups, 64 query rows each.
    pub consumers: usize,
    /// Keys per K/V tile.
    pub keys: usize,
    /// K/V tiles in flight (the ring).
    pub stages: usize,
    /// Q tiles in flight: with 2 the next item's Q arrives while this one runs, so its first
    /// S can be issued before this item's last P V.
    pub q_stages: usize,
    /// Registers per consumer thread after `setmaxnreg.inc`.
    pub consumer_registers: usize,
    /// Taken instead of the head dim's default tile for a problem whose longest sequence is
    /// short: at most [`SHORT_CAUSAL_MAX_Q`] queries with the causal mask, [`SHORT_MAX_Q`]
    /// without.
    pub short: bool,
}

/// The tiles `fa_hopper` is compiled for: one default per head dim, and head dim 64's
/// `short` one. Head dim 64: three consumers (its softmax costs as much per key tile as
/// 128's, its products half, so more warps overlap them; measured +19%), and two for short
/// problems ([`HopperTile::for_shape`]). Head dim 128: two consumers with 240 registers
/// for 64 O accumulators each. Head dim 256: two consumers again, 128 O accumulators each, and
/// key tiles of 80: Q (64 KiB) and two stages of 128-key K and V tiles (4 x 64 KiB) would need
/// 320 KiB; 80-key ones take 160 KiB, 226 of the 227 KiB with Q and the barriers. Two stages
/// everywhere (three measured no faster at 64 and 128: the producer is never the one waiting).
pub const HOPPER_TILES: [HopperTile; 4] = [
    HopperTile {
        head_dim: 64,
        consumers: 3,
        keys: 128,
        stages: 2,
        q_stages: 2,
        consumer_registers: 160,
        short: false,
    },
    HopperTile {
        head_dim: 64,
        consumers: 2,
        keys: 128,
        stages: 2,
        q_stages: 2,
        consumer_registers: 240,
        short: true,
    },
    HopperTile {
        head_dim: 128,
        consumers: 2,
        keys: 128,
        stages: 2,
        q_stages: 2,
        consumer_registers: 240,
        short: false,
    },
    HopperTile {
        head_dim: 256,
        consumers: 2,
        keys: 80,
        stages: 2,
        q_stages: 1,
        consumer_registers: 240,
        short: false,
    },
];

/// The longest query sequence for which a causal problem at head dim 64 takes the 128-row
/// tile. Its 192-row tile computes the rows of a sequence in whole blocks and every key tile
/// up to a block's last row: at 512 causal it computes 59% of its scores for the mask to keep,
/// where 128 rows compute 80%; the extra consumer gains more only as sequences grow. Measured
/// on an H200 (day 10's notes): 128 rows 1.09x at 512 and 1.14x at 1024, 1.01x at 2048 and 4096,
/// 0.97x at 8192 and 0.95x at 16384.
pub const SHORT_CAUSAL_MAX_Q: usize = 4096;

/// The same without the mask. Every row is computed there, so what the 192-row tile wastes is
/// only the rows past a sequence's end (11% at 512 and 1024); the 128-row tile also writes O
/// through shared memory. Measured on an H200 (day 10's notes): 1.00x at 512, 1.03x at 1024,
/// 0.95x at 2048, 0.96x at 4096.
pub const SHORT_MAX_Q: usize = 1024;

impl HopperTile {
    /// The default tile for head dim `d`, if `fa_hopper` is compiled for it.
    pub fn for_head_dim(d: usize) -> Option<&'static HopperTile> {
        Self::all_for_head_dim(d).find(|t| !t.short)
    }

    /// The tile `fa_hopper` runs `shape` with: the head dim's `short` tile, if it has one, for
    /// a problem whose longest sequence has at most [`SHORT_CAUSAL_MAX_Q`] queries (causal) or
    /// [`SHORT_MAX_Q`] (no mask); else its default.
    pub fn for_shape(shape: &AttentionShape) -> Option<&'static HopperTile> {
        let max_q = shape.seqlens_q.iter().copied().max().unwrap_or(0);
        let short_max_q = if shape.causal {
            SHORT_CAUSAL_MAX_Q
        } else {
            SHORT_MAX_Q
        };
        let short = max_q <= short_max_q;
        let d = shape.head_dim;
        let chosen = Self::all_for_head_dim(d).find(|t| short && t.short);
        chosen.or_else(|| Self::for_head_dim(d))
    }

    /// The tiles of head dim `d`.
    pub fn all_for_head_dim(d: usize) -> impl Iterator<Item = &'static HopperTile> {
        HOPPER_TILES.iter().filter(move |t| t.head_dim == d)
    }

    /// The kernel of this tile for elements named `dtype`: `fa_hopper_bf16_d64_c3`.
    pub fn kernel_name(&self, dtype: &str) -> String {
        format!("fa_hopper_{dtype}_d{}_c{}", self.head_dim, self.consumers)
    }

    /// Query rows per block (and per work item): 64 per consumer.
    pub fn block_rows(&self) -> usize {
        64 * self.consumers
    }

    /// Threads per block: the producer warpgroup and the consumers.
    pub fn threads(&self) -> usize {
        WARPGROUP_THREADS * (1 + self.consumers)
    }

    /// The block's shared memory: the Q ring (a tile of block rows per Q stage), the K ring
    /// and the V ring (a tile of keys per stage), all 16-bit as the TMA writes them, in boxes
    /// of 64 dims; the barriers; one item slot per Q stage. `fa_hopper.cu` reads it as the
    /// struct `FhShared<T, D, NC>` that [`SharedStorage::c_declaration`] writes from this.
    pub fn storage(&self) -> SharedStorage {
        let d = self.head_dim;
        SharedStorage::keyed(STORAGE_NAME, &[d, self.consumers])
            .tiles(
                "q",
                "Q: [Q stage][64-dim box][query row][dim]",
                self.q_stages,
                self.block_rows(),
                d,
            )
            .tiles(
                "k",
                "K: [stage][64-dim box][key][dim]",
                self.stages,
                self.keys,
                d,
            )
            .tiles("v", "V, as K", self.stages, self.keys, d)
            .barriers(
                "q_full",
                "Per Q stage: the item's Q has arrived (the producer's arrival + the TMA's bytes)",
                self.q_stages,
            )
            .barriers(
                "q_empty",
                "Per Q stage: every consumer warp is done with its Q and its slot",
                self.q_stages,
            )
            .barriers("k_full", "Per stage: K has arrived", self.stages)
            .barriers("v_full", "Per stage: V has arrived", self.stages)
            .barriers(
                "k_empty",
                "Per stage: every consumer's S products read K",
                self.stages,
            )
            .barriers(
                "v_empty",
                "Per stage: every consumer's P V products read V",
                self.stages,
            )
            .member(
                "slots",
                "Per Q stage: the item the producer hands the consumers (attention.cuh)",
                ("ItemSlot", 32, 16),
                &[self.q_stages],
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
        let d = self.head_dim;
        let mut v = Violations::new(format_args!("head dim {d}, {} consumers", self.consumers));
        v.whole_boxes("head dim", d);
        v.require((1..=4).contains(&self.consumers), || {
            format!(
                "{} consumers: a TMA box of Q is at most 256 rows (4 consumers)",
                self.consumers
            )
        });
        // P V steps 16 keys at a time; S = Q K^T is one wgmma of N = keys, which hopper.cuh
        // has for N = 64, 80, 128 and 256 (a K box of `keys` rows of 128 bytes then also
        // stays on the swizzle's 1024-byte period, and within the TMA's 256 rows).
        v.require([64, 80, 128, 256].contains(&self.keys), || {
            format!(
                "{} keys per tile: S is one wgmma of N = keys, which hopper.cuh has for 64, \
                 80, 128 and 256",
                self.keys
            )
        });
        v.require(self.stages >= 1, || "at least one K/V stage".into());
        v.require(self.q_stages >= 1, || "at least one Q stage".into());
        v.registers(
            HOPPER_PRODUCER_REGISTERS,
            self.consumers,
            self.consumer_registers,
        );
        // O's accumulators (d / 2 per thread) and S's (keys / 2) must both fit, with P in 16
        // bits (keys / 4: two keys a register) beside them while the previous tile's P V runs.
        let live = d / 2 + self.keys / 2 + self.keys / 4;
        v.require(live < self.consumer_registers, || {
            format!(
                "{live} accumulator and P registers per consumer thread, not under {}",
                self.consumer_registers
            )
        });
        v.shared_bytes(self.shared_bytes());
        v.into_lines()
    }

    /// This tile's NVRTC defines, as `fa_hopper.cu` reads them.
    fn defines(&self) -> Vec<String> {
        Defines::new(format!("FH_D{}_C{}", self.head_dim, self.consumers))
            .set("CONSUMERS", self.consumers)
            .set("KEYS", self.keys)
            .set("STAGES", self.stages)
            .set("Q_STAGES", self.q_stages)
            .set("REGISTERS", self.consumer_registers)
            .into_vec()
    }
}

/// The NVRTC options that give `fa_hopper.cu` its tiles: every tile's defines and the
/// producer's registers.
pub fn hopper_defines() -> Vec<String> {
    let mut defines = vec![file_define(
        "FH",
        "PRODUCER_REGISTERS",
        HOPPER_PRODUCER_REGISTERS,
    )];
    for tile in &HOPPER_TILES {
        defines.extend(tile.defines());
    }
    defines
}

/// The head dims `fa_hopper` is compiled for.
pub fn hopper_head_dims() -> Vec<usize> {
    let mut dims: Vec<usize> = HOPPER_TILES.iter().map(|t| t.head_dim).collect();
    dims.dedup();
    dims
}

#[cfg(test)]
mod tests {
    use super::*;
    use common::testing::assert_violation;

    #[test]
    fn every_tile_fits_an_h100() {
        for tile in &HOPPER_TILES {
            assert_eq!(tile.violations(), Vec::<String>::new(), "{tile:?}");
        }
        let dims = hopper_head_dims();
        assert_eq!(dims, [64, 128, 256]);
    }

    #[test]
    fn the_measured_tiles_keep_their_numbers() {
        // Head dims 64 and 128 are the measured configuration (the notes): the move to one
        // table must not have changed them.
        let d64 = HopperTile::for_head_dim(64).unwrap();
        assert_eq!(
            (d64.consumers, d64.keys, d64.stages, d64.consumer_registers),
            (3, 128, 2, 160)
        );
        assert_eq!(
            (d64.block_rows(), d64.threads(), d64.shared_bytes()),
            (192, 512, 116_736)
        );
        let d128 = HopperTile::for_head_dim(128).unwrap();
        assert_eq!(
            (
                d128.consumers,
                d128.keys,
                d128.stages,
                d128.consumer_registers
            ),
            (2, 128, 2, 240)
        );
        assert_eq!(
            (d128.block_rows(), d128.threads(), d128.shared_bytes()),
            (128, 384, 198_656)
        );
        // Head dim 256: one Q stage of 64 KiB + K and V 2 x 2 x 40 KiB (80 keys), then 80
        // bytes of barriers and one 32-byte item slot, the struct rounded up to its tiles' 1
        // KiB, + 1 KiB of alignment slack: 226 KiB of the 227 a block may have.
        let d256 = HopperTile::for_head_dim(256).unwrap();
        assert_eq!((d256.block_rows(), d256.threads()), (128, 384));
        let storage = d256.storage();
        assert_eq!(storage.offset("k_full"), 224 * 1024 + 16);
        assert_eq!(storage.offset("slots"), 224 * 1024 + 80);
        assert_eq!(d256.shared_bytes(), 225 * 1024 + 1024);
        assert!(HopperTile::for_head_dim(96).is_none());
    }

    #[test]
    fn tiles_that_do_not_fit_are_named() {
        let d256 = *HopperTile::for_head_dim(256).unwrap();
        // 128-key tiles at head dim 256: 256 KiB of K and V alone.
        let wide = HopperTile { keys: 128, ..d256 };
        assert_violation(&wide.violations(), "shared memory", &wide);
        // Three consumers of 240 registers: 3072 + 92160 registers.
        let three = HopperTile {
            consumers: 3,
            ..d256
        };
        assert_violation(&three.violations(), "registers, over", &three);
        let odd = HopperTile { keys: 96, ..d256 };
        assert_violation(&odd.violations(), "96 keys", &odd);
        let narrow = HopperTile {
            head_dim: 96,
            ..d256
        };
        assert_violation(&narrow.violations(), "TMA boxes", &narrow);
        let few = HopperTile {
            consumer_registers: 164,
            ..d256
        };
        assert_violation(&few.violations(), "setmaxnreg", &few);
    }

    #[test]
    fn the_defines_carry_every_tile() {
        let defines = hopper_defines();
        assert_eq!(defines.len(), 1 + 5 * HOPPER_TILES.len());
        assert!(defines.contains(&"-DFH_PRODUCER_REGISTERS=24".to_string()));
        assert!(defines.contains(&"-DFH_D256_C2_KEYS=80".to_string()));
        assert!(defines.contains(&"-DFH_D256_C2_Q_STAGES=1".to_string()));
        assert!(defines.contains(&"-DFH_D64_C3_CONSUMERS=3".to_string()));
        assert!(defines.contains(&"-DFH_D64_C2_REGISTERS=240".to_string()));
    }

    #[test]
    fn head_dim_64_takes_128_rows_on_short_problems() {
        let shape = |seqlen, causal| AttentionShape::uniform(2, seqlen, seqlen, 4, 4, 64, causal);
        let consumers = |s: &AttentionShape| HopperTile::for_shape(s).unwrap().consumers;
        assert_eq!(consumers(&shape(512, true)), 2);
        assert_eq!(consumers(&shape(SHORT_CAUSAL_MAX_Q, true)), 2);
        assert_eq!(consumers(&shape(SHORT_CAUSAL_MAX_Q + 1, true)), 3);
        assert_eq!(consumers(&shape(SHORT_MAX_Q, false)), 2);
        assert_eq!(consumers(&shape(SHORT_MAX_Q + 1, false)), 3);
        let hd128 = AttentionShape::uniform(2, 512, 512, 4, 4, 128, true);
        assert_eq!(HopperTile::for_shape(&hd128).unwrap().consumers, 2);
        assert_eq!(HopperTile::all_for_head_dim(64).count(), 2);
        assert_eq!(
            HopperTile::for_head_dim(64).unwrap().kernel_name("bf16"),
            "fa_hopper_bf16_d64_c3"
        );
    }
}
