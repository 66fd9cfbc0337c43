//! `fa_hopper_bwd.cu`'s launcher: the Hopper backward (wgmma, TMA, warp specialisation),
//! compiled for sm_90a with its tile table's defines ([`crate::hopper_defines`]): L and D
//! transposed first, then persistent blocks that draw key tiles from a counter (head dim 256:
//! a block per tile) and send dQ out by TMA reduce-adds, then dQ converted.

use anyhow::{Result, bail};
use common::Element;
use common::family::attention::hopper_refusal;
use common::gpu::kernel::KernelSet;
use common::gpu::kernel_build::KernelBuild;
use common::gpu::nvrtc::KernelSource;
use common::gpu::params::{DeviceIn, DeviceOut};
use common::gpu::require_16_byte_start;
use common::gpu::tma::{HeadTiles, RowSpans, TensorMap, TmaDescriptor};
use common::reference::attention::AttentionShape;
use common::session::Refused;
use common::{Gpu, Kernel, LaunchShape};
use cudarc::driver::CudaSlice;

use crate::attention_bwd::ConvertDq;
use crate::{
    BACKWARD_TILES, BackwardProblem, BackwardTensors, BackwardTile, Mode, PREPROCESS_ROWS,
    PREPROCESS_THREADS, Workspace, hopper_defines,
};

/// The Hopper version, compiled for `sm_90a` (wgmma, TMA, setmaxnreg) on Hopper GPUs only.
/// Its parameter struct comes first, in the header `fa_hopper_bwd_params.cuh`, which
/// [`FaHopperBwdParams`] writes.
pub const HOPPER_SOURCE: KernelSource =
    common::kernel_source!("fa_hopper_bwd.cu" = ["fa_hopper_bwd_params.cuh", "fa_hopper_bwd.cu"]);

/// Every CUDA function of `fa_hopper_bwd.cu`.
pub fn hopper_kernel_names() -> Vec<String> {
    let mut names = Vec::new();
    for dtype in ["bf16", "f16"] {
        names.push(format!("fa_hopper_bwd_preprocess_{dtype}"));
        for tile in &BACKWARD_TILES {
            names.push(format!("fa_hopper_bwd_{dtype}_d{}", tile.head_dim));
        }
    }
    names
}

/// `fa_hopper_bwd.cu`'s kernels, for sm_90a.
pub(crate) fn hopper_build() -> KernelBuild {
    KernelBuild::hopper(HOPPER_SOURCE, hopper_kernel_names()).with_options(hopper_defines())
}

/// `fa_hopper`'s tile for head dim `d` (callers have checked that the version takes `d`).
fn hopper_tile(d: usize) -> &'static BackwardTile {
    BackwardTile::for_head_dim(d).expect("every flash head dim has a backward tile")
}

/// Floats per row (one head of one sequence) of the transposed L and D: the longest sequence
/// rounded up to 16 bytes, so that every row, and every query tile in it, starts 16-byte
/// aligned (the TMA requires it of a box's innermost coordinate).
pub(crate) fn hopper_pitch(max_q: usize) -> usize {
    max_q.div_ceil(4).max(1) * 4
}

/// `fa_hopper`'s tiles, as a grid: a key tile of the longest sequence, kv head and sequence
/// each (each walks the query tiles of its sequence). The persistent blocks take them in the
/// order a grid of this shape numbers its blocks. The shape's head dim must have a tile.
pub fn hopper_grid(shape: &AttentionShape) -> (u32, u32, u32) {
    let max_k = shape.seqlens_k.iter().copied().max().unwrap_or(0);
    (
        max_k.div_ceil(hopper_tile(shape.head_dim).keys).max(1) as u32,
        shape.kv_heads as u32,
        shape.batch() as u32,
    )
}

/// The L2 bytes `fa_hopper`'s block order fills a section of kv heads up to: the Q, dO and
/// f32 dQ of the heads whose blocks run side by side (of the H100's 50 MiB, room for the K
/// and V tiles being read).
const SECTION_L2_BYTES: usize = 40 << 20;

/// The kv heads per section of `fa_hopper`'s block order: blocks are numbered kv head fastest
/// within a section (a wave holds few key tiles of many heads: the deterministic mode's
/// ordered dQ adds form short chains, and in either mode the heads' Q and dO are read by
/// blocks running side by side), and a section's heads read at most
/// [`SECTION_L2_BYTES`] of Q, dO and dQ (a power of two, at least one head, at
/// most all of them).
pub fn head_section(shape: &AttentionShape, max_q: usize) -> usize {
    let group = shape.heads / shape.kv_heads.max(1);
    let per_kv_head = (group * max_q * shape.head_dim * (2 + 2 + 4)).max(1);
    let fits = (SECTION_L2_BYTES / per_kv_head).max(1);
    let power_of_two = 1 << fits.ilog2();
    power_of_two.min(shape.kv_heads).max(1)
}

common::kernel_args! {
    /// `fa_hopper_bwd_preprocess_<T>(o, d_o, lse, delta_t, lse2_t, dq_accum, cu_q, d, pitch)`
    fn bh_preprocess<T>(
        o: &CudaSlice<T>,
        d_o: &CudaSlice<T>,
        lse: &CudaSlice<f32>,
        delta_t: &mut CudaSlice<f32>,
        lse2_t: &mut CudaSlice<f32>,
        dq_accum: &mut CudaSlice<f32>,
        cu_q: &CudaSlice<i32>,
        d: i32,
        pitch: i32,
    );
    /// `FA_HOPPER_BWD_KERNEL`'s entries, `fa_hopper_bwd_<T>_d<D>(FaHopperBwdParams<T>)`.
    fn fa_hopper_backward<T>(params: FaHopperBwdParams<T>);
}

common::kernel_params! {
    /// What one launch of the backward's main kernel is told: one attention backward of the
    /// whole batch, dQ accumulated in f32 (the preprocess kernel zeroed it), dK and dV written.
    pub struct FaHopperBwdParams<T> {
        /// Q and dO [tokens, heads, d], K and V [tokens, kv_heads, d], in boxes of a step's
        /// query rows (Q, dO) and a block's keys (K, V), as the TMA reads them.
        pub map_q: TmaDescriptor,
        pub map_k: TmaDescriptor,
        pub map_v: TmaDescriptor,
        pub map_do: TmaDescriptor,
        /// L in log2 units and D = rowsum(dO * O), transposed: [heads x batch, pitch].
        pub map_lse2: TmaDescriptor,
        pub map_delta: TmaDescriptor,
        /// The f32 dQ accumulator [tokens, heads, d], which the TMA adds tiles into.
        pub map_dq: TmaDescriptor,
        /// dK and dV as the TMA writes them, in boxes of one consumer's 64 keys: the keys of a
        /// consumer whose 64 keys all lie inside their sequence.
        pub map_dk: TmaDescriptor,
        pub map_dv: TmaDescriptor,
        /// dK and dV [tokens, kv_heads, d].
        pub dk: DeviceOut<T>,
        pub dv: DeviceOut<T>,
        /// One counter per (sequence, head, query tile), zero at launch, for the ordered mode.
        pub semaphores: DeviceOut<i32>,
        /// 1: dQ added in a fixed order (deterministic); 0: as the blocks come.
        pub ordered: i32,
        /// The sequences' cumulative lengths: batch + 1 of each.
        pub cu_q: DeviceIn<i32>,
        pub cu_k: DeviceIn<i32>,
        pub heads: i32,
        pub kv_heads: i32,
        /// The softmax scale (not times log2(e)).
        pub scale: f32,
        /// 1: the bottom-right causal mask; 0: none.
        pub causal: i32,
        /// Query tiles of the longest sequence.
        pub q_tiles: i32,
        /// How many KV heads one section of the grid's renumbered blocks covers (>= 1).
        pub head_section: i32,
        /// The tiles' grid (hopper_grid): key tiles of the longest sequence x kv_heads x batch.
        pub key_tiles: i32,
        pub batch: i32,
        /// The next tile to draw and the blocks done, 0 and 0 at launch (the last block sets
        /// them back).
        pub tickets: DeviceOut<i32>,
    }
}

/// `fa_hopper`'s main kernel and launch shape; refused off Hopper or at a head dim without a
/// tile.
pub(crate) fn hopper_launch<'k>(
    hopper: Option<&'k KernelSet>,
    sms: usize,
    dtype: &str,
    shape: &AttentionShape,
) -> Result<(&'k Kernel, LaunchShape)> {
    let d = shape.head_dim;
    let dims: Vec<usize> = BACKWARD_TILES.iter().map(|t| t.head_dim).collect();
    if let Some(refused) = hopper_refusal(hopper.is_some(), d, &dims) {
        return Err(refused.into());
    }
    let hopper = hopper.expect("loaded, or refused above");
    let kernel = hopper.get(&format!("fa_hopper_bwd_{dtype}_d{d}"))?;
    // Persistent: one block per SM (or per tile, if fewer), each drawing its next tile from a
    // counter: the next tile's K and V load while this one's dK and dV leave, and the tiles in
    // flight are the ones the grid of a block per tile would run at once. Otherwise that grid:
    // a block per tile, the kernel's one-tile form.
    let (x, y, z) = hopper_grid(shape);
    let tiles = x as usize * y as usize * z as usize;
    let persistent = hopper_tile(d).persistent;
    let blocks = if persistent { tiles.min(sms) } else { tiles };
    // The kernel numbers the tiles in an i32, and a persistent block draws one number past the
    // last tile before it stops: the counter runs up to tiles + blocks.
    if tiles + blocks > i32::MAX as usize {
        return Err(Refused(format!(
            "fa_hopper: {tiles} key tiles x kv heads x sequences overflow its tile numbers"
        ))
        .into());
    }
    let grid = if persistent {
        (blocks.max(1) as u32, 1, 1)
    } else {
        (x, y, z)
    };
    let launch = LaunchShape {
        grid,
        block: (hopper_tile(d).threads() as u32, 1, 1),
        dynamic_shared_bytes: hopper_tile(d).shared_bytes() as u32,
    };
    Ok((kernel, launch))
}

/// What a `fa_hopper` plan prepares once: the preprocess kernel and dQ's conversion, the
/// tensor maps of Q, dO, K, V (the plan's inputs) and of the transposed L and D and the dQ
/// accumulator (its workspace), the layout of dK's and dV's maps (encoded at each launch, for
/// the gradients it is given), and the query tiles.
pub(crate) struct HopperSteps<'k> {
    preprocess: (&'k Kernel, LaunchShape),
    convert: ConvertDq<'k>,
    maps: [TmaDescriptor; 7],
    key_tiles: HeadTiles,
    q_tiles: usize,
}

impl<'k> HopperSteps<'k> {
    /// Checks that `ws` is this problem's `fa_hopper` workspace and encodes the maps.
    pub(crate) fn new<T: Element>(
        gpu: &Gpu,
        (hopper, kernels): (&'k KernelSet, &'k KernelSet),
        problem: &BackwardProblem,
        t: &BackwardTensors<'_, T>,
        ws: &Workspace,
    ) -> Result<Self> {
        let (shape, fwd) = (problem.shape(), &problem.forward);
        let d = shape.head_dim;
        let dtype = common::family::attention::dtype_name::<T>()?;
        let (q_len, _) = problem.lens();
        let pitch = hopper_pitch(fwd.max_q());
        let spans = shape.heads * shape.batch();
        let bm = hopper_tile(d).queries;
        let q_tiles = fwd.max_q().div_ceil(bm).max(1);
        let Some(scratch) = ws.hopper.as_ref() else {
            bail!("attention backward: this workspace is not fa_hopper's");
        };
        if ws.delta.len() != spans * pitch
            || scratch.lse2.len() != spans * pitch
            || scratch.semaphores.len() != q_tiles * shape.heads * shape.batch()
            || ws.dq_accum.len() != q_len
        {
            bail!("attention backward: this workspace was made for another problem");
        }
        let preprocess = LaunchShape {
            grid: (
                fwd.max_q().div_ceil(PREPROCESS_ROWS).max(1) as u32,
                shape.heads as u32,
                shape.batch() as u32,
            ),
            block: (PREPROCESS_THREADS as u32, 1, 1),
            dynamic_shared_bytes: 0,
        };
        let heads_tiles = |tokens, heads, box_tokens: usize| HeadTiles {
            tokens,
            heads,
            dim: d,
            box_tokens: box_tokens as u32,
        };
        let q_tiles_map = heads_tiles(shape.total_q(), shape.heads, bm);
        let kv_tiles_map = heads_tiles(shape.total_k(), shape.kv_heads, hopper_tile(d).keys);
        let rows_map = RowSpans {
            rows: spans,
            pitch,
            box_len: bm as u32,
        };
        let dq_map = heads_tiles(shape.total_q(), shape.heads, 64);
        let key_tiles = heads_tiles(shape.total_k(), shape.kv_heads, 64);
        // The preprocess reads O in 16-byte pieces (dO too, whose map's encoding refuses an
        // unaligned start as Q's, K's and V's do).
        require_16_byte_start(
            gpu,
            t.o,
            "attention backward: O",
            "fa_hopper's preprocess needs",
        )?;
        let maps = [
            q_tiles_map.encode(gpu, t.q)?,
            kv_tiles_map.encode(gpu, t.k)?,
            kv_tiles_map.encode(gpu, t.v)?,
            q_tiles_map.encode(gpu, t.d_o)?,
            rows_map.encode(gpu, &scratch.lse2)?,
            rows_map.encode(gpu, &ws.delta)?,
            dq_map.encode(gpu, &ws.dq_accum)?,
        ];
        Ok(Self {
            preprocess: (
                hopper.get(&format!("fa_hopper_bwd_preprocess_{dtype}"))?,
                preprocess,
            ),
            convert: ConvertDq::new(kernels, dtype, q_len)?,
            maps,
            key_tiles,
            q_tiles,
        })
    }

    /// D and L transposed (and dQ's accumulator zeroed), the main kernel (dK, dV written, dQ
    /// added into the accumulator by TMA reduce-adds, ordered by key tile in the
    /// deterministic mode), then dQ converted.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn launch<T: Element>(
        &self,
        gpu: &Gpu,
        (main, launch): (&Kernel, &LaunchShape),
        problem: &BackwardProblem,
        t: &BackwardTensors<'_, T>,
        ws: &mut Workspace,
        mode: Mode,
        grads: &mut CudaSlice<T>,
    ) -> Result<()> {
        let (shape, fwd) = (problem.shape(), &problem.forward);
        let (q_len, k_len) = problem.lens();
        let scratch = ws.hopper.as_mut().expect("checked by the plan");
        let (heads, kv_heads) = (shape.heads as i32, shape.kv_heads as i32);
        let causal = i32::from(shape.causal);
        let scale = shape.default_scale() as f32;
        let pitch = hopper_pitch(fwd.max_q());
        let (d_i32, pitch_i32) = (shape.head_dim as i32, pitch as i32);
        let (pre, pre_shape) = &self.preprocess;
        // SAFETY: matches fa_hopper_bwd_preprocess's signature; blocks of PREPROCESS_THREADS
        // threads (the kernel's BH_PREPROCESS_THREADS), PREPROCESS_ROWS query rows i < lq of one
        // (head, sequence) per block, reading d elements of O and dO and one of L at each row
        // (lengths checked by the plan; O and dO start 16-byte aligned, checked by the plan and
        // by dO's map), writing d floats of dq_accum (q_len, the workspace's own allocation) and
        // one float of D and L2 at (head x batch + sequence) x pitch + i (i < max_q <= pitch;
        // the lengths were checked by the plan).
        unsafe {
            bh_preprocess(
                gpu,
                pre,
                pre_shape,
                t.o,
                t.d_o,
                t.lse,
                &mut ws.delta,
                &mut scratch.lse2,
                &mut ws.dq_accum,
                fwd.cu_q(),
                d_i32,
                pitch_i32,
            )
        }?;
        let ordered = i32::from(mode == Mode::Deterministic);
        if ordered == 1 {
            gpu.stream.memset_zeros(&mut scratch.semaphores)?;
        }

        let (mut dq, mut dkv) = grads.split_at_mut(q_len);
        let (mut dk, mut dv) = dkv.split_at_mut(k_len);
        let head_section = scratch
            .head_section
            .unwrap_or_else(|| head_section(shape, fwd.max_q()))
            .min(shape.kv_heads) as i32;
        let [map_q, map_k, map_v, map_do, map_lse2, map_delta, map_dq] = self.maps;
        let map_dk = self.key_tiles.encode(gpu, &dk)?;
        let map_dv = self.key_tiles.encode(gpu, &dv)?;
        let params = FaHopperBwdParams {
            map_q,
            map_k,
            map_v,
            map_do,
            map_lse2,
            map_delta,
            map_dq,
            map_dk,
            map_dv,
            dk: DeviceOut::of(gpu, &mut dk),
            dv: DeviceOut::of(gpu, &mut dv),
            semaphores: DeviceOut::of(gpu, &mut scratch.semaphores),
            ordered,
            cu_q: DeviceIn::of(gpu, fwd.cu_q()),
            cu_k: DeviceIn::of(gpu, fwd.cu_k()),
            heads,
            kv_heads,
            scale,
            causal,
            q_tiles: self.q_tiles as i32,
            head_section,
            key_tiles: hopper_grid(shape).0 as i32,
            batch: shape.batch() as i32,
            tickets: DeviceOut::of_counters(gpu, &scratch.tickets),
        };
        // SAFETY: the kernel takes FaHopperBwdParams<T> (its header is this declaration's).
        // The maps describe exactly Q, dO, K, V (lengths checked by the plan, which borrows
        // them and holds the workspace for as long as it lives), the transposed L and D (heads
        // x pitch) and the dQ accumulator (q_len floats); the TMA zero-fills loads and skips
        // adds past their ends. dK and dV (borrowed here, so alive until the launch is queued
        // and held by the caller after) are written only at keys inside the cumulative lengths:
        // from registers, or through map_dk and map_dv, which describe exactly dk and dv
        // (encode checked their lengths) and store only whole 64-key boxes inside a sequence;
        // the counters hold q_tiles x heads x batch ints, indexed by (sequence, head, query
        // tile < q_tiles); head_section (>= 1) only renumbers the grid's blocks.
        unsafe { fa_hopper_backward(gpu, main, launch, params) }?;
        self.convert.launch(gpu, &ws.dq_accum, &mut dq, scale)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hopper_tile::{BACKWARD_TILES, STORAGE_DOC, STORAGE_NAME};
    use common::gpu::params::{c_checks, c_declaration, c_header, c_size_check};
    use common::gpu::shared_storage::c_primary;
    use half::{bf16, f16};

    /// The checked-in `fa_hopper_bwd_params.cuh` is what [`FaHopperBwdParams`] and the tile
    /// table write.
    #[test]
    fn the_kernels_parameter_struct_is_the_launchers() {
        let mut parts = vec![
            c_declaration::<FaHopperBwdParams<bf16>>(),
            c_checks::<FaHopperBwdParams<bf16>>() + &c_size_check::<FaHopperBwdParams<f16>>(),
            c_primary(STORAGE_NAME, STORAGE_DOC, "int KEY"),
        ];
        for tile in &BACKWARD_TILES {
            let storage = tile.storage();
            parts.push(storage.c_declaration() + &storage.c_checks());
        }
        let header = c_header(
            &[
                "the kernel_params! declarations in day20_fa2_backward/src/fa_hopper_bwd.rs",
                "the tile table (BACKWARD_TILES) in day20_fa2_backward/src/hopper_tile.rs",
            ],
            &parts,
        );
        common::assert_generated_header!("fa_hopper_bwd_params.cuh", &header);
    }

    #[test]
    fn the_hopper_version_keeps_wgmma_asynchronous_and_spills_little() {
        // Spill bytes, stores plus loads, as ptxas counts them (NVRTC 13.0). What spills is
        // outside the consumers' step loop: in the persistent blocks (head dims 64 and 128),
        // the per-tile setup and epilogue, and the roles on 24 registers (the producer, the dQ
        // writer), which carry a tile's state from one tile to the next; head dim 64's
        // consumers (128 queries a step: S^T and dP^T of 64 floats each beside dK and dV) keep
        // more of theirs on the stack. The one-tile form (head dim 256) spills only in its dQ
        // writer, once per query head (two values beside the stage's 2-bit step count). The
        // producer's loops over the 64-column boxes of Q and dO and over the dQ tile's boxes
        // stay rolled (unrolled at head dim 256, their addresses spilled 608 bytes). Bounded
        // so that a change that spills in the main loop fails.
        // Serialized wgmma (ptxas's C7512, "... due to insufficient register resources") is
        // refused by the compile itself: issuing dV before computing dS (more registers live
        // under an in-flight wgmma) did that and measured 13-16% slower on the H100.
        let build = hopper_build();
        let Some(compiled) = common::testing::compile_keeping_wgmma_asynchronous(&build) else {
            return;
        };
        for name in &build.functions {
            let limit = match name {
                n if n.ends_with("_d64") => 544,
                n if n.ends_with("_d128") => 224,
                _ => 16,
            };
            let spilled = compiled.spills.get(name).copied();
            assert!(
                matches!(spilled, Some(bytes) if bytes <= limit),
                "{name} spills {spilled:?} bytes (at most {limit}); ptxas said:\n{}",
                compiled.log
            );
        }
    }

    /// Without the tile defines `fa_hopper_bwd.cu` stops at its `#error`.
    #[test]
    fn the_hopper_version_will_not_compile_without_the_tile_defines() {
        common::testing::assert_needs_its_defines(&HOPPER_SOURCE, "sm_90a", "BackwardTile");
    }
}
