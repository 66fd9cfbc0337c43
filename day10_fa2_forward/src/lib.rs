//! Day 10: FlashAttention-2, forward, as a layer other days call (day 20's backward builds on
//! it). [`FlashAttention::forward`] computes `O = softmax(scale Q K^T + mask) V` and the
//! per-row log-sum-exp `L` with one of four versions (three in `attention.cu`, the Hopper one
//! in `fa_hopper.cu`); [`FlashAttention::fastest`] names the best one this GPU has.
//! [`DeviceProblem`] carries a batch's shape to the GPU (cumulative sequence lengths, so
//! variable-length batches cost no padding).

use anyhow::{Result, bail};
use common::dtype::Dtype;
use common::element::Element;
use common::kernel::KernelSet;
use common::nvrtc::KernelSource;
use common::reference::attention::AttentionShape;
use common::session::Refused;
use common::tma::HeadTiles;
use common::{Gpu, Kernel, LaunchShape, UsageError};
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

/// `fa_hopper`'s keys per tile and its ring of K/V stages, as `fa_hopper.cu` has them.
const HOPPER_KEYS: usize = 128;
const HOPPER_STAGES: usize = 2;

/// `fa_hopper`'s consumer warpgroups (64 query rows each) for a head dim, as `FhConfig` in
/// `fa_hopper.cu`: three for head dim 64, two for 128.
fn hopper_consumers(d: usize) -> usize {
    if d == 64 { 3 } else { 2 }
}

/// Head dimensions the flash kernels are compiled for (the naive version takes any up to
/// [`NAIVE_MAX_HEAD_DIM`]).
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

    /// Query rows per block of the flash versions.
    fn block_rows(self, head_dim: usize) -> usize {
        match self {
            Version::Naive => 1,
            Version::Fa2Scalar => 16,
            Version::Fa2Mma => 64,
            Version::FaHopper => 64 * hopper_consumers(head_dim),
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

/// Every CUDA function of `fa_hopper.cu`.
pub fn hopper_kernel_names() -> Vec<String> {
    let mut names = Vec::new();
    for dtype in ["bf16", "f16"] {
        for d in HEAD_DIMS {
            names.push(format!("fa_hopper_{dtype}_d{d}"));
        }
    }
    names
}

/// `fa_hopper`'s query tiles per sequence (of the longest) and work items (query tiles x
/// heads x sequences).
fn hopper_items(problem: &DeviceProblem, d: usize) -> usize {
    let q_tiles = problem
        .max_q
        .div_ceil(Version::FaHopper.block_rows(d))
        .max(1);
    q_tiles * problem.shape.heads * problem.shape.batch()
}

/// `fa_hopper`'s dynamic shared memory: Q, two stages of K and of V, 10 barriers, and 1024
/// bytes of slack to align the tiles to the swizzle's 1024-byte period.
fn hopper_shared_bytes(d: usize) -> u32 {
    let tiles = (64 * hopper_consumers(d) + 2 * HOPPER_STAGES * HOPPER_KEYS) * d * 2;
    (tiles + 8 * (2 + 4 * HOPPER_STAGES) + 1024) as u32
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

/// Refuses shapes no version can take, with a message that says why.
pub fn validate(shape: &AttentionShape) -> Result<(), UsageError> {
    let fail = |m: String| Err(UsageError::new(m));
    if shape.seqlens_q.is_empty() || shape.seqlens_q.len() != shape.seqlens_k.len() {
        return fail("a batch needs at least one sequence, with a key length for each".into());
    }
    if shape.heads == 0 || shape.kv_heads == 0 || !shape.heads.is_multiple_of(shape.kv_heads) {
        return fail(format!(
            "--kv-heads ({}) must divide --heads ({}): each kv head serves a whole group",
            shape.kv_heads, shape.heads
        ));
    }
    if shape.head_dim == 0 || shape.head_dim > NAIVE_MAX_HEAD_DIM {
        return fail(format!("--head-dim must be 1..={NAIVE_MAX_HEAD_DIM}"));
    }
    if shape.heads > 65535 || shape.batch() > 65535 {
        return fail("at most 65535 heads and 65535 sequences (grid limits)".into());
    }
    let elems = |t: usize, h: usize| (t as u64) * (h as u64) * (shape.head_dim as u64);
    if elems(shape.total_q(), shape.heads) > i32::MAX as u64
        || elems(shape.total_k(), shape.kv_heads) > i32::MAX as u64
        || shape.total_q() > i32::MAX as usize
    {
        return fail("tensors over 2^31 elements are not supported".into());
    }
    Ok(())
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
    hopper: Option<KernelSet>,
    sms: usize,
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
        let hopper = match gpu.info.arch.as_str() {
            "sm_90" => Some(KernelSet::load_for_arch(
                gpu,
                &HOPPER_SOURCE,
                "sm_90a",
                hopper_kernel_names(),
            )?),
            _ => None,
        };
        Ok(Self {
            kernels: KernelSet::load(gpu, &SOURCE, kernel_names())?,
            hopper,
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
                let Some(hopper) = &self.hopper else {
                    return Err(Refused(
                        "fa_hopper: needs sm_90a (wgmma, TMA), a Hopper GPU; fa2_mma is this \
                         GPU's fastest version"
                            .into(),
                    )
                    .into());
                };
                if !HEAD_DIMS.contains(&d) {
                    return Err(Refused(format!(
                        "fa_hopper: compiled for head dims {HEAD_DIMS:?}, not {d}"
                    ))
                    .into());
                }
                let kernel = hopper.get(&format!("fa_hopper_{dtype}_d{d}"))?;
                let consumers = hopper_consumers(d);
                let items = hopper_items(problem, d);
                if items > i32::MAX as usize {
                    return Err(Refused(format!(
                        "fa_hopper: {items} query tiles x heads x sequences are over 2^31"
                    ))
                    .into());
                }
                // Without a mask every item costs the same: one block per SM walks its share,
                // loading the next item while it stores the last (measured: +3% at 4096, +12%
                // at 1024). Causal items differ (the longest first): one block each, handed out
                // by the hardware as SMs free up; a fixed share per block measured up to 40%
                // slower (a block's items can all be long ones).
                let blocks = if shape.causal {
                    items
                } else {
                    items.min(self.sms)
                };
                let launch = LaunchShape {
                    grid: (blocks.max(1) as u32, 1, 1),
                    block: (128 * (1 + consumers) as u32, 1, 1),
                    dynamic_shared_bytes: hopper_shared_bytes(d),
                };
                Ok((kernel, launch))
            }
            Version::Fa2Scalar | Version::Fa2Mma => {
                if !HEAD_DIMS.contains(&d) {
                    return Err(Refused(format!(
                        "{}: compiled for head dims {HEAD_DIMS:?}, not {d}",
                        version.name()
                    ))
                    .into());
                }
                let kernel = self
                    .kernels
                    .get(&format!("{}_{dtype}_d{d}", version.name()))?;
                let rows = version.block_rows(d);
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
                let q_tiles = tiles(shape.total_q(), shape.heads, version.block_rows(d));
                let kv_tiles = tiles(shape.total_k(), shape.kv_heads, HOPPER_KEYS);
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
                let q_tiles = problem.max_q.div_ceil(version.block_rows(d)).max(1) as i32;
                let items = hopper_items(problem, d) as i32;
                l.arg(&scale_log2).arg(&causal).arg(&q_tiles).arg(&items);
                // SAFETY: matches FA_HOPPER_KERNEL's signature; the maps describe exactly Q,
                // K and V (lengths checked above) and the TMA zero-fills past their ends; O
                // and L are written only at rows inside the cumulative lengths.
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
    fn every_kernel_compiles_for_sm90_without_spilling() {
        let names = kernel_names();
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        common::testing::assert_compiles_without_spills(&SOURCE, "sm_90", &names);
    }

    #[test]
    fn the_hopper_version_compiles_for_sm90a_without_spilling() {
        let names = hopper_kernel_names();
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        common::testing::assert_compiles_without_spills(&HOPPER_SOURCE, "sm_90a", &names);
    }

    #[test]
    fn hopper_shared_memory_fits_an_h100() {
        // 227 KiB of dynamic shared memory per block on sm_90.
        assert!(hopper_shared_bytes(128) <= 227 * 1024);
        assert_eq!(hopper_shared_bytes(64) % 8, 0);
    }

    #[test]
    fn names_round_trip() {
        for v in Version::ALL {
            assert_eq!(Version::from_name(v.name()), Some(v));
        }
        assert_eq!(Version::from_name("fa3"), None);
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
