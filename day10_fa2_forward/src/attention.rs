//! `attention.cu`'s launchers: the naive version (S, then P and L, then P V, through memory)
//! and the two flash versions, `fa2_scalar` and `fa2_mma`, for the GPU's own architecture.

use anyhow::{Result, bail};
use common::Element;
use common::gpu::kernel::KernelSet;
use common::gpu::kernel_build::KernelBuild;
use common::gpu::nvrtc::KernelSource;
use common::gpu::tile::{Defines, SharedLayout, Violations};
use common::session::Refused;
use common::{Gpu, Kernel, LaunchShape};
use cudarc::driver::CudaSlice;

use crate::{DeviceProblem, HEAD_DIMS, Inputs, NAIVE_MAX_SCORE_BYTES, Version};

pub const SOURCE: KernelSource = common::kernel_source!("attention.cu");

/// Every CUDA function of `attention.cu`.
pub fn kernel_names() -> Vec<String> {
    let mut names = Vec::new();
    for dtype in ["bf16", "f16"] {
        names.push(format!("attention_scores_{dtype}"));
        names.push(format!("attention_pv_{dtype}"));
        for version in ["fa2_scalar", "fa2_mma"] {
            for d in HEAD_DIMS {
                names.push(format!("{version}_{dtype}_d{d}"));
            }
        }
    }
    names.push("attention_softmax_rows".to_string());
    names
}

/// `attention.cu`'s versions, for the GPU's own architecture, with the flash versions' tiles
/// as defines ([`portable_defines`]).
pub(crate) fn portable_build() -> KernelBuild {
    KernelBuild::device(SOURCE, kernel_names()).with_options(portable_defines())
}

/// A flash version's tile, the one table both sides read: the launcher takes each block's
/// query rows, its threads and its shared memory from it, and `attention.cu` gets the same
/// numbers as NVRTC defines ([`portable_defines`]) and `static_assert`s that its layout takes
/// exactly the shared memory the launcher gives it. Compiled without them it stops at an
/// `#error`. Day 20's backward versions describe their tiles with it too (in its own table).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlashTile {
    /// Query rows per tile (per block here, and in the backward's dQ pass).
    pub rows: usize,
    /// Keys per K/V tile.
    pub keys: usize,
    pub threads: usize,
    /// 16-bit elements each shared-memory row is padded by (0: no dynamic shared memory).
    pub pad: usize,
}

/// `fa2_scalar`: four warps of 4 query rows each, f32 tiles of 32 keys in static shared memory
/// (lane j scores key j).
pub const FA2_SCALAR: FlashTile = FlashTile {
    rows: 16,
    keys: 32,
    threads: 128,
    pad: 0,
};

/// `fa2_mma`: four warps of 16 query rows each (one mma.sync row block), key tiles of 64;
/// shared rows padded by 16 bytes, so that the 8 rows of an ldmatrix start 4 banks apart.
pub const FA2_MMA: FlashTile = FlashTile {
    rows: 64,
    keys: 64,
    threads: 128,
    pad: 8,
};

impl FlashTile {
    /// Dynamic shared memory of a block at head dim `d`, as `fa2_mma` lays it out: the Q tile,
    /// then two K and two V tiles (the next key tile loads while this one is used), rows of
    /// `d + pad` 16-bit elements. None for `fa2_scalar` (`pad` 0).
    pub const fn shared_bytes(&self, d: usize) -> usize {
        if self.pad == 0 {
            return 0;
        }
        let row = (d + self.pad) * 2;
        SharedLayout::new()
            .region(self.rows * row)
            .region(2 * self.keys * row)
            .region(2 * self.keys * row)
            .bytes()
    }

    /// What stops this tile from compiling or running, as the kernel's `static_assert`s check
    /// it (one line each; empty when it fits).
    pub fn violations(&self, label: &str) -> Vec<String> {
        let mut v = Violations::new(label);
        let warps = self.threads / 32;
        v.require(self.threads == 128, || {
            format!(
                "{} threads: the kernels are written for four warps",
                self.threads
            )
        });
        let rows_per_warp = if self.pad == 0 { 4 } else { 16 };
        v.require(self.rows == warps * rows_per_warp, || {
            format!(
                "{} query rows: four warps of {rows_per_warp} rows each",
                self.rows
            )
        });
        let keys = if self.pad == 0 { 32 } else { 64 };
        v.require(self.keys == keys, || {
            format!(
                "{} keys per tile: the kernel's loops take {keys}",
                self.keys
            )
        });
        v.require(self.pad == 0 || self.pad * 2 == 16, || {
            format!("rows padded by {} bytes, not 16", self.pad * 2)
        });
        for d in HEAD_DIMS {
            v.shared_bytes(self.shared_bytes(d));
        }
        v.into_lines()
    }
}

/// The NVRTC options that give `attention.cu` its flash tiles: `FA2_SCALAR_*`, `FA2_MMA_*` and
/// `fa2_mma`'s shared memory per head dim.
pub fn portable_defines() -> Vec<String> {
    let scalar = Defines::new("FA2_SCALAR")
        .set("ROWS", FA2_SCALAR.rows)
        .set("KEYS", FA2_SCALAR.keys)
        .set("THREADS", FA2_SCALAR.threads);
    let mma = Defines::new("FA2_MMA")
        .set("ROWS", FA2_MMA.rows)
        .set("KEYS", FA2_MMA.keys)
        .set("THREADS", FA2_MMA.threads)
        .set("PAD", FA2_MMA.pad);
    let mut defines = scalar.into_vec();
    defines.extend(mma.into_vec());
    for d in HEAD_DIMS {
        defines.extend(
            Defines::tile("FA2_MMA", d)
                .set("SHARED_BYTES", FA2_MMA.shared_bytes(d))
                .into_vec(),
        );
    }
    defines
}

common::kernel_args! {
    /// `attention_scores_<T>(q, k, scores, cu_q, cu_k, s_offset, heads, kv_heads, d, scale,
    /// causal)`
    fn attention_scores<T>(
        q: &CudaSlice<T>,
        k: &CudaSlice<T>,
        scores: &mut CudaSlice<f32>,
        cu_q: &CudaSlice<i32>,
        cu_k: &CudaSlice<i32>,
        s_offset: &CudaSlice<u64>,
        heads: i32,
        kv_heads: i32,
        d: i32,
        scale: f32,
        causal: i32,
    );
    /// `attention_softmax_rows(scores, lse, cu_q, cu_k, s_offset, heads)`
    fn attention_softmax_rows(
        scores: &mut CudaSlice<f32>,
        lse: &mut CudaSlice<f32>,
        cu_q: &CudaSlice<i32>,
        cu_k: &CudaSlice<i32>,
        s_offset: &CudaSlice<u64>,
        heads: i32,
    );
    /// `attention_pv_<T>(probs, v, o, cu_q, cu_k, s_offset, heads, kv_heads)`
    fn attention_pv<T>(
        probs: &CudaSlice<f32>,
        v: &CudaSlice<T>,
        o: &mut CudaSlice<T>,
        cu_q: &CudaSlice<i32>,
        cu_k: &CudaSlice<i32>,
        s_offset: &CudaSlice<u64>,
        heads: i32,
        kv_heads: i32,
    );
    /// `FLASH_KERNEL`'s entries, `{fa2_scalar,fa2_mma}_<T>_d<D>(q, k, v, o, lse, cu_q, cu_k,
    /// heads, kv_heads, scale_log2, causal)`
    fn flash_forward<T>(
        q: &CudaSlice<T>,
        k: &CudaSlice<T>,
        v: &CudaSlice<T>,
        o: &mut CudaSlice<T>,
        lse: &mut CudaSlice<f32>,
        cu_q: &CudaSlice<i32>,
        cu_k: &CudaSlice<i32>,
        heads: i32,
        kv_heads: i32,
        scale_log2: f32,
        causal: i32,
    );
}

/// The naive version's kernel (the first of its three) and launch shape; refused past the
/// memory wall.
pub(crate) fn naive_launch<'k>(
    kernels: &'k KernelSet,
    dtype: &str,
    problem: &DeviceProblem,
) -> Result<(&'k Kernel, LaunchShape)> {
    let launch = naive_scores_launch(problem, "S = Q K^T", problem.score_bytes())?;
    Ok((kernels.get(&format!("attention_scores_{dtype}"))?, launch))
}

/// The launch shape of a naive score kernel, this day's or day 20's (a 16 x 16 block of
/// scores per block, every head of every sequence on z), or [`Refused`] where `what` (the
/// matrices it fills) would take `bytes`, over [`NAIVE_MAX_SCORE_BYTES`]: the memory wall.
pub fn naive_scores_launch(problem: &DeviceProblem, what: &str, bytes: u64) -> Result<LaunchShape> {
    let shape = &problem.shape;
    if bytes > NAIVE_MAX_SCORE_BYTES {
        return Err(Refused(format!(
            "naive: {what} would take {:.1} GiB (over {} GiB): the memory wall the flash \
             versions remove",
            bytes as f64 / (1u64 << 30) as f64,
            NAIVE_MAX_SCORE_BYTES >> 30
        ))
        .into());
    }
    if shape.heads * shape.batch() > 65535 {
        return Err(Refused("naive: heads x batch over 65535".into()).into());
    }
    Ok(LaunchShape {
        grid: (
            problem.max_k().div_ceil(16).max(1) as u32,
            problem.max_q().div_ceil(16).max(1) as u32,
            (shape.heads * shape.batch()) as u32,
        ),
        block: (16, 16, 1),
        dynamic_shared_bytes: 0,
    })
}

/// `fa2_scalar`'s or `fa2_mma`'s kernel and launch shape; refused at a head dim they are not
/// compiled for.
pub(crate) fn flash_launch<'k>(
    kernels: &'k KernelSet,
    dtype: &str,
    version: Version,
    problem: &DeviceProblem,
) -> Result<(&'k Kernel, LaunchShape)> {
    let shape = &problem.shape;
    let d = shape.head_dim;
    if !HEAD_DIMS.contains(&d) {
        // One line; where fa_hopper has the head dim, the reader learns who does.
        let elsewhere = if Version::FaHopper.takes_head_dim(d) {
            " (fa_hopper takes it, on Hopper)"
        } else {
            ""
        };
        return Err(Refused(format!(
            "{}: compiled for head dims {HEAD_DIMS:?}, not {d}{elsewhere}",
            version.name()
        ))
        .into());
    }
    let kernel = kernels.get(&format!("{}_{dtype}_d{d}", version.name()))?;
    let tile = match version {
        Version::Fa2Mma => FA2_MMA,
        _ => FA2_SCALAR,
    };
    let launch = LaunchShape {
        grid: (
            problem.max_q().div_ceil(tile.rows).max(1) as u32,
            shape.heads as u32,
            shape.batch() as u32,
        ),
        block: (tile.threads as u32, 1, 1),
        dynamic_shared_bytes: tile.shared_bytes(d) as u32,
    };
    Ok((kernel, launch))
}

/// The naive version's second and third kernels and their launch shapes, found once per plan.
pub(crate) struct NaiveSteps<'k> {
    softmax: &'k Kernel,
    rows: LaunchShape,
    pv: &'k Kernel,
    per_row: LaunchShape,
}

impl<'k> NaiveSteps<'k> {
    pub(crate) fn new(
        kernels: &'k KernelSet,
        dtype: &str,
        problem: &DeviceProblem,
    ) -> Result<Self> {
        let shape = &problem.shape;
        Ok(Self {
            softmax: kernels.get("attention_softmax_rows")?,
            rows: LaunchShape {
                grid: (
                    problem.max_q().div_ceil(8).max(1) as u32,
                    shape.heads as u32,
                    shape.batch() as u32,
                ),
                block: (256, 1, 1),
                dynamic_shared_bytes: 0,
            },
            pv: kernels.get(&format!("attention_pv_{dtype}"))?,
            per_row: LaunchShape {
                grid: (
                    problem.max_q().max(1) as u32,
                    shape.heads as u32,
                    shape.batch() as u32,
                ),
                block: (shape.head_dim as u32, 1, 1),
                dynamic_shared_bytes: 0,
            },
        })
    }

    /// S = scale Q K^T into `scores`, then P and L, then O = P V.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn launch<T: Element>(
        &self,
        gpu: &Gpu,
        (scores_kernel, scores_shape): (&Kernel, &LaunchShape),
        problem: &DeviceProblem,
        x: &Inputs<'_, T>,
        scores: Option<&mut CudaSlice<f32>>,
        lse: &mut CudaSlice<f32>,
        o: &mut CudaSlice<T>,
    ) -> Result<()> {
        let Some(scores) = scores else {
            bail!("the naive version needs a score buffer");
        };
        if scores.len() < problem.score_len() {
            bail!("the score buffer must hold {} floats", problem.score_len());
        }
        let shape = &problem.shape;
        let (heads, kv_heads) = (shape.heads as i32, shape.kv_heads as i32);
        let (d, scale, causal) = (
            shape.head_dim as i32,
            shape.default_scale() as f32,
            i32::from(shape.causal),
        );
        let (cu_q, cu_k, offsets) = (problem.cu_q(), problem.cu_k(), problem.score_offsets());
        // SAFETY: matches attention_scores_<T>'s signature; every index is bounded by the
        // cumulative lengths, which `DeviceProblem::new` built from this shape, and the
        // buffers' lengths were checked (Q, K, V by the plan, the scores above).
        unsafe {
            attention_scores(
                gpu,
                scores_kernel,
                scores_shape,
                x.q,
                x.k,
                &mut *scores,
                cu_q,
                cu_k,
                offsets,
                heads,
                kv_heads,
                d,
                scale,
                causal,
            )
        }?;
        // SAFETY: as above; one warp per (row, head, sequence) inside the lengths.
        unsafe {
            attention_softmax_rows(
                gpu,
                self.softmax,
                &self.rows,
                &mut *scores,
                lse,
                cu_q,
                cu_k,
                offsets,
                heads,
            )
        }?;
        // SAFETY: as above; blockDim.x is the head dim, so c < d.
        unsafe {
            attention_pv(
                gpu,
                self.pv,
                &self.per_row,
                &*scores,
                x.v,
                o,
                cu_q,
                cu_k,
                offsets,
                heads,
                kv_heads,
            )
        }
    }
}

/// One `fa2_scalar` or `fa2_mma` launch: O and L of the whole batch.
pub(crate) fn launch_flash<T: Element>(
    gpu: &Gpu,
    (kernel, launch): (&Kernel, &LaunchShape),
    problem: &DeviceProblem,
    x: &Inputs<'_, T>,
    lse: &mut CudaSlice<f32>,
    o: &mut CudaSlice<T>,
) -> Result<()> {
    let shape = &problem.shape;
    let scale_log2 = shape.default_scale() as f32 * std::f32::consts::LOG2_E;
    // SAFETY: matches FLASH_KERNEL's signature; the head dim is the kernel's own (chosen by
    // name), the buffers' lengths were checked (Q, K, V by the plan, O and L by its launch),
    // and every row and key index is bounded by the cumulative lengths of this shape.
    unsafe {
        flash_forward(
            gpu,
            kernel,
            launch,
            x.q,
            x.k,
            x.v,
            o,
            lse,
            problem.cu_q(),
            problem.cu_k(),
            shape.heads as i32,
            shape.kv_heads as i32,
            scale_log2,
            i32::from(shape.causal),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_flash_tiles_fit_and_keep_their_numbers() {
        assert_eq!(FA2_SCALAR.violations("fa2_scalar"), Vec::<String>::new());
        assert_eq!(FA2_MMA.violations("fa2_mma"), Vec::<String>::new());
        // What the launcher launched with before the table: 5 tiles of 64 rows of d + 8 halves.
        for d in HEAD_DIMS {
            assert_eq!(FA2_MMA.shared_bytes(d), 5 * 64 * (d + 8) * 2);
        }
        assert_eq!(FA2_SCALAR.shared_bytes(128), 0);
        let odd = FlashTile {
            keys: 32,
            ..FA2_MMA
        };
        assert!(odd.violations("odd").iter().any(|v| v.contains("32 keys")));
    }

    #[test]
    fn the_defines_carry_both_tiles() {
        let defines = portable_defines();
        assert_eq!(defines.len(), 3 + 4 + HEAD_DIMS.len());
        assert!(defines.contains(&"-DFA2_SCALAR_ROWS=16".to_string()));
        assert!(defines.contains(&"-DFA2_MMA_PAD=8".to_string()));
        assert!(defines.contains(&"-DFA2_MMA_D128_SHARED_BYTES=87040".to_string()));
    }

    /// Without the tile defines `attention.cu` stops at its `#error`.
    #[test]
    fn attention_cu_will_not_compile_without_the_tile_defines() {
        common::testing::assert_needs_its_defines(&SOURCE, "sm_90", "FlashTile");
    }
}
