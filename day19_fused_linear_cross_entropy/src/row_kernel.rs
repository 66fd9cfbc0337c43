//! The row kernels of `cross_entropy.cu`, the versions of cross-entropy alone: which rows
//! each takes, which the fused loop uses, and their launch shapes (from the layout table,
//! [`crate::tile::LAYOUT`]).

use common::LaunchShape;

use crate::tile::{CLUSTER_MAX_VOCAB, LAYOUT, PACK_LOGITS};

common::versions! {
    /// Which row kernel computes the loss and writes the gradient: the versions of
    /// cross-entropy alone, in table order.
    pub enum RowKernel {
        /// A block per row, two passes over it (the second from L2 when it can).
        TwoPass => "two_pass",
        /// A row over a cluster of 8 blocks, kept in registers: one read, one write.
        Cluster8 => "cluster8",
        /// Cluster8's split in 16 persistent clusters, the next rows' slices loading into
        /// shared memory while this one is written.
        ClusterStream => "cluster_stream",
        /// Cluster8's split, each block's slice brought into shared memory by one bulk copy
        /// and the statistics pushed into every block of the cluster (st.async) instead of
        /// read after cluster barriers: blocks of 256 threads, 6 per SM.
        ClusterPush => "cluster_push",
    }
}

impl RowKernel {
    pub(crate) fn function(self) -> &'static str {
        match self {
            Self::TwoPass => "ce_rows_two_pass_bf16x8",
            Self::Cluster8 => "ce_rows_cluster8_bf16x8",
            // Compiled for clusters of 4 and of 8; `CrossEntropy::row_launch` picks one.
            Self::ClusterStream => "ce_rows_cluster_stream8_bf16x8",
            Self::ClusterPush => "ce_rows_cluster_push_bf16x8",
        }
    }

    /// Why this kernel cannot take rows of `vocab`, if it cannot.
    pub fn refusal(self, vocab: usize) -> Option<String> {
        match self {
            Self::TwoPass => None,
            Self::Cluster8 if !vocab.is_multiple_of(8) => Some(format!(
                "cluster8 needs rows on 16-byte boundaries (V a multiple of 8); V = {vocab}"
            )),
            Self::Cluster8 if vocab > CLUSTER_MAX_VOCAB => Some(format!(
                "cluster8 holds rows of at most {CLUSTER_MAX_VOCAB} in its cluster; V = {vocab}"
            )),
            Self::Cluster8 => None,
            // The same split and limit (the layout table checks that they hold the same rows).
            Self::ClusterStream | Self::ClusterPush => Self::Cluster8
                .refusal(vocab)
                .map(|why| why.replace("cluster8", self.name())),
        }
    }

    /// The fastest kernel that takes rows of `vocab`: cluster_push for long rows; a block per
    /// row where a row has fewer 16-byte packs than cluster8 has threads (a byte-level model's
    /// 256 entries would give each of cluster8's 4096 threads nothing to load, behind two
    /// cluster barriers: `torch_layers`' small GPT measured it at 0.9 ms a step for 8192 rows;
    /// that crossover, 32768, was measured for cluster8 and is kept for cluster_push).
    pub fn best_for(vocab: usize) -> Self {
        let packs = vocab / PACK_LOGITS;
        if packs >= LAYOUT.cluster_blocks * LAYOUT.cluster_threads
            && Self::Cluster8.refusal(vocab).is_none()
        {
            Self::ClusterPush
        } else {
            Self::TwoPass
        }
    }

    /// The launch of the kernels with one block (or cluster) per row; cluster_stream's grid
    /// depends on what the GPU holds (`CrossEntropy::row_launch`).
    pub fn shape(self, rows: usize) -> Option<LaunchShape> {
        let clustered = (rows * LAYOUT.cluster_blocks) as u32;
        match self {
            Self::TwoPass => Some(LaunchShape::linear(
                rows as u32,
                LAYOUT.two_pass_threads as u32,
            )),
            Self::Cluster8 => Some(LaunchShape::linear(
                clustered,
                LAYOUT.cluster_threads as u32,
            )),
            Self::ClusterStream => None,
            Self::ClusterPush => Some(LaunchShape {
                grid: (clustered, 1, 1),
                block: (LAYOUT.push_threads as u32, 1, 1),
                dynamic_shared_bytes: LAYOUT.push_shared_bytes() as u32,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cluster_kernel_refuses_what_it_cannot_hold() {
        assert!(RowKernel::Cluster8.refusal(128256).is_none());
        assert!(RowKernel::Cluster8.refusal(4099).is_some());
        assert!(RowKernel::Cluster8.refusal(CLUSTER_MAX_VOCAB + 8).is_some());
        assert_eq!(RowKernel::best_for(4099), RowKernel::TwoPass);
        assert!(RowKernel::ClusterPush.refusal(CLUSTER_MAX_VOCAB).is_none());
        assert!(
            RowKernel::ClusterPush
                .refusal(CLUSTER_MAX_VOCAB + 8)
                .is_some()
        );
        assert_eq!(RowKernel::best_for(128256), RowKernel::ClusterPush);
        assert_eq!(RowKernel::best_for(32768), RowKernel::ClusterPush);
        assert_eq!(RowKernel::best_for(32000), RowKernel::TwoPass);
        assert_eq!(RowKernel::best_for(256), RowKernel::TwoPass);
        assert_eq!(RowKernel::Cluster8.shape(3).unwrap().grid, (24, 1, 1));
        let push = RowKernel::ClusterPush.shape(3).unwrap();
        assert_eq!((push.grid, push.dynamic_shared_bytes), ((24, 1, 1), 32768));
    }

    #[test]
    fn refusals_name_the_version() {
        let why = RowKernel::ClusterStream.refusal(31).unwrap();
        assert!(
            why.starts_with("cluster_stream needs rows on 16-byte"),
            "{why}"
        );
        let why = RowKernel::ClusterPush
            .refusal(CLUSTER_MAX_VOCAB + 8)
            .unwrap();
        assert!(
            why.starts_with("cluster_push holds rows of at most 131072"),
            "{why}"
        );
    }

    #[test]
    fn the_launch_shapes_are_the_measured_ones() {
        let two = RowKernel::TwoPass.shape(5).unwrap();
        assert_eq!((two.grid, two.block), ((5, 1, 1), (1024, 1, 1)));
        let c8 = RowKernel::Cluster8.shape(5).unwrap();
        assert_eq!((c8.grid, c8.block), ((40, 1, 1), (512, 1, 1)));
        let push = RowKernel::ClusterPush.shape(5).unwrap();
        assert_eq!(push.block, (256, 1, 1));
        assert!(RowKernel::ClusterStream.shape(5).is_none());
    }
}
