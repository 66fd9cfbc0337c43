//! `attention_bwd.cu`'s launchers: D = rowsum(dO * O), the naive version (P and dS through
//! memory, then dQ, then dK and dV), the two flash versions (`fa2_scalar`, `fa2_mma`: one
//! key-tile pass, dQ by f32 atomics or by a second pass), and dQ's conversion from its f32
//! accumulator, which `fa_hopper` shares.

use anyhow::{Result, bail};
use common::Element;
use common::gpu::kernel::KernelSet;
use common::gpu::kernel_build::KernelBuild;
use common::gpu::nvrtc::KernelSource;
use common::gpu::tile::{Defines, SharedLayout, Violations, file_define};
use common::session::Refused;
use common::{Gpu, Kernel, LaunchShape};
use cudarc::driver::{CudaSlice, CudaViewMut};

use crate::{BackwardProblem, BackwardTensors, FlashTile, HEAD_DIMS, Mode, Version, Workspace};

pub const SOURCE: KernelSource = common::kernel_source!("attention_bwd.cu");

/// Every CUDA function of `attention_bwd.cu`.
pub fn kernel_names() -> Vec<String> {
    let mut names = Vec::new();
    for dtype in ["bf16", "f16"] {
        for step in ["preprocess", "convert_dq", "scores", "dq", "dkv"] {
            names.push(format!("attention_bwd_{step}_{dtype}"));
        }
        for version in ["fa2_scalar", "fa2_mma"] {
            for pass in ["bwd", "bwd_dq"] {
                for d in HEAD_DIMS {
                    names.push(format!("{version}_{pass}_{dtype}_d{d}"));
                }
            }
        }
    }
    names
}

/// `attention_bwd.cu`'s versions, for the GPU's own architecture, with the flash versions'
/// tiles as defines ([`portable_defines`]).
pub(crate) fn portable_build() -> KernelBuild {
    KernelBuild::device(SOURCE, kernel_names()).with_options(portable_defines())
}

/// `fa2_scalar`'s backward tile (day 10's [`FlashTile`], `rows` the queries per tile): tiles
/// of 8 queries and 32 keys in static shared memory (lane j scores key j against its warp's
/// two queries). The launcher takes its grids, blocks and shared memory from this table, and
/// `attention_bwd.cu` gets the same numbers as NVRTC defines ([`portable_defines`]) and
/// `static_assert`s its layouts against them; compiled without them it stops at an `#error`.
pub const FA2_SCALAR_BWD: FlashTile = FlashTile {
    rows: 8,
    keys: 32,
    threads: 128,
    pad: 0,
};

/// `fa2_mma`'s backward tile: 64 queries and 64 keys, 16 rows per warp; shared rows padded by
/// 16 bytes (ldmatrix conflict-free, as in day 10).
pub const FA2_MMA_BWD: FlashTile = FlashTile {
    rows: 64,
    keys: 64,
    threads: 128,
    pad: 8,
};

/// The backward tile of a flash version (`fa_hopper`'s is its own table's).
pub(crate) fn tile_of(version: Version) -> &'static FlashTile {
    match version {
        Version::Fa2Mma => &FA2_MMA_BWD,
        _ => &FA2_SCALAR_BWD,
    }
}

/// Dynamic shared memory of the key-tile pass and of the deterministic dQ pass at head dim
/// `d`, as `fa2_mma_bwd` and `fa2_mma_bwd_dq` lay them out: K and V, two Q and two dO tiles,
/// dS^T (keys x queries + pad), then L and D of the two query tiles in f32; and Q, dO, two K
/// and two V tiles. Rows of `d + pad` 16-bit elements; (0, 0) for `fa2_scalar`.
pub const fn backward_shared_bytes(tile: &FlashTile, d: usize) -> (usize, usize) {
    if tile.pad == 0 {
        return (0, 0);
    }
    let row = (d + tile.pad) * 2;
    let (q_tile, kv_tile) = (tile.rows * row, tile.keys * row);
    let main = SharedLayout::new()
        .region(2 * kv_tile)
        .region(2 * q_tile)
        .region(2 * q_tile)
        .region(tile.keys * (tile.rows + tile.pad) * 2)
        .region(2 * 2 * tile.rows * 4);
    let dq = SharedLayout::new()
        .region(2 * q_tile)
        .region(2 * kv_tile)
        .region(2 * kv_tile);
    (main.bytes(), dq.bytes())
}

/// What stops a backward tile from compiling or running, as the kernel's `static_assert`s
/// check it (one line each; empty when it fits).
pub fn backward_violations(tile: &FlashTile, label: &str) -> Vec<String> {
    let mut v = Violations::new(label);
    v.require(tile.threads == 128, || {
        format!(
            "{} threads: the kernels are written for four warps",
            tile.threads
        )
    });
    let (queries, keys) = if tile.pad == 0 { (8, 32) } else { (64, 64) };
    v.require((tile.rows, tile.keys) == (queries, keys), || {
        format!(
            "{} x {} tiles: the kernel's loops take {queries} queries x {keys} keys",
            tile.rows, tile.keys
        )
    });
    v.require(tile.pad == 0 || tile.pad * 2 == 16, || {
        format!("rows padded by {} bytes, not 16", tile.pad * 2)
    });
    for d in HEAD_DIMS {
        let (main, dq) = backward_shared_bytes(tile, d);
        v.shared_bytes(main.max(dq));
    }
    v.into_lines()
}

/// The NVRTC options that give `attention_bwd.cu` its flash tiles: `FA2B_*` and `fa2_mma`'s
/// shared memory per head dim and pass.
pub fn portable_defines() -> Vec<String> {
    let mut defines = vec![file_define("FA2B", "THREADS", FA2_MMA_BWD.threads)];
    defines.extend(
        Defines::new("FA2B_SCALAR")
            .set("QUERIES", FA2_SCALAR_BWD.rows)
            .set("KEYS", FA2_SCALAR_BWD.keys)
            .into_vec(),
    );
    defines.extend(
        Defines::new("FA2B_MMA")
            .set("QUERIES", FA2_MMA_BWD.rows)
            .set("KEYS", FA2_MMA_BWD.keys)
            .set("PAD", FA2_MMA_BWD.pad)
            .into_vec(),
    );
    for d in HEAD_DIMS {
        let (main, dq) = backward_shared_bytes(&FA2_MMA_BWD, d);
        let tile = Defines::tile("FA2B_MMA", d)
            .set("SHARED_BYTES", main)
            .set("DQ_SHARED_BYTES", dq);
        defines.extend(tile.into_vec());
    }
    defines
}

common::kernel_args! {
    /// `attention_bwd_preprocess_<T>(o, d_o, delta, dq_accum, rows, d, zero_dq)`
    fn bwd_preprocess<T>(
        o: &CudaSlice<T>,
        d_o: &CudaSlice<T>,
        delta: &mut CudaSlice<f32>,
        dq_accum: &mut CudaSlice<f32>,
        rows: i32,
        d: i32,
        zero_dq: i32,
    );
    /// `attention_bwd_convert_dq_<T>(dq_accum, dq, n, scale)`
    fn bwd_convert_dq<T>(dq_accum: &CudaSlice<f32>, dq: &mut CudaViewMut<'_, T>, n: u64, scale: f32);
    /// `attention_bwd_scores_<T>(q, k, v, d_o, lse, delta, probs, dscores, cu_q, cu_k,
    /// s_offset, heads, kv_heads, d, scale, causal)`
    fn bwd_naive_scores<T>(
        q: &CudaSlice<T>,
        k: &CudaSlice<T>,
        v: &CudaSlice<T>,
        d_o: &CudaSlice<T>,
        lse: &CudaSlice<f32>,
        delta: &CudaSlice<f32>,
        probs: &mut CudaSlice<f32>,
        dscores: &mut CudaSlice<f32>,
        cu_q: &CudaSlice<i32>,
        cu_k: &CudaSlice<i32>,
        s_offset: &CudaSlice<u64>,
        heads: i32,
        kv_heads: i32,
        d: i32,
        scale: f32,
        causal: i32,
    );
    /// `attention_bwd_dq_<T>(dscores, k, dq, cu_q, cu_k, s_offset, heads, kv_heads, scale)`
    fn bwd_naive_dq<T>(
        dscores: &CudaSlice<f32>,
        k: &CudaSlice<T>,
        dq: &mut CudaViewMut<'_, T>,
        cu_q: &CudaSlice<i32>,
        cu_k: &CudaSlice<i32>,
        s_offset: &CudaSlice<u64>,
        heads: i32,
        kv_heads: i32,
        scale: f32,
    );
    /// `attention_bwd_dkv_<T>(probs, dscores, q, d_o, dk, dv, cu_q, cu_k, s_offset, heads,
    /// kv_heads, scale)`
    fn bwd_naive_dkv<T>(
        probs: &CudaSlice<f32>,
        dscores: &CudaSlice<f32>,
        q: &CudaSlice<T>,
        d_o: &CudaSlice<T>,
        dk: &mut CudaViewMut<'_, T>,
        dv: &mut CudaViewMut<'_, T>,
        cu_q: &CudaSlice<i32>,
        cu_k: &CudaSlice<i32>,
        s_offset: &CudaSlice<u64>,
        heads: i32,
        kv_heads: i32,
        scale: f32,
    );
    /// `BWD_KERNELS`' key-tile pass, `<version>_bwd_<T>_d<D>(q, k, v, d_o, lse, delta,
    /// dq_accum, dk, dv, cu_q, cu_k, heads, kv_heads, scale, causal, atomic_dq)`
    fn flash_bwd<T>(
        q: &CudaSlice<T>,
        k: &CudaSlice<T>,
        v: &CudaSlice<T>,
        d_o: &CudaSlice<T>,
        lse: &CudaSlice<f32>,
        delta: &CudaSlice<f32>,
        dq_accum: &mut CudaSlice<f32>,
        dk: &mut CudaViewMut<'_, T>,
        dv: &mut CudaViewMut<'_, T>,
        cu_q: &CudaSlice<i32>,
        cu_k: &CudaSlice<i32>,
        heads: i32,
        kv_heads: i32,
        scale: f32,
        causal: i32,
        atomic_dq: i32,
    );
    /// `BWD_KERNELS`' dQ pass, `<version>_bwd_dq_<T>_d<D>(q, k, v, d_o, lse, delta, dq, cu_q,
    /// cu_k, heads, kv_heads, scale, causal)`
    fn flash_bwd_dq<T>(
        q: &CudaSlice<T>,
        k: &CudaSlice<T>,
        v: &CudaSlice<T>,
        d_o: &CudaSlice<T>,
        lse: &CudaSlice<f32>,
        delta: &CudaSlice<f32>,
        dq: &mut CudaViewMut<'_, T>,
        cu_q: &CudaSlice<i32>,
        cu_k: &CudaSlice<i32>,
        heads: i32,
        kv_heads: i32,
        scale: f32,
        causal: i32,
    );
}

/// The naive version's score kernel and launch shape (day 10's naive forward's); refused
/// past the memory wall.
pub(crate) fn naive_launch<'k>(
    kernels: &'k KernelSet,
    dtype: &str,
    problem: &BackwardProblem,
) -> Result<(&'k Kernel, LaunchShape)> {
    let bytes = problem.naive_bytes();
    let launch = day10::naive_scores_launch(&problem.forward, "P and dS", bytes)?;
    Ok((
        kernels.get(&format!("attention_bwd_scores_{dtype}"))?,
        launch,
    ))
}

/// `fa2_scalar`'s or `fa2_mma`'s key-tile kernel and launch shape; refused at a head dim they
/// are not compiled for.
pub(crate) fn flash_launch<'k>(
    kernels: &'k KernelSet,
    dtype: &str,
    version: Version,
    problem: &BackwardProblem,
) -> Result<(&'k Kernel, LaunchShape)> {
    let shape = problem.shape();
    let d = shape.head_dim;
    if !HEAD_DIMS.contains(&d) {
        return Err(Refused(format!(
            "{}: compiled for head dims {HEAD_DIMS:?}, not {d}",
            version.name()
        ))
        .into());
    }
    let kernel = kernels.get(&format!("{}_bwd_{dtype}_d{d}", version.name()))?;
    let tile = tile_of(version);
    let launch = LaunchShape {
        grid: (
            problem.forward.max_k().div_ceil(tile.keys).max(1) as u32,
            shape.kv_heads as u32,
            shape.batch() as u32,
        ),
        block: (tile.threads as u32, 1, 1),
        dynamic_shared_bytes: backward_shared_bytes(tile, d).0 as u32,
    };
    Ok((kernel, launch))
}

/// A kernel and its launch shape, found once per plan.
type Step<'k> = (&'k Kernel, LaunchShape);

/// dQ = scale * dq_accum in the storage type, after the f32 adds of a flash kernel
/// (`attention_bwd_convert_dq`, shared by `fa2_*` and `fa_hopper`).
pub(crate) struct ConvertDq<'k>(Step<'k>);

impl<'k> ConvertDq<'k> {
    pub(crate) fn new(kernels: &'k KernelSet, dtype: &str, q_len: usize) -> Result<Self> {
        let kernel = kernels.get(&format!("attention_bwd_convert_dq_{dtype}"))?;
        let elems = LaunchShape {
            grid: ((q_len.div_ceil(256)).clamp(1, 132 * 16) as u32, 1, 1),
            block: (256, 1, 1),
            dynamic_shared_bytes: 0,
        };
        Ok(Self((kernel, elems)))
    }

    pub(crate) fn launch<T: Element>(
        &self,
        gpu: &Gpu,
        dq_accum: &CudaSlice<f32>,
        dq: &mut CudaViewMut<'_, T>,
        scale: f32,
    ) -> Result<()> {
        if dq_accum.len() != dq.len() {
            bail!("attention backward: dQ's accumulator and dQ differ in length");
        }
        let n = dq.len() as u64;
        let (kernel, elems) = &self.0;
        // SAFETY: a grid-stride loop over n elements of both buffers (lengths checked equal).
        unsafe { bwd_convert_dq(gpu, kernel, elems, dq_accum, dq, n, scale) }
    }
}

/// What a naive or `fa2_*` plan launches besides its main kernel: D first, then (naive) dQ
/// and dK, dV, or (`fa2_*`) dQ's conversion or its own pass.
pub(crate) struct PortableSteps<'k> {
    preprocess: Step<'k>,
    /// Naive: `attention_bwd_dq`; `fa2_*` deterministic: the dQ pass.
    dq: Option<Step<'k>>,
    /// Naive: `attention_bwd_dkv`.
    dkv: Option<Step<'k>>,
    /// `fa2_*` with atomics.
    convert: Option<ConvertDq<'k>>,
}

impl<'k> PortableSteps<'k> {
    pub(crate) fn new(
        kernels: &'k KernelSet,
        dtype: &str,
        version: Version,
        mode: Mode,
        problem: &BackwardProblem,
    ) -> Result<Self> {
        let (shape, fwd) = (problem.shape(), &problem.forward);
        let (d, rows) = (shape.head_dim, shape.total_q() * shape.heads);
        let preprocess = (
            kernels.get(&format!("attention_bwd_preprocess_{dtype}"))?,
            LaunchShape {
                grid: (rows.div_ceil(8).max(1) as u32, 1, 1),
                block: (256, 1, 1),
                dynamic_shared_bytes: 0,
            },
        );
        // One block per row (or key) of one head of one sequence, one thread per column.
        let per_row = |lengths: usize, heads: usize| LaunchShape {
            grid: (lengths.max(1) as u32, heads as u32, shape.batch() as u32),
            block: (d as u32, 1, 1),
            dynamic_shared_bytes: 0,
        };
        let mut steps = Self {
            preprocess,
            dq: None,
            dkv: None,
            convert: None,
        };
        match (version, mode) {
            (Version::Naive, _) => {
                let dq = kernels.get(&format!("attention_bwd_dq_{dtype}"))?;
                let dkv = kernels.get(&format!("attention_bwd_dkv_{dtype}"))?;
                steps.dq = Some((dq, per_row(fwd.max_q(), shape.heads)));
                steps.dkv = Some((dkv, per_row(fwd.max_k(), shape.kv_heads)));
            }
            (_, Mode::Atomic) => {
                steps.convert = Some(ConvertDq::new(kernels, dtype, problem.lens().0)?);
            }
            (_, Mode::Deterministic) => {
                let name = format!("{}_bwd_dq_{dtype}_d{d}", version.name());
                let tile = tile_of(version);
                let per_tile = LaunchShape {
                    grid: (
                        fwd.max_q().div_ceil(tile.rows).max(1) as u32,
                        shape.heads as u32,
                        shape.batch() as u32,
                    ),
                    block: (tile.threads as u32, 1, 1),
                    dynamic_shared_bytes: backward_shared_bytes(tile, d).1 as u32,
                };
                steps.dq = Some((kernels.get(&name)?, per_tile));
            }
        }
        Ok(steps)
    }

    /// D = rowsum(dO * O), and dQ's accumulator zeroed when atomics will add into it; then
    /// the version's passes. `grads` is `[dQ | dK | dV]`, its length checked by the plan.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn launch<T: Element>(
        &self,
        gpu: &Gpu,
        (main, launch): (&Kernel, &LaunchShape),
        problem: &BackwardProblem,
        t: &BackwardTensors<'_, T>,
        ws: &mut Workspace,
        atomic: bool,
        grads: &mut CudaSlice<T>,
    ) -> Result<()> {
        let (shape, fwd) = (problem.shape(), &problem.forward);
        let (q_len, k_len) = problem.lens();
        let rows = shape.total_q() * shape.heads;
        let (heads, kv_heads) = (shape.heads as i32, shape.kv_heads as i32);
        let causal = i32::from(shape.causal);
        let scale = shape.default_scale() as f32;
        let (cu_q, cu_k, offsets) = (fwd.cu_q(), fwd.cu_k(), fwd.score_offsets());
        let (rows_i32, d_i32, zero) = (rows as i32, shape.head_dim as i32, i32::from(atomic));
        let (pre, pre_shape) = &self.preprocess;
        // SAFETY: matches attention_bwd_preprocess's signature; one warp per row < rows, each
        // reading d elements of O and dO (q_len = rows x d, checked) and writing D[row] and,
        // when zero is set, d floats of dq_accum (whose length q_len the plan checked).
        unsafe {
            bwd_preprocess(
                gpu,
                pre,
                pre_shape,
                t.o,
                t.d_o,
                &mut ws.delta,
                &mut ws.dq_accum,
                rows_i32,
                d_i32,
                zero,
            )
        }?;

        let (mut dq, mut dkv) = grads.split_at_mut(q_len);
        let (mut dk, mut dv) = dkv.split_at_mut(k_len);
        if let Some((dkv_kernel, per_key)) = &self.dkv {
            let Some((probs, dscores)) = ws.naive.as_mut() else {
                bail!("the naive version needs its workspace (P and dS)");
            };
            // SAFETY: matches attention_bwd_scores's signature; every index is bounded by the
            // cumulative lengths this shape's offsets were built from, and the buffers'
            // lengths were checked by the plan.
            unsafe {
                bwd_naive_scores(
                    gpu, main, launch, t.q, t.k, t.v, t.d_o, t.lse, &ws.delta, probs, dscores,
                    cu_q, cu_k, offsets, heads, kv_heads, d_i32, scale, causal,
                )
            }?;
            let (dq_kernel, per_row) = self.dq.as_ref().expect("planned with the naive version");
            // SAFETY: as above; blockDim.x is the head dim, so the column is < d.
            unsafe {
                bwd_naive_dq(
                    gpu, dq_kernel, per_row, dscores, t.k, &mut dq, cu_q, cu_k, offsets, heads,
                    kv_heads, scale,
                )
            }?;
            // SAFETY: as above; one block per key row inside the lengths, one thread per
            // column.
            return unsafe {
                bwd_naive_dkv(
                    gpu, dkv_kernel, per_key, probs, dscores, t.q, t.d_o, &mut dk, &mut dv, cu_q,
                    cu_k, offsets, heads, kv_heads, scale,
                )
            };
        }
        // SAFETY: matches BWD_KERNELS' signature; the head dim is the kernel's own (chosen by
        // name), the buffers' lengths were checked (dq_accum holds q_len floats when
        // atomic_dq = zero is set; otherwise it is not touched), and every row and key index
        // is bounded by the cumulative lengths.
        unsafe {
            flash_bwd(
                gpu,
                main,
                launch,
                t.q,
                t.k,
                t.v,
                t.d_o,
                t.lse,
                &ws.delta,
                &mut ws.dq_accum,
                &mut dk,
                &mut dv,
                cu_q,
                cu_k,
                heads,
                kv_heads,
                scale,
                causal,
                zero,
            )
        }?;
        if let Some(convert) = &self.convert {
            return convert.launch(gpu, &ws.dq_accum, &mut dq, scale);
        }
        let (dq_kernel, per_tile) = self.dq.as_ref().expect("planned with the dQ pass");
        // SAFETY: as the main kernel; one block per query tile of one head of one sequence,
        // writing only its own rows of dQ.
        unsafe {
            flash_bwd_dq(
                gpu, dq_kernel, per_tile, t.q, t.k, t.v, t.d_o, t.lse, &ws.delta, &mut dq, cu_q,
                cu_k, heads, kv_heads, scale, causal,
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_flash_tiles_fit_and_keep_their_numbers() {
        let no_lines = Vec::<String>::new();
        assert_eq!(backward_violations(&FA2_SCALAR_BWD, "fa2_scalar"), no_lines);
        assert_eq!(backward_violations(&FA2_MMA_BWD, "fa2_mma"), no_lines);
        // What the launcher launched with before the table.
        for d in HEAD_DIMS {
            let main = (6 * 64 * (d + 8) + 64 * 72) * 2 + 4 * 64 * 4;
            let both = (main, 6 * 64 * (d + 8) * 2);
            assert_eq!(backward_shared_bytes(&FA2_MMA_BWD, d), both);
        }
        assert_eq!(backward_shared_bytes(&FA2_SCALAR_BWD, 64), (0, 0));
        let wide = FlashTile {
            rows: 128,
            ..FA2_MMA_BWD
        };
        let lines = backward_violations(&wide, "wide");
        assert!(lines.iter().any(|v| v.contains("128 x 64")), "{lines:?}");
    }

    #[test]
    fn the_mma_tiles_fit_two_blocks_per_sm_at_head_dim_128() {
        // 228 KiB per SM, 1 KiB of it reserved per block.
        let (main, dq) = backward_shared_bytes(&FA2_MMA_BWD, 128);
        assert!(2 * (main + 1024) <= 228 * 1024, "{main}");
        assert!(2 * (dq + 1024) <= 228 * 1024, "{dq}");
    }

    #[test]
    fn the_defines_carry_both_tiles() {
        let defines = portable_defines();
        assert_eq!(defines.len(), 1 + 2 + 3 + 2 * HEAD_DIMS.len());
        assert!(defines.contains(&"-DFA2B_THREADS=128".to_string()));
        assert!(defines.contains(&"-DFA2B_SCALAR_KEYS=32".to_string()));
        assert!(defines.contains(&"-DFA2B_MMA_D64_DQ_SHARED_BYTES=55296".to_string()));
    }

    /// Without the tile defines `attention_bwd.cu` stops at its `#error`.
    #[test]
    fn attention_bwd_cu_will_not_compile_without_the_tile_defines() {
        common::testing::assert_needs_its_defines(&SOURCE, "sm_90", "backward FlashTile");
    }
}
