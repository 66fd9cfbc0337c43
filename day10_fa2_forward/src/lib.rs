//! Day 10: FlashAttention-2, forward, as a layer other days call (day 20's backward builds on
//! it). [`FlashAttention::forward`] computes `O = softmax(scale Q K^T + mask) V` and the
//! per-row log-sum-exp `L` with one of four versions (three in `attention.cu`, the Hopper one
//! in `fa_hopper.cu`); [`FlashAttention::fastest`] names the best one this GPU has.
//! [`DeviceProblem`] carries a batch's shape to the GPU (cumulative sequence lengths, so
//! variable-length batches cost no padding).

use anyhow::{Result, bail};
use common::dtype::Dtype;
use common::element::Element;
use common::family::attention::AttentionArgs;
use common::gpu::kernel::KernelSet;
use common::gpu::kernel_build::KernelBuild;
use common::gpu::nvrtc::KernelSource;
use common::gpu::tma::HeadTiles;
use common::measure::check::{self, CheckReport, Tolerance};
use common::reference::attention::{self as reference, AttentionShape, QueryRow};
use common::session::Refused;
use common::{Gpu, Kernel, LaunchShape, UsageError, sizes};
use cudarc::driver::{CudaSlice, PushKernelArg};

pub const SOURCE: KernelSource = KernelSource {
    file_name: "attention.cu",
    code: include_str!("attention.cu"),
};

/// The Hopper version, compiled for `sm_90a` (wgmma, TMA, setmaxnreg) on Hopper GPUs only.
pub const HOPPER_SOURCE: KernelSource = KernelSource {
    file_name: "fa_hopper.cu",
    code: include_str!("fa_hopper.cu"),
};

mod hopper_tile;
pub use hopper_tile::{
    HOPPER_PRODUCER_REGISTERS, HOPPER_TILES, HopperTile, hopper_defines, hopper_head_dims,
};

/// Head dimensions `fa2_scalar` and `fa2_mma` are compiled for, and day 20's backward
/// versions; `fa_hopper`'s forward also takes 256 ([`HOPPER_TILES`]). The naive version takes
/// any up to [`NAIVE_MAX_HEAD_DIM`].
pub const HEAD_DIMS: [usize; 2] = [64, 128];
pub const NAIVE_MAX_HEAD_DIM: usize = 1024;

/// The largest score matrix the naive version may allocate: beyond it, the memory wall.
pub const NAIVE_MAX_SCORE_BYTES: u64 = 24 << 30;

/// The versions, in the order the table shows them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    Naive,
    Fa2Scalar,
    Fa2Mma,
    /// sm_90a only: wgmma, TMA and warp specialisation (FlashAttention-3's design).
    FaHopper,
}

impl Version {
    pub const ALL: [Version; 4] = [
        Version::Naive,
        Version::Fa2Scalar,
        Version::Fa2Mma,
        Version::FaHopper,
    ];

    /// The name `--kernel` takes.
    pub fn name(self) -> &'static str {
        match self {
            Version::Naive => "naive",
            Version::Fa2Scalar => "fa2_scalar",
            Version::Fa2Mma => "fa2_mma",
            Version::FaHopper => "fa_hopper",
        }
    }

    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|v| v.name() == name)
    }

    /// Whether this version is compiled for (or takes any) head dim `d`: `fa2_scalar` and
    /// `fa2_mma` for [`HEAD_DIMS`], `fa_hopper` for its tiles' ([`HOPPER_TILES`]: 64, 128 and
    /// 256), the naive one for 1 to [`NAIVE_MAX_HEAD_DIM`] (a thread per column).
    pub fn takes_head_dim(self, d: usize) -> bool {
        match self {
            Version::Naive => (1..=NAIVE_MAX_HEAD_DIM).contains(&d),
            Version::Fa2Scalar | Version::Fa2Mma => HEAD_DIMS.contains(&d),
            Version::FaHopper => HopperTile::for_head_dim(d).is_some(),
        }
    }
}

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

/// Every CUDA function of `fa_hopper.cu`: one per dtype and tile.
pub fn hopper_kernel_names() -> Vec<String> {
    let mut names = Vec::new();
    for dtype in ["bf16", "f16"] {
        for tile in &HOPPER_TILES {
            names.push(format!("fa_hopper_{dtype}_d{}", tile.head_dim));
        }
    }
    names
}

/// `fa_hopper`'s work items: query tiles of the longest sequence x heads x sequences (None at
/// a head dim it has no tile for). Its persistent grid (one block per SM) draws them from a
/// counter; items past a shorter sequence's end are skipped.
pub fn hopper_work_items(shape: &AttentionShape) -> Option<usize> {
    let tile = HopperTile::for_head_dim(shape.head_dim)?;
    let max_q = shape.seqlens_q.iter().copied().max().unwrap_or(0);
    let q_tiles = max_q.div_ceil(tile.block_rows()).max(1);
    Some(q_tiles * shape.heads * shape.batch())
}

/// A batch's shape on the device: the cumulative lengths the kernels index with, and where
/// each sequence's block of the naive version's score matrix starts.
pub struct DeviceProblem {
    pub shape: AttentionShape,
    cu_q: CudaSlice<i32>,
    cu_k: CudaSlice<i32>,
    score_offsets: CudaSlice<u64>,
    score_len: usize,
    max_q: usize,
    max_k: usize,
}

impl DeviceProblem {
    /// Checks the shape and uploads its offsets.
    pub fn new(gpu: &Gpu, shape: &AttentionShape) -> Result<Self> {
        validate(shape)?;
        let to_i32 = |v: Vec<usize>| -> Vec<i32> { v.into_iter().map(|x| x as i32).collect() };
        let cu_q = to_i32(AttentionShape::cu_seqlens(&shape.seqlens_q));
        let cu_k = to_i32(AttentionShape::cu_seqlens(&shape.seqlens_k));
        let mut offsets = Vec::with_capacity(shape.batch());
        let mut score_len = 0usize;
        for (&lq, &lk) in shape.seqlens_q.iter().zip(&shape.seqlens_k) {
            offsets.push(score_len as u64);
            score_len += shape.heads * lq * lk;
        }
        Ok(Self {
            shape: shape.clone(),
            cu_q: gpu.upload(&cu_q)?,
            cu_k: gpu.upload(&cu_k)?,
            score_offsets: gpu.stream.clone_htod(&offsets)?,
            score_len,
            max_q: shape.seqlens_q.iter().copied().max().unwrap_or(0),
            max_k: shape.seqlens_k.iter().copied().max().unwrap_or(0),
        })
    }

    /// Bytes of the naive version's score matrix (f32).
    pub fn score_bytes(&self) -> u64 {
        self.score_len as u64 * 4
    }
}

/// Refuses shapes no version can take, with a message that says why. Every size is checked
/// with checked arithmetic, so a shape from absurd flags is refused rather than wrapped
/// around to a small one.
pub fn validate(shape: &AttentionShape) -> Result<(), UsageError> {
    let fail = |m: String| Err(UsageError::new(m));
    if shape.seqlens_q.is_empty() || shape.seqlens_q.len() != shape.seqlens_k.len() {
        return fail("a batch needs at least one sequence, with a key length for each".into());
    }
    let d = shape.head_dim;
    if d == 0 || d > NAIVE_MAX_HEAD_DIM {
        return fail(format!(
            "--head-dim is {d}: it must be 1..={NAIVE_MAX_HEAD_DIM} (the naive version's \
             range; the flash versions are compiled for a few head dims within it)"
        ));
    }
    if shape.heads == 0 || shape.kv_heads == 0 {
        return fail("--heads and --kv-heads must be at least 1".into());
    }
    if !shape.heads.is_multiple_of(shape.kv_heads) {
        return fail(format!(
            "--kv-heads ({}) must divide --heads ({}): each kv head serves a whole group",
            shape.kv_heads, shape.heads
        ));
    }
    if shape.heads > 65535 || shape.batch() > 65535 {
        return fail("at most 65535 heads and 65535 sequences (grid limits)".into());
    }
    let total_q = sizes::sum("the query lengths", &shape.seqlens_q)?;
    let total_k = sizes::sum("the key lengths", &shape.seqlens_k)?;
    let q_elems = sizes::product("Q (tokens x heads x head dim)", &[total_q, shape.heads, d])?;
    let k_elems = sizes::product(
        "K (tokens x kv heads x head dim)",
        &[total_k, shape.kv_heads, d],
    )?;
    if q_elems > i32::MAX as usize || k_elems > i32::MAX as usize {
        return fail(format!(
            "Q has {q_elems} and K {k_elems} elements: tensors over 2^31 elements are not \
             supported"
        ));
    }
    Ok(())
}

/// `--head-dim 256` given alone (this day's CLI and day 20's): the hd256 benchmark shape, batch 1 x seqlen 16384 x 16
/// heads (FlashAttention-3's published hd256 point is 16k tokens at seqlen 16k), instead of
/// the other head dims' 4096 (hidden 2048 would leave 8 heads of 4096 tokens: a short-sequence
/// problem for a tile built for long ones).
pub const HD256_BENCHMARK: (usize, usize, usize) = (1, 16384, 16);

/// The flags with [`HD256_BENCHMARK`] filled in when `--head-dim 256` is the only size flag
/// (and no sweep): every other request is the attention runner's as it is.
pub fn with_hd256_benchmark(mut args: AttentionArgs) -> AttentionArgs {
    let alone = args.head_dim == Some(256)
        && !args.sweep
        && args.seqlen.is_none()
        && args.seqlen_k.is_none()
        && args.batch.is_none()
        && args.varlen.is_empty()
        && args.heads.is_none()
        && args.kv_heads.is_none();
    if alone {
        let (batch, seqlen, heads) = HD256_BENCHMARK;
        (args.batch, args.seqlen, args.heads) = (Some(batch), Some(seqlen), Some(heads));
    }
    args
}

/// Refuses, before any GPU work, a head dim that none of `versions` takes (`--kernel
/// fa2_mma --head-dim 96`, or a sweep, which leaves the naive version out).
pub fn check_head_dim(head_dim: usize, versions: &[Version]) -> Result<(), UsageError> {
    if versions.iter().any(|v| v.takes_head_dim(head_dim)) {
        return Ok(());
    }
    let names: Vec<&str> = versions.iter().map(|v| v.name()).collect();
    Err(untaken_head_dim(head_dim, &names))
}

/// The error for a `--head-dim` none of the versions `names` takes, forward (this day's) or
/// backward (day 20's, whose versions take the same head dims).
pub fn untaken_head_dim(head_dim: usize, names: &[&str]) -> UsageError {
    UsageError::new(format!(
        "--head-dim {head_dim}: none of {} takes it (fa2_scalar and fa2_mma are compiled for \
         head dims {HEAD_DIMS:?}, fa_hopper for {:?}; naive takes 1..={NAIVE_MAX_HEAD_DIM})",
        names.join(", "),
        hopper_head_dims()
    ))
}

/// Why `fa_hopper`, this day's forward or day 20's backward, cannot run head dim `d`: its
/// module is not loaded (`hopper_loaded` false: not a Hopper GPU) or it is not compiled for
/// `d` (both take the head dims of [`HOPPER_TILES`]).
pub fn hopper_refusal(hopper_loaded: bool, d: usize) -> Option<Refused> {
    let dims = hopper_head_dims();
    if !hopper_loaded {
        return Some(Refused(
            "fa_hopper: needs sm_90a (wgmma, TMA), a Hopper GPU; fa2_mma is this GPU's fastest \
             version"
                .into(),
        ));
    }
    (!dims.contains(&d)).then(|| {
        Refused(format!(
            "fa_hopper: compiled for head dims {dims:?}, not {d}"
        ))
    })
}

/// Refuses a storage type that is not an attention dtype, before any GPU work.
pub fn check_dtype(dtype: Dtype) -> Result<(), UsageError> {
    match dtype {
        Dtype::Bf16 | Dtype::F16 => Ok(()),
        other => Err(UsageError::new(format!(
            "--dtype {other}: attention runs on bf16 or f16 inputs"
        ))),
    }
}

/// The unit roundoff of a storage type: 2^-8 for bf16, 2^-11 for f16 (2^-24 for f32).
fn unit_roundoff(dtype: Dtype) -> f64 {
    match dtype {
        Dtype::Bf16 => 2f64.powi(-8),
        Dtype::F16 => 2f64.powi(-11),
        _ => 2f64.powi(-24),
    }
}

/// What the f32 parts of a kernel add, relative to the magnitudes: scores summed over the
/// head dim in f32, f32 (or `ex2.approx`) exponentials, the online softmax's rescaling, and
/// the f32 sums of `P V` over the keys. Each is a relative error of a few 2^-24 per term
/// times a count that grows (at random) with d or the keys; 2^-12 leaves room for that up to
/// millions of keys, and is still 16 times below bf16's unit roundoff. The largest head dim,
/// 256 (`fa_hopper`), moves each P by at most scale x 256 x 2^-24 x sum |q k|, about 2^-12
/// with the tests' inputs (sum |q k| ~ 256, scale 1/16) if every rounding went the same
/// way, about 2^-16 at random: inside that allowance.
const O_F32_PARTS: f64 = 1.0 / 4096.0;

/// The per-element tolerance of O, the part that scales with the output itself: `2 u |O|`,
/// `u` the storage type's unit roundoff, for O's own rounding when it is stored and for a
/// row sum taken over the unrounded P while `P V` used the rounded one; and an absolute
/// floor of 1e-5 for the f32 sums. The relative L2 error may be at most `2 u` (random
/// rounding of this kind gives about `0.6 u`). [`o_slack`] adds each element's own share.
pub fn o_tolerance(dtype: Dtype) -> Tolerance {
    let u = unit_roundoff(dtype);
    Tolerance::new(1e-5, 2.0 * u).with_max_rel_l2(2.0 * u)
}

/// Each element's own allowance on top of [`o_tolerance`], from `m = sum_j P_ij |V_jc|` (the
/// reference with `Terms::Absolute`): a kernel that rounds P to 16 bits before `P V`
/// (`fa2_mma`, `fa_hopper`) errs by up to `u m` on that element however much the values
/// cancel, and the f32 parts add [`O_F32_PARTS`] `m`. Dropping a key of weight `w` moves an
/// element by about `w |V_jc - O_ic|`: a wrong mask or a lost tile shows, where a tolerance of
/// 1.6e-2 + 3e-2 |O| (70 times the measured error) let the last 64 keys of a row go.
pub fn o_slack(dtype: Dtype, magnitudes: &[f64]) -> Vec<f64> {
    let per_unit = unit_roundoff(dtype) + O_F32_PARTS;
    magnitudes.iter().map(|m| per_unit * m).collect()
}

/// L is computed from f32 scores of the stored inputs (exact products, f32 sums over d) and
/// f32 exponentials; no 16-bit rounding enters it.
pub const L_TOLERANCE: Tolerance = Tolerance::new(2e-4, 2e-5);

/// The reference at some query rows (every row: [`AttentionShape::all_query_rows`]), computed
/// in blocks on every host core ([`reference::attention_rows_with_magnitudes`]): O and L, and
/// each O element's magnitude for [`o_slack`].
pub struct ExpectedO {
    pub o: Vec<f64>,
    pub lse: Vec<f64>,
    pub magnitudes: Vec<f64>,
}

impl ExpectedO {
    pub fn at_rows<T: Element>(
        q: &[T],
        k: &[T],
        v: &[T],
        shape: &AttentionShape,
        rows: &[QueryRow],
    ) -> Self {
        let (out, magnitudes) =
            reference::attention_rows_with_magnitudes(q, k, v, shape, shape.default_scale(), rows);
        Self {
            o: out.o,
            lse: out.lse,
            magnitudes,
        }
    }

    /// Checks O, a whole `[total_q, heads, head_dim]` output, at the flat indices `at` of
    /// the reference's values (None: the reference has every element, in order).
    pub fn check_o<T: Element>(
        &self,
        got: &[T],
        at: Option<&[usize]>,
        shape: &[usize],
    ) -> CheckReport {
        let slack = o_slack(T::DTYPE, &self.magnitudes);
        check::compare_at_with_slack(got, at, &self.o, &slack, shape, o_tolerance(T::DTYPE))
    }

    /// Checks L, a whole `[total_q, heads]` output, likewise.
    pub fn check_lse(&self, got: &[f32], at: Option<&[usize]>, shape: &[usize]) -> CheckReport {
        check::compare_at_with_slack(got, at, &self.lse, &[], shape, L_TOLERANCE)
    }
}

/// The storage types of attention: f16 and bf16.
fn dtype_name<T: Element>() -> Result<&'static str> {
    match T::DTYPE {
        Dtype::Bf16 | Dtype::F16 => Ok(T::NAME),
        other => bail!(UsageError::new(format!(
            "attention runs on bf16 or f16 inputs, not {other}"
        ))),
    }
}

/// The day's kernels, compiled and loaded for one GPU: `fa_hopper` only on Hopper.
pub struct FlashAttention {
    kernels: KernelSet,
    /// `fa_hopper.cu`'s kernels: on Hopper only.
    hopper: Option<KernelSet>,
    /// `fa_hopper`'s ticket counter, [next item, blocks done]: zero between launches (the
    /// last block of each launch sets it back), so the launches of one layer must not run at
    /// once on two streams.
    tickets: Option<CudaSlice<i32>>,
    sms: usize,
}

/// `attention.cu`'s versions, for the GPU's own architecture.
fn portable_build() -> KernelBuild {
    KernelBuild::device(SOURCE, kernel_names())
}

/// `fa_hopper.cu`'s kernels, for sm_90a with [`hopper_defines`]: the tiles the launcher sizes
/// its launches from are the ones the kernels were compiled with.
fn hopper_build() -> KernelBuild {
    KernelBuild::hopper(HOPPER_SOURCE, hopper_kernel_names()).with_options(hopper_defines())
}

/// What the day compiles: `attention.cu` for the GPU's own architecture and, on Hopper,
/// `fa_hopper.cu` for sm_90a. The loader compiles these, the compile test checks them, and
/// `cargo xtask bundle` compiles them ahead of time for the GPU host's kernel cache.
pub fn kernel_builds() -> Vec<KernelBuild> {
    vec![portable_build(), hopper_build()]
}

/// The tensors of one forward call.
pub struct Tensors<'a, T: Element> {
    pub q: &'a CudaSlice<T>,
    pub k: &'a CudaSlice<T>,
    pub v: &'a CudaSlice<T>,
    pub lse: &'a mut CudaSlice<f32>,
    /// The naive version's score matrix, [`DeviceProblem::score_bytes`] long; unused by the
    /// flash versions.
    pub scores: Option<&'a mut CudaSlice<f32>>,
}

impl FlashAttention {
    pub fn load(gpu: &Gpu) -> Result<Self> {
        let hopper = hopper_build();
        let hopper = match hopper.arch_on(&gpu.info.arch) {
            Some(_) => Some(KernelSet::load_build(gpu, &hopper)?),
            None => None,
        };
        let tickets = match hopper {
            Some(_) => Some(gpu.stream.alloc_zeros::<i32>(2)?),
            None => None,
        };
        Ok(Self {
            kernels: KernelSet::load_build(gpu, &portable_build())?,
            hopper,
            tickets,
            sms: gpu.info.sms as usize,
        })
    }

    /// The fastest version this GPU runs: `fa_hopper` on Hopper, `fa2_mma` elsewhere.
    pub fn fastest(&self) -> Version {
        match self.hopper {
            Some(_) => Version::FaHopper,
            None => Version::Fa2Mma,
        }
    }

    /// The kernel a version runs (the first of the naive three) and its launch shape, for the
    /// table; refused where the version cannot take the problem.
    pub fn plan<T: Element>(
        &self,
        version: Version,
        problem: &DeviceProblem,
    ) -> Result<(&Kernel, LaunchShape)> {
        let dtype = dtype_name::<T>()?;
        let shape = &problem.shape;
        let d = shape.head_dim;
        let (heads, batch) = (shape.heads as u32, shape.batch() as u32);
        match version {
            Version::Naive => {
                if problem.score_bytes() > NAIVE_MAX_SCORE_BYTES {
                    return Err(Refused(format!(
                        "naive: S = Q K^T would take {:.1} GiB (over {} GiB): the memory wall \
                         the flash versions remove",
                        problem.score_bytes() as f64 / (1u64 << 30) as f64,
                        NAIVE_MAX_SCORE_BYTES >> 30
                    ))
                    .into());
                }
                if shape.heads * shape.batch() > 65535 {
                    return Err(Refused("naive: heads x batch over 65535".into()).into());
                }
                let kernel = self.kernels.get(&format!("attention_scores_{dtype}"))?;
                let launch = LaunchShape {
                    grid: (
                        problem.max_k.div_ceil(16).max(1) as u32,
                        problem.max_q.div_ceil(16).max(1) as u32,
                        heads * batch,
                    ),
                    block: (16, 16, 1),
                    dynamic_shared_bytes: 0,
                };
                Ok((kernel, launch))
            }
            Version::FaHopper => {
                if let Some(refused) = hopper_refusal(self.hopper.is_some(), d) {
                    return Err(refused.into());
                }
                let hopper = self.hopper.as_ref().expect("loaded, or refused above");
                let kernel = hopper.get(&format!("fa_hopper_{dtype}_d{d}"))?;
                let tile = HopperTile::for_head_dim(d).expect("a tile, or refused above");
                let items = hopper_work_items(&problem.shape).expect("a tile, as above");
                // Tickets run up to items + blocks - 1 in an i32.
                if items + self.sms > i32::MAX as usize {
                    return Err(Refused(format!(
                        "fa_hopper: {items} query tiles x heads x sequences are over 2^31"
                    ))
                    .into());
                }
                // One block per SM, each loading its next item while it computes this one;
                // the items (causal ones differ in cost, longest first) are drawn from a
                // counter, so no block is left with a fixed share of long ones.
                let blocks = items.min(self.sms);
                let launch = LaunchShape {
                    grid: (blocks.max(1) as u32, 1, 1),
                    block: (tile.threads() as u32, 1, 1),
                    dynamic_shared_bytes: tile.shared_bytes() as u32,
                };
                Ok((kernel, launch))
            }
            Version::Fa2Scalar | Version::Fa2Mma => {
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
                let kernel = self
                    .kernels
                    .get(&format!("{}_{dtype}_d{d}", version.name()))?;
                // Query rows per block: a warp per 16 rows (fa2_mma) or the block's four warps
                // on 4 rows each (fa2_scalar).
                let rows = if version == Version::Fa2Mma { 64 } else { 16 };
                let dynamic_shared_bytes = match version {
                    // Q tile, then two K and two V tiles, 64 rows of d + 8 halves each.
                    Version::Fa2Mma => (5 * 64 * (d + 8) * 2) as u32,
                    _ => 0,
                };
                let launch = LaunchShape {
                    grid: (problem.max_q.div_ceil(rows).max(1) as u32, heads, batch),
                    block: (128, 1, 1),
                    dynamic_shared_bytes,
                };
                Ok((kernel, launch))
            }
        }
    }

    /// Enqueues one forward pass on `gpu.stream`: `o` and `t.lse` are written.
    pub fn forward<T: Element>(
        &self,
        gpu: &Gpu,
        version: Version,
        problem: &DeviceProblem,
        t: Tensors<'_, T>,
        o: &mut CudaSlice<T>,
    ) -> Result<()> {
        let shape = &problem.shape;
        let d = shape.head_dim;
        let q_len = shape.total_q() * shape.heads * d;
        let k_len = shape.total_k() * shape.kv_heads * d;
        if t.q.len() != q_len || o.len() != q_len {
            bail!("attention: Q and O must hold {q_len} elements (total_q x heads x head_dim)");
        }
        if t.k.len() != k_len || t.v.len() != k_len {
            bail!("attention: K and V must hold {k_len} elements (total_k x kv_heads x head_dim)");
        }
        if t.lse.len() != shape.total_q() * shape.heads {
            bail!("attention: L must hold total_q x heads floats");
        }
        let (kernel, launch_shape) = self.plan::<T>(version, problem)?;
        let (heads, kv_heads) = (shape.heads as i32, shape.kv_heads as i32);
        let causal = i32::from(shape.causal);
        let scale = shape.default_scale() as f32;
        match version {
            Version::Naive => {
                let Some(scores) = t.scores else {
                    bail!("the naive version needs a score buffer");
                };
                if scores.len() < problem.score_len {
                    bail!("the score buffer must hold {} floats", problem.score_len);
                }
                let dtype = dtype_name::<T>()?;
                let d_i32 = d as i32;
                let mut l = gpu.stream.launch_builder(&kernel.func);
                l.arg(t.q)
                    .arg(t.k)
                    .arg(&mut *scores)
                    .arg(&problem.cu_q)
                    .arg(&problem.cu_k);
                l.arg(&problem.score_offsets)
                    .arg(&heads)
                    .arg(&kv_heads)
                    .arg(&d_i32);
                l.arg(&scale).arg(&causal);
                // SAFETY: matches attention_scores_<T>'s signature; every index is bounded by
                // the cumulative lengths, which `DeviceProblem::new` built from this shape,
                // and the buffers' lengths were checked above.
                unsafe { l.launch(kernel.config(&launch_shape)?) }?;

                let softmax = self.kernels.get("attention_softmax_rows")?;
                let rows = LaunchShape {
                    grid: (
                        problem.max_q.div_ceil(8).max(1) as u32,
                        shape.heads as u32,
                        shape.batch() as u32,
                    ),
                    block: (256, 1, 1),
                    dynamic_shared_bytes: 0,
                };
                let mut l = gpu.stream.launch_builder(&softmax.func);
                l.arg(&mut *scores)
                    .arg(&mut *t.lse)
                    .arg(&problem.cu_q)
                    .arg(&problem.cu_k);
                l.arg(&problem.score_offsets).arg(&heads);
                // SAFETY: as above; one warp per (row, head, sequence) inside the lengths.
                unsafe { l.launch(softmax.config(&rows)?) }?;

                let pv = self.kernels.get(&format!("attention_pv_{dtype}"))?;
                let per_row = LaunchShape {
                    grid: (
                        problem.max_q.max(1) as u32,
                        shape.heads as u32,
                        shape.batch() as u32,
                    ),
                    block: (d as u32, 1, 1),
                    dynamic_shared_bytes: 0,
                };
                let mut l = gpu.stream.launch_builder(&pv.func);
                l.arg(&*scores)
                    .arg(t.v)
                    .arg(&mut *o)
                    .arg(&problem.cu_q)
                    .arg(&problem.cu_k);
                l.arg(&problem.score_offsets).arg(&heads).arg(&kv_heads);
                // SAFETY: as above; blockDim.x is the head dim, so c < d.
                unsafe { l.launch(pv.config(&per_row)?) }?;
            }
            Version::Fa2Scalar | Version::Fa2Mma => {
                let scale_log2 = scale * std::f32::consts::LOG2_E;
                let mut l = gpu.stream.launch_builder(&kernel.func);
                l.arg(t.q).arg(t.k).arg(t.v).arg(&mut *o).arg(&mut *t.lse);
                l.arg(&problem.cu_q)
                    .arg(&problem.cu_k)
                    .arg(&heads)
                    .arg(&kv_heads);
                l.arg(&scale_log2).arg(&causal);
                // SAFETY: matches FLASH_KERNEL's signature; the head dim is the kernel's own
                // (chosen by name), the buffers' lengths were checked above, and every row
                // and key index is bounded by the cumulative lengths of this shape.
                unsafe { l.launch(kernel.config(&launch_shape)?) }?;
            }
            Version::FaHopper => {
                let scale_log2 = scale * std::f32::consts::LOG2_E;
                let tiles = |tokens: usize, heads: usize, box_tokens: usize| HeadTiles {
                    tokens,
                    heads,
                    dim: d,
                    box_tokens: box_tokens as u32,
                };
                // The tile the launch was planned with: Q boxes of the block's rows, K and V
                // boxes of a tile's keys, as `FhLayout` expects them.
                let tile = HopperTile::for_head_dim(d).expect("planned above");
                let q_tiles = tiles(shape.total_q(), shape.heads, tile.block_rows());
                let kv_tiles = tiles(shape.total_k(), shape.kv_heads, tile.keys);
                let map_q = q_tiles.encode(gpu, t.q)?;
                let map_k = kv_tiles.encode(gpu, t.k)?;
                let map_v = kv_tiles.encode(gpu, t.v)?;
                let mut l = gpu.stream.launch_builder(&kernel.func);
                l.arg(&map_q).arg(&map_k).arg(&map_v);
                l.arg(&mut *o).arg(&mut *t.lse);
                l.arg(&problem.cu_q)
                    .arg(&problem.cu_k)
                    .arg(&heads)
                    .arg(&kv_heads);
                let q_tiles = problem.max_q.div_ceil(tile.block_rows()).max(1) as i32;
                let items = hopper_work_items(shape).expect("planned above") as i32;
                l.arg(&scale_log2).arg(&causal).arg(&q_tiles).arg(&items);
                let tickets = self.tickets.as_ref().expect("allocated with the kernels");
                l.arg(tickets);
                // SAFETY: matches FA_HOPPER_KERNEL's signature; the maps describe exactly Q,
                // K and V (lengths checked above) and the TMA zero-fills past their ends; O
                // and L are written only at rows inside the cumulative lengths; the tickets
                // are the layer's two counters, zero between launches on this stream.
                unsafe { l.launch(kernel.config(&launch_shape)?) }?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kernel_compiles_without_spilling() {
        common::testing::assert_builds_compile_without_spills(&kernel_builds());
    }

    /// ptxas's C7510-C7520: "wgmma.mma_async instructions are serialized" (each product then
    /// waits for the one before). Issuing one step's two products in a different order on
    /// two branches did that and measured about 30% slower at every length on the H100.
    #[test]
    fn the_hopper_version_keeps_wgmma_asynchronous() {
        common::testing::compile_keeping_wgmma_asynchronous(&hopper_build());
    }

    /// Without the tile defines `fa_hopper.cu` stops at its `#error`: the kernels cannot be
    /// compiled with tiles other than the launcher's.
    #[test]
    fn the_hopper_version_will_not_compile_without_the_tile_defines() {
        let what = "NVRTC compile of fa_hopper.cu for sm_90a without defines";
        if !common::testing::nvrtc_or_skip(what) {
            return;
        }
        let Err(err) = common::gpu::nvrtc::compile(&HOPPER_SOURCE, "sm_90a", &[]) else {
            panic!("{what}: compiled");
        };
        assert!(format!("{err:#}").contains("HopperTile"), "{err:#}");
    }

    #[test]
    fn names_round_trip() {
        for v in Version::ALL {
            assert_eq!(Version::from_name(v.name()), Some(v));
        }
        assert_eq!(Version::from_name("fa3"), None);
    }

    /// What `fa2_mma` and `fa_hopper` do to one row, in f32 on the CPU: scores of the stored
    /// inputs, P = exp(s - max) rounded to `T` before `P V`, the row sum over the unrounded
    /// (or, `rounded_sum`, the rounded) P, and O rounded to `T` when stored.
    fn emulate_16_bit_kernel<T: Element>(
        q: &[T],
        k: &[T],
        v: &[T],
        shape: &AttentionShape,
        rounded_sum: bool,
    ) -> Vec<T> {
        let (d, kv) = (shape.head_dim, shape.kv_heads);
        let lk = shape.seqlens_k[0];
        let scale = shape.default_scale() as f32;
        let mut o = Vec::with_capacity(q.len());
        for row in shape.all_query_rows() {
            let q_row = &q[(row.token * shape.heads + row.head) * d..][..d];
            let at = |j: usize| (j * kv + row.head / shape.group()) * d;
            let s: Vec<f32> = (0..lk)
                .map(|j| {
                    let k_row = &k[at(j)..][..d];
                    let dot: f32 = q_row
                        .iter()
                        .zip(k_row)
                        .map(|(a, b)| a.to_f64() as f32 * b.to_f64() as f32)
                        .sum();
                    dot * scale
                })
                .collect();
            let max = s.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let p: Vec<f32> = s.iter().map(|x| (x - max).exp()).collect();
            let p16: Vec<f32> = p
                .iter()
                .map(|&x| T::from_f64(x as f64).to_f64() as f32)
                .collect();
            let sum: f32 = if rounded_sum { &p16 } else { &p }.iter().sum();
            for c in 0..d {
                let acc: f32 = (0..lk).map(|j| p16[j] * v[at(j) + c].to_f64() as f32).sum();
                o.push(T::from_f64((acc / sum) as f64));
            }
        }
        o
    }

    /// The O check on the CPU, where a wrong answer can be made on purpose: a row that lost
    /// its last 64 of 4096 keys (a dropped key tile, renormalized) fails it, while the
    /// reference rounded to the storage type and a CPU emulation of the 16-bit kernels'
    /// rounding pass.
    fn the_o_check_tells_a_lost_key_tile_from_rounding<T: Element>(seed: u64, d: usize) {
        use common::measure::inputs;
        const KEYS: usize = 4096;
        let shape = AttentionShape::uniform(1, 16, KEYS, 2, 1, d, false);
        let d = shape.head_dim;
        let (q_len, k_len) = (shape.total_q() * shape.heads * d, shape.total_k() * d);
        let q: Vec<T> = inputs::uniform(q_len, -2.0, 2.0, seed);
        let k: Vec<T> = inputs::uniform(k_len, -2.0, 2.0, seed + 1);
        let v: Vec<T> = inputs::uniform(k_len, -1.0, 1.0, seed + 2);
        let expected = ExpectedO::at_rows(&q, &k, &v, &shape, &shape.all_query_rows());
        let o_shape = [shape.total_q(), shape.heads, d];
        let what = T::NAME;

        let stored: Vec<T> = expected.o.iter().map(|&x| T::from_f64(x)).collect();
        let report = expected.check_o(&stored, None, &o_shape);
        assert!(report.passed(), "{what}: the rounded reference: {report}");
        for rounded_sum in [false, true] {
            let emulated = emulate_16_bit_kernel(&q, &k, &v, &shape, rounded_sum);
            let report = expected.check_o(&emulated, None, &o_shape);
            assert!(report.passed(), "{what}: the emulated kernel: {report}");
        }

        // Row (token 11, head 1) without its last 64 keys, every other row right.
        let short = AttentionShape::uniform(1, 16, KEYS - 64, 2, 1, d, false);
        let row = [QueryRow { token: 11, head: 1 }];
        let cut = (KEYS - 64) * d;
        let lost = reference::attention_rows(
            &q,
            &k[..cut],
            &v[..cut],
            &short,
            shape.default_scale(),
            &row,
        );
        let mut wrong = stored.clone();
        let at = (11 * shape.heads + 1) * d;
        for (slot, &x) in wrong[at..at + d].iter_mut().zip(&lost.o) {
            *slot = T::from_f64(x);
        }
        let report = expected.check_o(&wrong, None, &o_shape);
        assert!(
            !report.passed(),
            "{what}: a row lost 64 keys and passed: {report}"
        );
        assert!(
            report.first.iter().all(|m| m.index[..2] == [11, 1]),
            "{what}: only the short row fails: {report}"
        );
        if T::DTYPE == Dtype::Bf16 && d == 64 {
            // The per-element bound this replaced let every element of it through (only the
            // L2 bound of so small a problem noticed; among thousands of rows it would not).
            let old = Tolerance::new(1.6e-2, 3e-2).with_max_rel_l2(1e-2);
            let report = check::compare(&wrong, &expected.o, &o_shape, old);
            assert_eq!(report.mismatches, 0, "{report}");
        }
    }

    #[test]
    fn the_o_check_fails_a_lost_key_tile_and_passes_rounding() {
        the_o_check_tells_a_lost_key_tile_from_rounding::<half::bf16>(10, 64);
        the_o_check_tells_a_lost_key_tile_from_rounding::<half::f16>(20, 64);
        // Head dim 256 (fa_hopper's widest): scores summed over 256 products in f32 still
        // sit well inside the f32 parts' 2^-12, and a lost tile still shows (bf16 only: the
        // f16 case costs as much again and tests nothing the one at 64 does not).
        the_o_check_tells_a_lost_key_tile_from_rounding::<half::bf16>(30, 256);
    }

    #[test]
    fn the_o_allowance_follows_the_terms_not_a_fixed_floor() {
        // An output near 0 whose terms are large gets their allowance; one with small terms
        // gets little. 2^-8 + 2^-12 per unit of magnitude in bf16, 2^-11 + 2^-12 in f16.
        let slack = o_slack(Dtype::Bf16, &[0.5, 1e-3]);
        assert!((slack[0] - 0.5 * (2f64.powi(-8) + 2f64.powi(-12))).abs() < 1e-15);
        assert!(slack[1] < 5e-6);
        assert!(o_slack(Dtype::F16, &[0.5])[0] < slack[0] / 4.0);
        let t = o_tolerance(Dtype::Bf16);
        assert!(t.atol <= 1e-5 && t.rtol < 1e-2 && t.max_rel_l2 < 1e-2);
    }

    #[test]
    fn head_dims_and_dtypes_no_selected_version_takes_are_refused() {
        assert!(check_head_dim(96, &Version::ALL).is_ok());
        let flash = [Version::Fa2Mma, Version::FaHopper];
        assert!(check_head_dim(128, &flash).is_ok());
        let err = check_head_dim(96, &flash).unwrap_err().to_string();
        assert!(
            err.contains("--head-dim 96") && err.contains("fa2_mma"),
            "{err}"
        );
        assert!(check_head_dim(2048, &Version::ALL).is_err());
        assert!(check_dtype(Dtype::Bf16).is_ok() && check_dtype(Dtype::F16).is_ok());
        assert!(check_dtype(Dtype::F32).is_err());
    }

    #[test]
    fn hopper_work_items_count_query_tiles_heads_and_sequences() {
        // 128 query rows per item at head dims 128 and 256, 192 at 64; none at 96.
        let shape = AttentionShape::uniform(3, 300, 10, 5, 5, 128, false);
        assert_eq!(hopper_work_items(&shape), Some(3 * 5 * 3));
        let shape = AttentionShape::uniform(3, 300, 10, 5, 5, 64, true);
        assert_eq!(hopper_work_items(&shape), Some(2 * 5 * 3));
        let shape = AttentionShape::uniform(3, 300, 10, 5, 5, 256, true);
        assert_eq!(hopper_work_items(&shape), Some(3 * 5 * 3));
        let shape = AttentionShape::uniform(3, 300, 10, 5, 5, 96, true);
        assert_eq!(hopper_work_items(&shape), None);
    }

    #[test]
    fn head_dim_256_is_fa_hopper_s_and_naive_s_only() {
        for v in Version::ALL {
            let takes = matches!(v, Version::Naive | Version::FaHopper);
            assert_eq!(v.takes_head_dim(256), takes, "{}", v.name());
        }
        assert!(check_head_dim(256, &Version::ALL).is_ok());
        let fa2 = [Version::Fa2Scalar, Version::Fa2Mma];
        let err = check_head_dim(256, &fa2).unwrap_err().to_string();
        assert!(err.contains("--head-dim 256") && err.contains("fa_hopper for [64, 128, 256]"));
        // Off Hopper fa_hopper refuses for its GPU, on Hopper for a head dim it has no tile for;
        // day 20's backward keeps its own head dims.
        assert!(hopper_refusal(true, 256).is_none());
        assert!(hopper_refusal(false, 256).unwrap().0.contains("sm_90a"));
        assert!(hopper_refusal(true, 96).unwrap().0.contains("not 96"));
    }

    #[test]
    fn sizes_that_overflow_are_refused_not_wrapped() {
        let huge = AttentionShape {
            heads: 2,
            kv_heads: 2,
            head_dim: 64,
            seqlens_q: vec![usize::MAX, 1],
            seqlens_k: vec![1, 1],
            causal: false,
        };
        assert!(
            validate(&huge)
                .unwrap_err()
                .to_string()
                .contains("too large")
        );
        let wide = AttentionShape::uniform(1, 1 << 60, 1, 64, 64, 64, false);
        assert!(
            validate(&wide)
                .unwrap_err()
                .to_string()
                .contains("too large")
        );
        let big = AttentionShape::uniform(1, 1 << 26, 1, 1, 1, 64, false);
        assert!(validate(&big).unwrap_err().to_string().contains("2^31"));
        let no_heads = AttentionShape::uniform(1, 4, 4, 0, 1, 64, false);
        assert!(
            validate(&no_heads)
                .unwrap_err()
                .to_string()
                .contains("at least 1")
        );
    }

    #[test]
    fn shapes_that_no_version_takes_are_refused() {
        let ok = AttentionShape::uniform(2, 17, 33, 8, 2, 64, true);
        assert!(validate(&ok).is_ok());
        let bad_group = AttentionShape {
            kv_heads: 3,
            ..ok.clone()
        };
        assert!(
            validate(&bad_group)
                .unwrap_err()
                .to_string()
                .contains("must divide")
        );
        let no_dim = AttentionShape {
            head_dim: 0,
            ..ok.clone()
        };
        assert!(validate(&no_dim).is_err());
    }
}
