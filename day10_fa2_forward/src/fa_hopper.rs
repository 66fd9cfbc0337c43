//! `fa_hopper.cu`'s launcher: the Hopper version (wgmma, TMA, warp specialisation), compiled
//! for sm_90a with its tile table's defines ([`crate::hopper_defines`]), on a persistent grid
//! that draws its work items from a ticket counter.

use anyhow::Result;
use common::Element;
use common::family::attention::hopper_refusal;
use common::gpu::kernel::KernelSet;
use common::gpu::kernel_build::KernelBuild;
use common::gpu::nvrtc::KernelSource;
use common::gpu::params::{DeviceIn, DeviceOut};
use common::gpu::tma::{HeadTiles, TensorMap, TmaDescriptor};
use common::reference::attention::AttentionShape;
use common::session::Refused;
use common::{Gpu, Kernel, LaunchShape};
use cudarc::driver::CudaSlice;

use crate::{DeviceProblem, HOPPER_TILES, HopperTile, Inputs, hopper_defines, hopper_head_dims};

/// The Hopper version, compiled for `sm_90a` (wgmma, TMA, setmaxnreg) on Hopper GPUs only.
/// Its parameter struct comes first, in the header [`params_header`] writes.
pub const HOPPER_SOURCE: KernelSource =
    common::kernel_source!("fa_hopper.cu" = ["fa_hopper_params.cuh", "fa_hopper.cu"]);

/// Every CUDA function of `fa_hopper.cu`: one per dtype and tile.
pub fn hopper_kernel_names() -> Vec<String> {
    let mut names = Vec::new();
    for dtype in ["bf16", "f16"] {
        for tile in &HOPPER_TILES {
            names.push(tile.kernel_name(dtype));
        }
    }
    names
}

/// `fa_hopper.cu`'s kernels, for sm_90a with [`hopper_defines`]: the tiles the launcher sizes
/// its launches from are the ones the kernels were compiled with.
pub(crate) fn hopper_build() -> KernelBuild {
    KernelBuild::hopper(HOPPER_SOURCE, hopper_kernel_names()).with_options(hopper_defines())
}

/// `fa_hopper`'s work items in `tile`: query tiles of the longest sequence x heads x sequences.
/// Its persistent grid (one block per SM) draws them from a counter; items past a shorter
/// sequence's end are skipped.
pub fn hopper_work_items(shape: &AttentionShape, tile: &HopperTile) -> usize {
    let max_q = shape.seqlens_q.iter().copied().max().unwrap_or(0);
    let q_tiles = max_q.div_ceil(tile.block_rows()).max(1);
    q_tiles * shape.heads * shape.batch()
}

common::kernel_params! {
    /// What one launch of fa_hopper is told: the whole batch of one attention forward.
    pub struct FaHopperParams<T> {
        /// Q [tokens, heads, d], K and V [tokens, kv_heads, d] as the TMA reads them, in boxes
        /// of a block's query rows (Q) and a key tile's keys (K, V).
        pub map_q: TmaDescriptor,
        pub map_k: TmaDescriptor,
        pub map_v: TmaDescriptor,
        /// O as the TMA writes it, in boxes of one consumer's 64 query rows: the rows of a
        /// consumer whose 64 rows all lie inside their sequence (with two Q stages).
        pub map_o: TmaDescriptor,
        /// O [tokens, heads, d] and L [tokens, heads], natural log, -inf on a row with no key.
        pub o: DeviceOut<T>,
        pub lse: DeviceOut<f32>,
        /// The sequences' cumulative lengths: batch + 1 of each.
        pub cu_q: DeviceIn<i32>,
        pub cu_k: DeviceIn<i32>,
        pub heads: i32,
        pub kv_heads: i32,
        /// The softmax scale times log2(e).
        pub scale_log2: f32,
        /// 1: the bottom-right causal mask; 0: none.
        pub causal: i32,
        /// Query tiles of the longest sequence, and work items (q_tiles x heads x batch).
        pub q_tiles: i32,
        pub items: i32,
        /// [next ticket, producers done], 0 and 0 between launches.
        pub tickets: DeviceOut<i32>,
    }
}

common::kernel_args! {
    /// `FA_HOPPER_KERNEL`'s entries, `fa_hopper_<T>_d<D>(FaHopperParams<T>)`.
    fn fa_hopper_forward<T>(params: FaHopperParams<T>);
}

/// `fa_hopper`'s kernel and launch shape: one block per SM (or per item, if fewer); refused
/// off Hopper, at a head dim without a tile, or past 2^31 tickets.
pub(crate) fn hopper_launch<'k>(
    hopper: Option<&'k KernelSet>,
    sms: usize,
    dtype: &str,
    problem: &DeviceProblem,
) -> Result<(&'k Kernel, LaunchShape)> {
    let d = problem.shape.head_dim;
    if let Some(refused) = hopper_refusal(hopper.is_some(), d, &hopper_head_dims()) {
        return Err(refused.into());
    }
    let hopper = hopper.expect("loaded, or refused above");
    let tile = problem.hopper_tile().expect("a tile, or refused above");
    let kernel = hopper.get(&tile.kernel_name(dtype))?;
    let items = hopper_work_items(&problem.shape, tile);
    // Tickets run up to items + blocks - 1 in an i32.
    if items + sms > i32::MAX as usize {
        return Err(Refused(format!(
            "fa_hopper: {items} query tiles x heads x sequences are over 2^31"
        ))
        .into());
    }
    // One block per SM, each loading its next item while it computes this one; the items
    // (causal ones differ in cost, longest first) are drawn from a counter, so no block is
    // left with a fixed share of long ones.
    let blocks = items.min(sms);
    let launch = LaunchShape {
        grid: (blocks.max(1) as u32, 1, 1),
        block: (tile.threads() as u32, 1, 1),
        dynamic_shared_bytes: tile.shared_bytes() as u32,
    };
    Ok((kernel, launch))
}

/// What a `fa_hopper` plan prepares once: the tensor maps of Q, K and V (encoded from the
/// plan's inputs) and the counts the kernel walks.
pub(crate) struct HopperArgs {
    map_q: TmaDescriptor,
    map_k: TmaDescriptor,
    map_v: TmaDescriptor,
    /// O's layout, encoded at each launch (O is the launch's, not the plan's).
    o_tiles: HeadTiles,
    q_tiles: i32,
    items: i32,
}

impl HopperArgs {
    pub(crate) fn new<T: Element>(
        gpu: &Gpu,
        problem: &DeviceProblem,
        x: &Inputs<'_, T>,
    ) -> Result<Self> {
        let shape = &problem.shape;
        let d = shape.head_dim;
        let tiles = |tokens: usize, heads: usize, box_tokens: usize| HeadTiles {
            tokens,
            heads,
            dim: d,
            box_tokens: box_tokens as u32,
        };
        // The tile the launch was planned with: Q boxes of the block's rows, K and V boxes of
        // a tile's keys, as `FhShared`'s rings hold them.
        let tile = problem.hopper_tile().expect("planned above");
        let q_tiles = tiles(shape.total_q(), shape.heads, tile.block_rows());
        let kv_tiles = tiles(shape.total_k(), shape.kv_heads, tile.keys);
        Ok(Self {
            map_q: q_tiles.encode(gpu, x.q)?,
            map_k: kv_tiles.encode(gpu, x.k)?,
            map_v: kv_tiles.encode(gpu, x.v)?,
            o_tiles: tiles(shape.total_q(), shape.heads, 64),
            q_tiles: problem.max_q().div_ceil(tile.block_rows()).max(1) as i32,
            items: hopper_work_items(shape, tile) as i32,
        })
    }

    /// One launch: O and L of the whole batch.
    pub(crate) fn launch<T: Element>(
        &self,
        gpu: &Gpu,
        (kernel, launch): (&Kernel, &LaunchShape),
        problem: &DeviceProblem,
        tickets: &CudaSlice<i32>,
        lse: &mut CudaSlice<f32>,
        o: &mut CudaSlice<T>,
    ) -> Result<()> {
        let shape = &problem.shape;
        let scale_log2 = shape.default_scale() as f32 * std::f32::consts::LOG2_E;
        let map_o = self.o_tiles.encode(gpu, &*o)?;
        let params = FaHopperParams {
            map_q: self.map_q,
            map_k: self.map_k,
            map_v: self.map_v,
            map_o,
            o: DeviceOut::of(gpu, o),
            lse: DeviceOut::of(gpu, lse),
            cu_q: DeviceIn::of(gpu, problem.cu_q()),
            cu_k: DeviceIn::of(gpu, problem.cu_k()),
            heads: shape.heads as i32,
            kv_heads: shape.kv_heads as i32,
            scale_log2,
            causal: i32::from(shape.causal),
            q_tiles: self.q_tiles,
            items: self.items,
            tickets: DeviceOut::of_counters(gpu, tickets),
        };
        // SAFETY: the kernel takes FaHopperParams<T> (its header is this declaration's); the
        // maps describe exactly Q, K, V and O (lengths checked by the plan, which borrows Q, K
        // and V for as long as it lives) and the TMA zero-fills past their ends; O and L are
        // written only at rows inside the cumulative lengths (a TMA box of O only where its 64
        // rows are), and outlive the launch (borrowed here); the
        // tickets are two counters, zero between launches on this stream: the layer's, or the
        // caller's for this call (checked to hold two by the plan).
        unsafe { fa_hopper_forward(gpu, kernel, launch, params) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hopper_tile::{HOPPER_TILES, STORAGE_DOC, STORAGE_NAME};
    use common::gpu::params::{c_checks, c_declaration, c_header, c_size_check};
    use common::gpu::shared_storage::c_primary;
    use half::{bf16, f16};

    /// The C twins of [`FaHopperParams`] and of each tile's shared storage, as
    /// `fa_hopper_params.cuh` holds them.
    fn params_header() -> String {
        let mut parts = vec![
            c_declaration::<FaHopperParams<bf16>>(),
            c_checks::<FaHopperParams<bf16>>() + &c_size_check::<FaHopperParams<f16>>(),
            "#include \"attention.cuh\"  // ItemSlot\n".to_string(),
            c_primary(STORAGE_NAME, STORAGE_DOC, "int D, int NC"),
        ];
        for tile in &HOPPER_TILES {
            let storage = tile.storage();
            parts.push(storage.c_declaration() + &storage.c_checks());
        }
        c_header(
            &[
                "the kernel_params! declarations in day10_fa2_forward/src/fa_hopper.rs",
                "the tile table (HOPPER_TILES) in day10_fa2_forward/src/hopper_tile.rs",
            ],
            &parts,
        )
    }

    /// ptxas's C7510-C7520: "wgmma.mma_async instructions are serialized" (each product then
    /// waits for the one before). Issuing one step's two products in a different order on
    /// two branches did that and measured about 30% slower at every length on the H100.
    #[test]
    fn the_hopper_version_keeps_wgmma_asynchronous() {
        common::testing::compile_keeping_wgmma_asynchronous(&hopper_build());
    }

    /// The checked-in `fa_hopper_params.cuh` is what [`FaHopperParams`] and the tile table
    /// write.
    #[test]
    fn the_kernels_parameter_struct_is_the_launchers() {
        common::assert_generated_header!("fa_hopper_params.cuh", &params_header());
    }

    /// Without the tile defines `fa_hopper.cu` stops at its `#error`: the kernels cannot be
    /// compiled with tiles other than the launcher's.
    #[test]
    fn the_hopper_version_will_not_compile_without_the_tile_defines() {
        common::testing::assert_needs_its_defines(&HOPPER_SOURCE, "sm_90a", "HopperTile");
    }
}
