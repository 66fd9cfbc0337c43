//! The row kernels' layout: the one table both sides read. The launchers take their blocks,
//! grids and shared memory from [`LAYOUT`]; `cross_entropy.cu` gets the same numbers as NVRTC
//! defines ([`defines`], `-DCE_...`), stops at an `#error` without them, and `static_assert`s
//! that its own shared-memory layout takes exactly the bytes the launcher gives and that every
//! cluster kernel holds rows of the same longest vocabulary.

use common::gpu::tile::{Defines, SM90_MAX_SHARED_BYTES, SharedLayout, Violations, file_define};

/// 16 bytes: eight bf16 logits, the unit every row kernel loads.
pub const PACK_BYTES: usize = 16;
/// bf16 logits in a pack.
pub const PACK_LOGITS: usize = 8;

/// Shared memory an SM holds for its resident blocks on sm_90 (the per-block limit plus the
/// 1 KiB the hardware keeps per block is within it for the shapes here).
const SM90_SHARED_PER_SM: usize = 228 * 1024;

/// One cluster size of `cluster_stream`: `StreamShape<C>` in the .cu.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamTile {
    /// Blocks of a cluster (a cluster must fit in one GPC).
    pub cluster: usize,
    /// Row slices in flight per block.
    pub stages: usize,
    /// Packs of a block's slice of a row, the most it holds.
    pub slice_packs: usize,
    /// Blocks per SM its launch bounds ask for.
    pub per_sm: usize,
}

impl StreamTile {
    /// Dynamic shared memory of a block: `stages` slices of `slice_packs` packs.
    pub const fn shared_bytes(&self) -> usize {
        SharedLayout::new()
            .region(self.stages * self.slice_packs * PACK_BYTES)
            .bytes()
    }

    /// The longest row a cluster holds: a slice per block.
    pub const fn max_vocab(&self) -> usize {
        self.cluster * self.slice_packs * PACK_LOGITS
    }
}

/// The blocks and shared memory of every kernel of `cross_entropy.cu`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    /// `ce_count_valid_i32` and `ce_mean_loss_f32`: one block whose warps meet in
    /// `block_sum`'s 32 slots.
    pub reduce_threads: usize,
    /// `ce_rows_two_pass_bf16x8`: a block per row.
    pub two_pass_threads: usize,
    /// Blocks of a row's cluster in `cluster8` and `cluster_push`.
    pub cluster_blocks: usize,
    /// `cluster8`: threads a block and packs each thread holds in registers.
    pub cluster_threads: usize,
    pub cluster_packs: usize,
    /// `cluster_stream`: threads a block, and its two cluster sizes.
    pub stream_threads: usize,
    pub stream: [StreamTile; 2],
    /// `cluster_push`: threads a block, packs a thread, blocks per SM.
    pub push_threads: usize,
    pub push_packs: usize,
    pub push_per_sm: usize,
}

/// The measured layout (the notes): cluster8 in 8 blocks of 512 threads with 4 packs each;
/// cluster_stream in clusters of 4 (3 stages of 64 KiB, one block per SM) or 8 (3 stages of
/// 32 KiB, two per SM); cluster_push in blocks of 256 threads with 8 packs each (a 32 KiB
/// slice), 6 per SM. Every cluster kernel holds rows of at most 131072.
pub const LAYOUT: Layout = Layout {
    reduce_threads: 1024,
    two_pass_threads: 1024,
    cluster_blocks: 8,
    cluster_threads: 512,
    cluster_packs: 4,
    stream_threads: 512,
    stream: [
        StreamTile {
            cluster: 4,
            stages: 3,
            slice_packs: 4096,
            per_sm: 1,
        },
        StreamTile {
            cluster: 8,
            stages: 3,
            slice_packs: 2048,
            per_sm: 2,
        },
    ],
    push_threads: 256,
    push_packs: 8,
    push_per_sm: 6,
};

/// The longest row the cluster kernels hold (cluster8's split; the others are checked to
/// hold the same).
pub const CLUSTER_MAX_VOCAB: usize = LAYOUT.cluster_max_vocab();

impl Layout {
    /// cluster8's longest row: blocks x threads x packs x 8 logits.
    pub const fn cluster_max_vocab(&self) -> usize {
        self.cluster_blocks * self.cluster_threads * self.cluster_packs * PACK_LOGITS
    }

    /// cluster_push's longest row.
    pub const fn push_max_vocab(&self) -> usize {
        self.cluster_blocks * self.push_threads * self.push_packs * PACK_LOGITS
    }

    /// cluster_push's dynamic shared memory: a block's slice of its row.
    pub const fn push_shared_bytes(&self) -> usize {
        SharedLayout::new()
            .region(self.push_threads * self.push_packs * PACK_BYTES)
            .bytes()
    }

    /// What stops this layout from compiling or running on an H100, as the kernel's
    /// `static_assert`s check it (one line each; empty when it fits).
    pub fn violations(&self) -> Vec<String> {
        let mut v = Violations::new("cross_entropy.cu");
        for (what, threads) in [
            ("reduce", self.reduce_threads),
            ("two_pass", self.two_pass_threads),
            ("cluster8", self.cluster_threads),
            ("cluster_stream", self.stream_threads),
            ("cluster_push", self.push_threads),
        ] {
            // block_sum and block_row_stats meet in 32 warp slots.
            v.require(
                threads.is_multiple_of(32) && (32..=1024).contains(&threads),
                || format!("{what}: {threads} threads, not whole warps up to 1024"),
            );
        }
        let max = self.cluster_max_vocab();
        v.require(self.cluster_blocks <= 8, || {
            format!(
                "clusters of {}: 8 is the portable most",
                self.cluster_blocks
            )
        });
        v.require(self.push_max_vocab() == max, || {
            format!(
                "cluster_push holds rows of {}, cluster8 of {max}",
                self.push_max_vocab()
            )
        });
        // cluster_push's partials are read by a warp in whole rounds of 32.
        let parts = self.cluster_blocks * self.push_threads / 32;
        v.require(parts.is_multiple_of(32), || {
            format!("cluster_push has {parts} partials a round, not a multiple of 32")
        });
        v.shared_bytes(self.push_shared_bytes());
        v.require(
            self.push_per_sm * self.push_shared_bytes() <= SM90_SHARED_PER_SM,
            || format!("{} cluster_push blocks do not fit an SM", self.push_per_sm),
        );
        for s in &self.stream {
            // cross_entropy.cu instantiates cluster_stream for clusters of 4 and of 8.
            v.require(matches!(s.cluster, 4 | 8), || {
                format!("cluster_stream: no kernel for clusters of {}", s.cluster)
            });
            v.require(s.max_vocab() == max, || {
                format!(
                    "cluster_stream{} holds rows of {}, cluster8 of {max}",
                    s.cluster,
                    s.max_vocab()
                )
            });
            v.require(s.stages >= 1, || {
                "cluster_stream: at least one stage".into()
            });
            v.require(s.shared_bytes() <= SM90_MAX_SHARED_BYTES, || {
                format!(
                    "cluster_stream{}: {} bytes of shared memory, over sm_90's \
                     {SM90_MAX_SHARED_BYTES}",
                    s.cluster,
                    s.shared_bytes()
                )
            });
            v.require(s.per_sm * s.shared_bytes() <= SM90_SHARED_PER_SM, || {
                format!(
                    "{} cluster_stream{} blocks do not fit an SM",
                    s.per_sm, s.cluster
                )
            });
        }
        v.into_lines()
    }

    /// The NVRTC options that give `cross_entropy.cu` this layout.
    pub fn defines(&self) -> Vec<String> {
        let mut defines: Vec<String> = [
            ("REDUCE_THREADS", self.reduce_threads),
            ("TWO_PASS_THREADS", self.two_pass_threads),
            ("CLUSTER_BLOCKS", self.cluster_blocks),
            ("CLUSTER_THREADS", self.cluster_threads),
            ("CLUSTER_PACKS", self.cluster_packs),
            ("MAX_VOCAB", self.cluster_max_vocab()),
            ("STREAM_THREADS", self.stream_threads),
            ("PUSH_THREADS", self.push_threads),
            ("PUSH_PACKS", self.push_packs),
            ("PUSH_PER_SM", self.push_per_sm),
            ("PUSH_SHARED_BYTES", self.push_shared_bytes()),
        ]
        .into_iter()
        .map(|(name, value)| file_define("CE", name, value))
        .collect();
        for s in &self.stream {
            defines.extend(
                Defines::new(format_args!("CE_STREAM{}", s.cluster))
                    .set("STAGES", s.stages)
                    .set("SLICE", s.slice_packs)
                    .set("PER_SM", s.per_sm)
                    .set("SHARED_BYTES", s.shared_bytes())
                    .into_vec(),
            );
        }
        defines
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_layout_fits_an_h100() {
        assert_eq!(LAYOUT.violations(), Vec::<String>::new());
    }

    #[test]
    fn the_measured_layout_keeps_its_numbers() {
        assert_eq!(CLUSTER_MAX_VOCAB, 131072);
        assert_eq!(LAYOUT.push_shared_bytes(), 32 * 1024);
        let shared: Vec<(usize, usize)> = LAYOUT
            .stream
            .iter()
            .map(|s| (s.cluster, s.shared_bytes()))
            .collect();
        assert_eq!(shared, [(4, 3 * 4096 * 16), (8, 3 * 2048 * 16)]);
    }

    #[test]
    fn layouts_that_do_not_fit_are_named() {
        let wide = Layout {
            push_packs: 16,
            ..LAYOUT
        };
        let lines = wide.violations();
        assert!(lines.iter().any(|l| l.contains("cluster_push holds")));
        assert!(lines.iter().any(|l| l.contains("do not fit an SM")));
        let mut deep = LAYOUT;
        deep.stream[1].stages = 8;
        assert!(
            deep.violations()
                .iter()
                .any(|l| l.contains("cluster_stream8: 262144 bytes")),
            "{:?}",
            deep.violations()
        );
        let odd = Layout {
            two_pass_threads: 1000,
            ..LAYOUT
        };
        assert!(odd.violations().iter().any(|l| l.contains("two_pass")));
    }

    #[test]
    fn the_defines_carry_every_number() {
        let d = LAYOUT.defines();
        assert_eq!(d.len(), 11 + 4 * LAYOUT.stream.len());
        for want in [
            "-DCE_TWO_PASS_THREADS=1024",
            "-DCE_MAX_VOCAB=131072",
            "-DCE_PUSH_SHARED_BYTES=32768",
            "-DCE_STREAM4_SLICE=4096",
            "-DCE_STREAM8_SHARED_BYTES=98304",
            "-DCE_STREAM8_PER_SM=2",
        ] {
            assert!(d.iter().any(|x| x == want), "{want} not in {d:?}");
        }
    }
}
