//! Day 20: FlashAttention-2, backward, and the layer that pairs it with day 10's forward.
//! [`FlashAttention::backward`] computes dQ, dK and dV from Q, K, V, the forward's O and
//! log-sum-exp L, and dO, with one of four versions (three in `attention_bwd.cu`, the Hopper
//! one in `fa_hopper_bwd.cu`), in a fast mode (f32 atomics for dQ) or a deterministic one (the
//! same bits every run). [`FlashAttention::fastest`] names the best pair this GPU has.

use anyhow::{Result, bail};
use common::dtype::Dtype;
use common::element::Element;
use common::gpu::kernel::KernelSet;
use common::gpu::kernel_build::KernelBuild;
use common::gpu::nvrtc::KernelSource;
use common::gpu::tma::{HeadTiles, RowSpans};
use common::measure::check::{self, CheckReport, Tolerance};
use common::reference::attention::{
    self as reference, AttentionGradients, AttentionShape, BackwardInputs, KeyRow, QueryRow,
};
use common::session::Refused;
use common::{Gpu, Kernel, LaunchShape, UsageError};
use cudarc::driver::{CudaSlice, CudaViewMut, PushKernelArg};

mod hopper_tile;
pub use hopper_tile::{BACKWARD_TILES, BackwardTile, hopper_defines};

pub use day10::{DeviceProblem, HEAD_DIMS, NAIVE_MAX_HEAD_DIM, Tensors, check_dtype, validate};

pub const SOURCE: KernelSource = KernelSource {
    file_name: "attention_bwd.cu",
    code: include_str!("attention_bwd.cu"),
};

/// The Hopper version, compiled for `sm_90a` (wgmma, TMA, setmaxnreg) on Hopper GPUs only.
pub const HOPPER_SOURCE: KernelSource = KernelSource {
    file_name: "fa_hopper_bwd.cu",
    code: include_str!("fa_hopper_bwd.cu"),
};

/// `fa_hopper`'s tile for head dim `d` (callers have checked that the version takes `d`).
fn hopper_tile(d: usize) -> &'static BackwardTile {
    BackwardTile::for_head_dim(d).expect("every flash head dim has a backward tile")
}

/// Floats per row (one head of one sequence) of the transposed L and D: the longest sequence
/// rounded up to 16 bytes, so that every row, and every query tile in it, starts 16-byte
/// aligned (the TMA requires it of a box's innermost coordinate).
fn hopper_pitch(max_q: usize) -> usize {
    max_q.div_ceil(4).max(1) * 4
}

/// The largest P plus dS the naive version may allocate (two f32 matrices of the scores'
/// size): day 10's limit for its one matrix.
pub const NAIVE_MAX_SCORE_BYTES: u64 = day10::NAIVE_MAX_SCORE_BYTES;

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

    /// Whether this version is compiled for (or takes any) head dim `d`: `fa2_*` for
    /// [`HEAD_DIMS`], `fa_hopper` for its tiles' ([`BACKWARD_TILES`]: 64, 128 and 256), the
    /// naive one for 1 to [`NAIVE_MAX_HEAD_DIM`] (a thread per column; the CLI then runs day
    /// 10's naive forward for O and L).
    pub fn takes_head_dim(self, d: usize) -> bool {
        match self {
            Version::Naive => (1..=NAIVE_MAX_HEAD_DIM).contains(&d),
            Version::FaHopper => BackwardTile::for_head_dim(d).is_some(),
            _ => HEAD_DIMS.contains(&d),
        }
    }

    /// (queries, keys) per tile of the `fa2_*` versions (`fa_hopper`'s are its table's).
    fn tiles(self) -> (usize, usize) {
        match self {
            Version::Fa2Scalar => (8, 32),
            Version::Fa2Mma => (64, 64),
            Version::Naive | Version::FaHopper => (1, 1),
        }
    }

    /// Dynamic shared memory of the main kernel and of the deterministic dQ pass.
    fn shared_bytes(self, d: usize) -> (u32, u32) {
        match self {
            // K, V, two Q and two dO tiles (64 rows of d + 8 halves), dS^T (64 x 72 halves),
            // then L and D of the two query tiles (4 x 64 floats).
            Version::Fa2Mma => (
                ((6 * 64 * (d + 8) + 64 * 72) * 2 + 4 * 64 * 4) as u32,
                (6 * 64 * (d + 8) * 2) as u32,
            ),
            _ => (0, 0),
        }
    }
}

/// How dQ, which every key tile contributes to, is summed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// f32 atomics into a dQ accumulator during the key-tile pass (the order, and so the
    /// last bits, vary between runs).
    Atomic,
    /// The same bits every run. `fa2_*`: no float atomics; a second pass, one block per query
    /// tile, sums dQ over the key tiles in a fixed order (S and dP computed twice).
    /// `fa_hopper`: the key tiles' TMA reduce-adds into each dQ tile wait for one another and
    /// land in key-tile order (a counter per query tile), so the f32 sums are always the same.
    Deterministic,
}

/// Refuses, before any GPU work, a head dim that none of `versions` takes (`--kernel
/// fa2_mma --head-dim 96`, or a sweep, which leaves the naive version out).
pub fn check_head_dim(head_dim: usize, versions: &[Version]) -> Result<(), UsageError> {
    if versions.iter().any(|v| v.takes_head_dim(head_dim)) {
        return Ok(());
    }
    let names: Vec<&str> = versions.iter().map(|v| v.name()).collect();
    Err(day10::untaken_head_dim(head_dim, &names))
}

/// `fa_hopper`'s grid: a block per key tile of the longest sequence, kv head and sequence
/// (each walks the query tiles of its sequence). The shape's head dim must have a tile.
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

/// A batch's shape on the device for the backward: day 10's [`DeviceProblem`] (the forward
/// runs on it) and the same offsets again for the backward's kernels, which day 10 keeps to
/// itself.
pub struct BackwardProblem {
    pub forward: DeviceProblem,
    cu_q: CudaSlice<i32>,
    cu_k: CudaSlice<i32>,
    score_offsets: CudaSlice<u64>,
    score_len: usize,
    max_q: usize,
    max_k: usize,
}

impl BackwardProblem {
    /// Checks the shape and uploads its offsets.
    pub fn new(gpu: &Gpu, shape: &AttentionShape) -> Result<Self> {
        let forward = DeviceProblem::new(gpu, shape)?;
        let to_i32 = |v: Vec<usize>| -> Vec<i32> { v.into_iter().map(|x| x as i32).collect() };
        let mut offsets = Vec::with_capacity(shape.batch());
        let mut score_len = 0usize;
        for (&lq, &lk) in shape.seqlens_q.iter().zip(&shape.seqlens_k) {
            offsets.push(score_len as u64);
            score_len += shape.heads * lq * lk;
        }
        Ok(Self {
            forward,
            cu_q: gpu.upload(&to_i32(AttentionShape::cu_seqlens(&shape.seqlens_q)))?,
            cu_k: gpu.upload(&to_i32(AttentionShape::cu_seqlens(&shape.seqlens_k)))?,
            score_offsets: gpu.stream.clone_htod(&offsets)?,
            score_len,
            max_q: shape.seqlens_q.iter().copied().max().unwrap_or(0),
            max_k: shape.seqlens_k.iter().copied().max().unwrap_or(0),
        })
    }

    pub fn shape(&self) -> &AttentionShape {
        &self.forward.shape
    }

    /// Bytes of the naive version's P and dS (f32 each).
    pub fn naive_bytes(&self) -> u64 {
        self.score_len as u64 * 8
    }

    /// Elements of Q (and O, dO, dQ) and of K (and V, dK, dV).
    pub fn lens(&self) -> (usize, usize) {
        let s = self.shape();
        (
            s.total_q() * s.heads * s.head_dim,
            s.total_k() * s.kv_heads * s.head_dim,
        )
    }
}

/// The f32 scratch of one backward call: D, dQ's accumulator, and the naive version's P and
/// dS. Allocated once per (version, problem) by [`FlashAttention::workspace`].
pub struct Workspace {
    /// D per (token, head) row; `fa_hopper` keeps it transposed, `[heads][batch][pitch]`.
    delta: CudaSlice<f32>,
    dq_accum: CudaSlice<f32>,
    naive: Option<(CudaSlice<f32>, CudaSlice<f32>)>,
    hopper: Option<HopperScratch>,
}

/// `fa_hopper`'s own scratch: L in log2 units transposed like D, and the deterministic mode's
/// counters (one per query tile, head and sequence).
struct HopperScratch {
    lse2: CudaSlice<f32>,
    semaphores: CudaSlice<i32>,
    /// The kv heads per section of the block order, when not
    /// [`head_section`]'s.
    head_section: Option<usize>,
}

impl Workspace {
    /// `fa_hopper`: number the blocks with `heads` kv heads per section instead of the
    /// L2-sized default. In deterministic mode the gradients' bits must not change: the tests
    /// run the same problem in several block orders and compare them.
    pub fn set_head_section(&mut self, heads: usize) {
        if let Some(scratch) = self.hopper.as_mut() {
            scratch.head_section = Some(heads.max(1));
        }
    }
}

/// The inputs of one backward call; the gradients go to one buffer `[dQ | dK | dV]`.
pub struct BackwardTensors<'a, T: Element> {
    pub q: &'a CudaSlice<T>,
    pub k: &'a CudaSlice<T>,
    pub v: &'a CudaSlice<T>,
    pub o: &'a CudaSlice<T>,
    pub d_o: &'a CudaSlice<T>,
    pub lse: &'a CudaSlice<f32>,
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

/// Day 10's forward and day 20's backward, compiled and loaded for one GPU: `fa_hopper` only
/// on Hopper.
pub struct FlashAttention {
    pub forward_kernels: day10::FlashAttention,
    kernels: KernelSet,
    hopper: Option<KernelSet>,
}

/// `attention_bwd.cu`'s versions, for the GPU's own architecture.
fn portable_build() -> KernelBuild {
    KernelBuild::device(SOURCE, kernel_names())
}

/// `fa_hopper_bwd.cu`'s kernels, for sm_90a.
fn hopper_build() -> KernelBuild {
    KernelBuild::hopper(HOPPER_SOURCE, hopper_kernel_names()).with_options(hopper_defines())
}

/// What the day compiles (beside day 10's forward kernels, which day 10 lists): its
/// portable versions for the GPU's own architecture and, on Hopper, `fa_hopper_bwd.cu` for
/// sm_90a. The loader compiles these, the compile tests check them, and `cargo xtask bundle`
/// compiles them ahead of time for the GPU host's kernel cache.
pub fn kernel_builds() -> Vec<KernelBuild> {
    vec![portable_build(), hopper_build()]
}

impl FlashAttention {
    pub fn load(gpu: &Gpu) -> Result<Self> {
        let hopper = hopper_build();
        let hopper = match hopper.arch_on(&gpu.info.arch) {
            Some(_) => Some(KernelSet::load_build(gpu, &hopper)?),
            None => None,
        };
        Ok(Self {
            forward_kernels: day10::FlashAttention::load(gpu)?,
            kernels: KernelSet::load_build(gpu, &portable_build())?,
            hopper,
        })
    }

    /// The fastest forward and backward this GPU runs: `fa_hopper` for both on Hopper,
    /// `fa2_mma` elsewhere.
    pub fn fastest(&self) -> (day10::Version, Version) {
        match self.hopper {
            Some(_) => (self.forward_kernels.fastest(), Version::FaHopper),
            None => (self.forward_kernels.fastest(), Version::Fa2Mma),
        }
    }

    /// Day 10's forward (O and L), on the tensor-core version unless told otherwise.
    pub fn forward<T: Element>(
        &self,
        gpu: &Gpu,
        version: day10::Version,
        problem: &BackwardProblem,
        t: Tensors<'_, T>,
        o: &mut CudaSlice<T>,
    ) -> Result<()> {
        self.forward_kernels
            .forward(gpu, version, &problem.forward, t, o)
    }

    /// The kernel that does a version's main work (the naive one's score kernel) and its
    /// launch shape, for the table; refused where the version cannot take the problem.
    pub fn plan<T: Element>(
        &self,
        version: Version,
        problem: &BackwardProblem,
    ) -> Result<(&Kernel, LaunchShape)> {
        let dtype = dtype_name::<T>()?;
        let shape = problem.shape();
        let d = shape.head_dim;
        match version {
            Version::Naive => {
                if problem.naive_bytes() > NAIVE_MAX_SCORE_BYTES {
                    return Err(Refused(format!(
                        "naive: P and dS would take {:.1} GiB (over {} GiB): the memory wall \
                         the flash versions remove",
                        problem.naive_bytes() as f64 / (1u64 << 30) as f64,
                        NAIVE_MAX_SCORE_BYTES >> 30
                    ))
                    .into());
                }
                if shape.heads * shape.batch() > 65535 {
                    return Err(Refused("naive: heads x batch over 65535".into()).into());
                }
                let kernel = self.kernels.get(&format!("attention_bwd_scores_{dtype}"))?;
                let launch = LaunchShape {
                    grid: (
                        problem.max_k.div_ceil(16).max(1) as u32,
                        problem.max_q.div_ceil(16).max(1) as u32,
                        (shape.heads * shape.batch()) as u32,
                    ),
                    block: (16, 16, 1),
                    dynamic_shared_bytes: 0,
                };
                Ok((kernel, launch))
            }
            Version::FaHopper => {
                if let Some(refused) = day10::hopper_refusal(self.hopper.is_some(), d) {
                    return Err(refused.into());
                }
                let hopper = self.hopper.as_ref().expect("loaded, or refused above");
                let kernel = hopper.get(&format!("fa_hopper_bwd_{dtype}_d{d}"))?;
                let launch = LaunchShape {
                    grid: hopper_grid(shape),
                    block: (hopper_tile(d).threads() as u32, 1, 1),
                    dynamic_shared_bytes: hopper_tile(d).shared_bytes() as u32,
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
                    .get(&format!("{}_bwd_{dtype}_d{d}", version.name()))?;
                let (_, keys) = version.tiles();
                let launch = LaunchShape {
                    grid: (
                        problem.max_k.div_ceil(keys).max(1) as u32,
                        shape.kv_heads as u32,
                        shape.batch() as u32,
                    ),
                    block: (128, 1, 1),
                    dynamic_shared_bytes: version.shared_bytes(d).0,
                };
                Ok((kernel, launch))
            }
        }
    }

    /// The scratch a version needs on this problem (checked against the free memory first).
    pub fn workspace(
        &self,
        gpu: &Gpu,
        version: Version,
        problem: &BackwardProblem,
    ) -> Result<Workspace> {
        let shape = problem.shape();
        let (q_len, _) = problem.lens();
        let rows = shape.total_q() * shape.heads;
        let (accum, naive) = match version {
            Version::Naive => (1, problem.score_len.max(1)),
            _ => (q_len, 0),
        };
        // fa_hopper: D and L transposed (a padded row per head and sequence), and a counter per
        // query tile.
        let transposed = shape.heads * shape.batch() * hopper_pitch(problem.max_q);
        let counters = match version {
            Version::FaHopper => {
                let Some(tile) = BackwardTile::for_head_dim(shape.head_dim) else {
                    bail!("fa_hopper: no tile for head dim {}", shape.head_dim);
                };
                problem.max_q.div_ceil(tile.queries).max(1) * shape.heads * shape.batch()
            }
            _ => 0,
        };
        let (delta_len, hopper_floats) = match version {
            Version::FaHopper => (transposed, transposed + counters),
            _ => (rows, 0),
        };
        gpu.check_fits(
            "the backward's scratch (D, dQ accumulator, naive P and dS)",
            ((delta_len + accum + 2 * naive + hopper_floats) * 4) as u64,
        )?;
        // fa_hopper's transposed D and L are read a whole query tile at a time, past the last
        // token up to the padded pitch: that padding must hold numbers (zeros), not poison.
        let delta = match version {
            Version::FaHopper => gpu.stream.alloc_zeros::<f32>(delta_len)?,
            _ => gpu.alloc_poisoned::<f32>(delta_len)?,
        };
        Ok(Workspace {
            delta,
            dq_accum: gpu.alloc_poisoned::<f32>(accum)?,
            naive: match version {
                Version::Naive => Some((
                    gpu.alloc_poisoned::<f32>(naive)?,
                    gpu.alloc_poisoned::<f32>(naive)?,
                )),
                _ => None,
            },
            hopper: match version {
                Version::FaHopper => Some(HopperScratch {
                    lse2: gpu.stream.alloc_zeros::<f32>(transposed)?,
                    semaphores: gpu.stream.alloc_zeros::<i32>(counters)?,
                    head_section: None,
                }),
                _ => None,
            },
        })
    }

    /// Enqueues one backward pass on `gpu.stream`: `grads` (`[dQ | dK | dV]`, the lengths
    /// of Q, K and V) is written whole.
    #[allow(clippy::too_many_arguments)]
    pub fn backward<T: Element>(
        &self,
        gpu: &Gpu,
        version: Version,
        mode: Mode,
        problem: &BackwardProblem,
        t: BackwardTensors<'_, T>,
        ws: &mut Workspace,
        grads: &mut CudaSlice<T>,
    ) -> Result<()> {
        let shape = problem.shape();
        let d = shape.head_dim;
        let dtype = dtype_name::<T>()?;
        let (q_len, k_len) = problem.lens();
        let rows = shape.total_q() * shape.heads;
        if [t.q, t.o, t.d_o].iter().any(|x| x.len() != q_len) {
            bail!("attention backward: Q, O and dO must hold {q_len} elements");
        }
        if t.k.len() != k_len || t.v.len() != k_len {
            bail!("attention backward: K and V must hold {k_len} elements");
        }
        if t.lse.len() != rows {
            bail!("attention backward: L must hold total_q x heads floats");
        }
        if grads.len() != q_len + 2 * k_len {
            bail!("attention backward: the gradients buffer must hold dQ, dK and dV back to back");
        }
        let (main, launch) = self.plan::<T>(version, problem)?;
        let atomic = version != Version::Naive && mode == Mode::Atomic;
        if atomic && ws.dq_accum.len() != q_len {
            bail!(
                "attention backward: this workspace is not {}'s",
                version.name()
            );
        }
        if version == Version::FaHopper {
            return self.backward_hopper(gpu, mode, problem, t, ws, grads, (main, launch));
        }
        if ws.delta.len() != rows {
            bail!(
                "attention backward: this workspace is not {}'s",
                version.name()
            );
        }
        let (heads, kv_heads) = (shape.heads as i32, shape.kv_heads as i32);
        let causal = i32::from(shape.causal);
        let scale = shape.default_scale() as f32;

        // D = rowsum(dO * O), and dQ's accumulator zeroed when atomics will add into it.
        let pre = self
            .kernels
            .get(&format!("attention_bwd_preprocess_{dtype}"))?;
        let pre_shape = LaunchShape {
            grid: (rows.div_ceil(8).max(1) as u32, 1, 1),
            block: (256, 1, 1),
            dynamic_shared_bytes: 0,
        };
        let (rows_i32, d_i32, zero) = (rows as i32, d as i32, i32::from(atomic));
        let mut l = gpu.stream.launch_builder(&pre.func);
        l.arg(t.o)
            .arg(t.d_o)
            .arg(&mut ws.delta)
            .arg(&mut ws.dq_accum);
        l.arg(&rows_i32).arg(&d_i32).arg(&zero);
        // SAFETY: matches attention_bwd_preprocess's signature; one warp per row < rows, each
        // reading d elements of O and dO (q_len = rows x d, checked) and writing D[row] and,
        // when zero is set, d floats of dq_accum (whose length q_len is checked above).
        unsafe { l.launch(pre.config(&pre_shape)?) }?;

        let (mut dq, mut dkv) = grads.split_at_mut(q_len);
        let (mut dk, mut dv) = dkv.split_at_mut(k_len);
        match version {
            Version::Naive => {
                let Some((probs, dscores)) = ws.naive.as_mut() else {
                    bail!("the naive version needs its workspace (P and dS)");
                };
                if probs.len() < problem.score_len || dscores.len() < problem.score_len {
                    bail!("the naive workspace must hold {} floats", problem.score_len);
                }
                let mut l = gpu.stream.launch_builder(&main.func);
                l.arg(t.q)
                    .arg(t.k)
                    .arg(t.v)
                    .arg(t.d_o)
                    .arg(t.lse)
                    .arg(&ws.delta);
                l.arg(&mut *probs).arg(&mut *dscores);
                l.arg(&problem.cu_q)
                    .arg(&problem.cu_k)
                    .arg(&problem.score_offsets);
                l.arg(&heads)
                    .arg(&kv_heads)
                    .arg(&d_i32)
                    .arg(&scale)
                    .arg(&causal);
                // SAFETY: matches attention_bwd_scores's signature; every index is bounded by
                // the cumulative lengths this shape's offsets were built from, and the
                // buffers' lengths were checked above.
                unsafe { l.launch(main.config(&launch)?) }?;

                let dq_kernel = self.kernels.get(&format!("attention_bwd_dq_{dtype}"))?;
                let per_row = LaunchShape {
                    grid: (
                        problem.max_q.max(1) as u32,
                        shape.heads as u32,
                        shape.batch() as u32,
                    ),
                    block: (d as u32, 1, 1),
                    dynamic_shared_bytes: 0,
                };
                let mut l = gpu.stream.launch_builder(&dq_kernel.func);
                l.arg(&*dscores).arg(t.k).arg(&mut dq);
                l.arg(&problem.cu_q)
                    .arg(&problem.cu_k)
                    .arg(&problem.score_offsets);
                l.arg(&heads).arg(&kv_heads).arg(&scale);
                // SAFETY: as above; blockDim.x is the head dim, so the column is < d.
                unsafe { l.launch(dq_kernel.config(&per_row)?) }?;

                let dkv_kernel = self.kernels.get(&format!("attention_bwd_dkv_{dtype}"))?;
                let per_key = LaunchShape {
                    grid: (
                        problem.max_k.max(1) as u32,
                        shape.kv_heads as u32,
                        shape.batch() as u32,
                    ),
                    block: (d as u32, 1, 1),
                    dynamic_shared_bytes: 0,
                };
                let mut l = gpu.stream.launch_builder(&dkv_kernel.func);
                l.arg(&*probs).arg(&*dscores).arg(t.q).arg(t.d_o);
                l.arg(&mut dk).arg(&mut dv);
                l.arg(&problem.cu_q)
                    .arg(&problem.cu_k)
                    .arg(&problem.score_offsets);
                l.arg(&heads).arg(&kv_heads).arg(&scale);
                // SAFETY: as above; one block per key row inside the lengths, one thread per
                // column.
                unsafe { l.launch(dkv_kernel.config(&per_key)?) }?;
            }
            Version::FaHopper => unreachable!("fa_hopper returned above"),
            Version::Fa2Scalar | Version::Fa2Mma => {
                let mut l = gpu.stream.launch_builder(&main.func);
                l.arg(t.q)
                    .arg(t.k)
                    .arg(t.v)
                    .arg(t.d_o)
                    .arg(t.lse)
                    .arg(&ws.delta);
                l.arg(&mut ws.dq_accum).arg(&mut dk).arg(&mut dv);
                l.arg(&problem.cu_q).arg(&problem.cu_k);
                l.arg(&heads)
                    .arg(&kv_heads)
                    .arg(&scale)
                    .arg(&causal)
                    .arg(&zero);
                // SAFETY: matches BWD_KERNELS' signature; the head dim is the kernel's own
                // (chosen by name), the buffers' lengths were checked above (dq_accum holds
                // q_len floats when atomic_dq = zero is set; otherwise it is not touched),
                // and every row and key index is bounded by the cumulative lengths.
                unsafe { l.launch(main.config(&launch)?) }?;
                match mode {
                    Mode::Atomic => self.convert_dq(gpu, &ws.dq_accum, &mut dq, scale)?,
                    Mode::Deterministic => {
                        let dq_kernel = self
                            .kernels
                            .get(&format!("{}_bwd_dq_{dtype}_d{d}", version.name()))?;
                        let (queries, _) = version.tiles();
                        let per_tile = LaunchShape {
                            grid: (
                                problem.max_q.div_ceil(queries).max(1) as u32,
                                shape.heads as u32,
                                shape.batch() as u32,
                            ),
                            block: (128, 1, 1),
                            dynamic_shared_bytes: version.shared_bytes(d).1,
                        };
                        let mut l = gpu.stream.launch_builder(&dq_kernel.func);
                        l.arg(t.q)
                            .arg(t.k)
                            .arg(t.v)
                            .arg(t.d_o)
                            .arg(t.lse)
                            .arg(&ws.delta);
                        l.arg(&mut dq).arg(&problem.cu_q).arg(&problem.cu_k);
                        l.arg(&heads).arg(&kv_heads).arg(&scale).arg(&causal);
                        // SAFETY: as the main kernel; one block per query tile of one head of
                        // one sequence, writing only its own rows of dQ.
                        unsafe { l.launch(dq_kernel.config(&per_tile)?) }?;
                    }
                }
            }
        }
        Ok(())
    }
}

impl FlashAttention {
    /// `fa_hopper`'s backward: D and L transposed (and dQ's accumulator zeroed), the main
    /// kernel (dK, dV written, dQ added into the accumulator by TMA reduce-adds, ordered by
    /// key tile in the deterministic mode), then dQ converted.
    #[allow(clippy::too_many_arguments)]
    fn backward_hopper<T: Element>(
        &self,
        gpu: &Gpu,
        mode: Mode,
        problem: &BackwardProblem,
        t: BackwardTensors<'_, T>,
        ws: &mut Workspace,
        grads: &mut CudaSlice<T>,
        (main, launch): (&Kernel, LaunchShape),
    ) -> Result<()> {
        let shape = problem.shape();
        let d = shape.head_dim;
        let dtype = dtype_name::<T>()?;
        let (q_len, k_len) = problem.lens();
        let Some(hopper) = &self.hopper else {
            bail!("fa_hopper: not loaded on this GPU");
        };
        let pitch = hopper_pitch(problem.max_q);
        let spans = shape.heads * shape.batch();
        let bm = hopper_tile(d).queries;
        let q_tiles = problem.max_q.div_ceil(bm).max(1);
        let Some(scratch) = ws.hopper.as_mut() else {
            bail!("attention backward: this workspace is not fa_hopper's");
        };
        if ws.delta.len() != spans * pitch
            || scratch.lse2.len() != spans * pitch
            || scratch.semaphores.len() != q_tiles * shape.heads * shape.batch()
            || ws.dq_accum.len() != q_len
        {
            bail!("attention backward: this workspace was made for another problem");
        }
        let (heads, kv_heads) = (shape.heads as i32, shape.kv_heads as i32);
        let causal = i32::from(shape.causal);
        let scale = shape.default_scale() as f32;

        let pre = hopper.get(&format!("fa_hopper_bwd_preprocess_{dtype}"))?;
        let pre_shape = LaunchShape {
            grid: (
                problem.max_q.div_ceil(8).max(1) as u32,
                shape.heads as u32,
                shape.batch() as u32,
            ),
            block: (256, 1, 1),
            dynamic_shared_bytes: 0,
        };
        let (d_i32, pitch_i32) = (d as i32, pitch as i32);
        let mut l = gpu.stream.launch_builder(&pre.func);
        l.arg(t.o).arg(t.d_o).arg(t.lse);
        l.arg(&mut ws.delta)
            .arg(&mut scratch.lse2)
            .arg(&mut ws.dq_accum);
        l.arg(&problem.cu_q).arg(&d_i32).arg(&pitch_i32);
        // SAFETY: matches fa_hopper_bwd_preprocess's signature; one warp per query row i < lq
        // of each (head, sequence), reading d elements of O and dO and one of L at that row
        // (lengths checked by `backward`), writing d floats of dq_accum (q_len) and one float
        // of D and L2 at (head x batch + sequence) x pitch + i (i < max_q <= pitch; the lengths
        // were checked above).
        unsafe { l.launch(pre.config(&pre_shape)?) }?;
        let ordered = i32::from(mode == Mode::Deterministic);
        if ordered == 1 {
            gpu.stream.memset_zeros(&mut scratch.semaphores)?;
        }

        let heads_tiles = |tokens, heads, box_tokens: usize| HeadTiles {
            tokens,
            heads,
            dim: d,
            box_tokens: box_tokens as u32,
        };
        let q_tiles_map = heads_tiles(shape.total_q(), shape.heads, bm);
        let kv_tiles_map = heads_tiles(shape.total_k(), shape.kv_heads, hopper_tile(d).keys);
        let map_q = q_tiles_map.encode(gpu, t.q)?;
        let map_do = q_tiles_map.encode(gpu, t.d_o)?;
        let map_k = kv_tiles_map.encode(gpu, t.k)?;
        let map_v = kv_tiles_map.encode(gpu, t.v)?;
        let rows_map = RowSpans {
            rows: spans,
            pitch,
            box_len: bm as u32,
        };
        let map_lse2 = rows_map.encode(gpu, &scratch.lse2)?;
        let map_delta = rows_map.encode(gpu, &ws.delta)?;
        let map_dq = HeadTiles {
            tokens: shape.total_q(),
            heads: shape.heads,
            dim: d,
            box_tokens: 64,
        }
        .encode(gpu, &ws.dq_accum)?;

        let (mut dq, mut dkv) = grads.split_at_mut(q_len);
        let (mut dk, mut dv) = dkv.split_at_mut(k_len);
        let q_tiles_i32 = q_tiles as i32;
        let head_section = scratch
            .head_section
            .unwrap_or_else(|| head_section(shape, problem.max_q))
            .min(shape.kv_heads) as i32;
        let mut l = gpu.stream.launch_builder(&main.func);
        l.arg(&map_q).arg(&map_k).arg(&map_v).arg(&map_do);
        l.arg(&map_lse2).arg(&map_delta).arg(&map_dq);
        l.arg(&mut dk).arg(&mut dv).arg(&mut scratch.semaphores);
        l.arg(&ordered).arg(&problem.cu_q).arg(&problem.cu_k);
        l.arg(&heads)
            .arg(&kv_heads)
            .arg(&scale)
            .arg(&causal)
            .arg(&q_tiles_i32)
            .arg(&head_section);
        // SAFETY: matches FA_HOPPER_BWD_KERNEL's signature. The maps describe exactly Q, dO,
        // K, V (lengths checked by `backward`), the transposed L and D (heads x pitch) and the
        // dQ accumulator (q_len floats); the TMA zero-fills loads and skips adds past their
        // ends. dK and dV are written only at keys inside the cumulative lengths; the counters
        // hold q_tiles x heads x batch ints, indexed by (sequence, head, query tile < q_tiles);
        // head_section (>= 1) only renumbers the grid's blocks.
        unsafe { l.launch(main.config(&launch)?) }?;

        self.convert_dq(gpu, &ws.dq_accum, &mut dq, scale)
    }

    /// dQ = scale * dq_accum in the storage type, after the f32 adds of a flash kernel
    /// (`attention_bwd_convert_dq`, shared by `fa2_*` and `fa_hopper`).
    fn convert_dq<T: Element>(
        &self,
        gpu: &Gpu,
        dq_accum: &CudaSlice<f32>,
        dq: &mut CudaViewMut<'_, T>,
        scale: f32,
    ) -> Result<()> {
        if dq_accum.len() != dq.len() {
            bail!("attention backward: dQ's accumulator and dQ differ in length");
        }
        let convert = self
            .kernels
            .get(&format!("attention_bwd_convert_dq_{}", dtype_name::<T>()?))?;
        let elems = LaunchShape {
            grid: ((dq.len().div_ceil(256)).clamp(1, 132 * 16) as u32, 1, 1),
            block: (256, 1, 1),
            dynamic_shared_bytes: 0,
        };
        let n = dq.len() as u64;
        let mut l = gpu.stream.launch_builder(&convert.func);
        l.arg(dq_accum).arg(dq).arg(&n).arg(&scale);
        // SAFETY: a grid-stride loop over n elements of both buffers (lengths checked equal).
        unsafe { l.launch(convert.config(&elems)?) }?;
        Ok(())
    }
}

/// Tolerance of one gradient, scaled by its reference's root mean square: the gradients sum
/// many terms of both signs (dS sums to 0 along a row), so an error is best measured against
/// their typical size. Every product's 16-bit operand (P, dS, and the stored inputs) is a
/// relative error of at most 2^-8 (bf16) or 2^-11 (f16) on its term, and the output is
/// rounded once more; the f32 sums add far less. The absolute term never goes below 1e-6:
/// where a gradient is exactly 0 (one key per row, so dS = P (dP - D) = 0) the f32 sums leave
/// about 6e-8 (seen on the H100), which says nothing about correctness.
pub fn grad_tolerance(dtype: Dtype, reference: &[f64]) -> Tolerance {
    let rms = (reference.iter().map(|v| v * v).sum::<f64>() / reference.len().max(1) as f64).sqrt();
    match dtype {
        Dtype::F16 => Tolerance::new((4e-3 * rms).max(1e-6), 8e-3).with_max_rel_l2(4e-3),
        _ => Tolerance::new((2.5e-2 * rms).max(1e-6), 4e-2).with_max_rel_l2(2e-2),
    }
}

/// Each element's own allowance on top of [`grad_tolerance`], from the reference's sum of
/// the absolute values of its terms (`Terms::Absolute`): a kernel that rounds P or dS to
/// `dtype` before a product errs by up to the format's unit roundoff times that sum, even
/// where the terms cancel to a gradient much smaller than the typical one (the early keys of
/// a causal sequence, which every query sees, are such elements).
pub fn grad_slack(dtype: Dtype, magnitudes: &[f64]) -> Vec<f64> {
    let unit_roundoff = match dtype {
        Dtype::F16 => 2f64.powi(-11),
        Dtype::Bf16 => 2f64.powi(-8),
        _ => 2f64.powi(-24),
    };
    magnitudes.iter().map(|m| unit_roundoff * m).collect()
}

/// One of the three gradients, as the checks name them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gradient {
    Dq,
    Dk,
    Dv,
}

impl Gradient {
    pub const ALL: [Gradient; 3] = [Gradient::Dq, Gradient::Dk, Gradient::Dv];

    pub fn name(self) -> &'static str {
        match self {
            Gradient::Dq => "dQ",
            Gradient::Dk => "dK",
            Gradient::Dv => "dV",
        }
    }

    fn of(self, g: &AttentionGradients) -> &[f64] {
        match self {
            Gradient::Dq => &g.dq,
            Gradient::Dk => &g.dk,
            Gradient::Dv => &g.dv,
        }
    }
}

/// The reference gradients at some query rows (dQ) and keys (dK, dV), every one of them when
/// given [`AttentionShape::all_query_rows`] and [`AttentionShape::all_key_rows`], computed in
/// blocks on every host core ([`reference::attention_backward_at`]: a whole test shape in
/// milliseconds); with the sums of their terms' absolute values, each element's own
/// allowance ([`grad_slack`]).
pub struct ExpectedGradients {
    pub values: AttentionGradients,
    pub magnitudes: AttentionGradients,
}

impl ExpectedGradients {
    pub fn at<T: Element>(
        x: &BackwardInputs<T>,
        shape: &AttentionShape,
        rows: &[QueryRow],
        keys: &[KeyRow],
    ) -> Self {
        let (values, magnitudes) =
            reference::attention_backward_at(x, shape, shape.default_scale(), rows, keys);
        Self { values, magnitudes }
    }

    /// Checks one gradient with [`grad_tolerance`] and [`grad_slack`]: `got` is a whole
    /// output of `shape`, and the reference's values sit at its flat indices `at` (None: every
    /// element, in order).
    pub fn check<T: Element>(
        &self,
        which: Gradient,
        got: &[T],
        at: Option<&[usize]>,
        shape: &[usize],
    ) -> CheckReport {
        let values = which.of(&self.values);
        let tolerance = grad_tolerance(T::DTYPE, values);
        let slack = grad_slack(T::DTYPE, which.of(&self.magnitudes));
        check::compare_at_with_slack(got, at, values, &slack, shape, tolerance)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kernel_compiles_for_sm90_without_spilling() {
        common::testing::assert_builds_compile_without_spills(&[portable_build()]);
    }

    #[test]
    fn the_hopper_version_keeps_wgmma_asynchronous_and_spills_little() {
        // Spill bytes, stores plus loads, as ptxas counts them. Head dim 64's consumers, with
        // 128 queries a step (S^T and dP^T of 64 floats each beside dK and dV), keep a few
        // loop-invariant scalars on the stack (232 bytes in all, reloaded from L1). The
        // producer runs on 24 registers: its loops over the 64-column boxes of Q and dO and
        // over the dQ tile's boxes stay rolled (unrolled at head dim 256, their addresses
        // spilled 608 bytes). Bounded so that a change that spills in the main loop fails.
        // Serialized wgmma (ptxas's C7512, "... due to insufficient register resources") is
        // refused by the compile itself: issuing dV before computing dS (more registers live
        // under an in-flight wgmma) did that and measured 13-16% slower on the H100.
        let build = hopper_build();
        let Some(compiled) = common::testing::compile_keeping_wgmma_asynchronous(&build) else {
            return;
        };
        for name in &build.functions {
            let limit = match name {
                n if n.ends_with("_d64") => 256,
                _ => 0,
            };
            let spilled = compiled.spills.get(name).copied();
            assert!(
                matches!(spilled, Some(bytes) if bytes <= limit),
                "{name} spills {spilled:?} bytes (at most {limit}); ptxas said:\n{}",
                compiled.log
            );
        }
    }

    #[test]
    fn every_flash_head_dim_has_a_backward_tile() {
        for d in HEAD_DIMS
            .into_iter()
            .filter(|&d| Version::FaHopper.takes_head_dim(d))
        {
            assert!(BackwardTile::for_head_dim(d).is_some(), "{d}");
        }
    }

    #[test]
    fn head_dims_no_selected_version_takes_are_refused() {
        assert!(check_head_dim(96, &Version::ALL).is_ok());
        let flash = [Version::Fa2Scalar, Version::Fa2Mma, Version::FaHopper];
        assert!(check_head_dim(64, &flash).is_ok());
        let err = check_head_dim(96, &flash).unwrap_err().to_string();
        assert!(
            err.contains("--head-dim 96") && err.contains("fa_hopper"),
            "{err}"
        );
        assert!(check_head_dim(1025, &[Version::Naive]).is_err());
    }

    #[test]
    fn hopper_grid_has_a_block_per_key_tile_kv_head_and_sequence() {
        let shape = AttentionShape::uniform(4, 600, 600, 8, 8, 128, true);
        assert_eq!(hopper_grid(&shape), (5, 8, 4));
        let mqa = AttentionShape::uniform(3, 10, 129, 4, 1, 64, false);
        assert_eq!(hopper_grid(&mqa), (2, 1, 3));
    }

    #[test]
    fn the_expected_gradients_at_every_row_are_the_full_pass() {
        let shape = AttentionShape::uniform(2, 9, 7, 4, 2, 8, true);
        let (q_len, k_len) = (shape.total_q() * 4 * 8, shape.total_k() * 2 * 8);
        let q: Vec<f32> = common::measure::inputs::uniform(q_len, -2.0, 2.0, 1);
        let k: Vec<f32> = common::measure::inputs::uniform(k_len, -2.0, 2.0, 2);
        let v: Vec<f32> = common::measure::inputs::uniform(k_len, -1.0, 1.0, 3);
        let d_o: Vec<f32> = common::measure::inputs::uniform(q_len, -1.0, 1.0, 4);
        let fwd = reference::attention_forward(&q, &k, &v, &shape, shape.default_scale());
        let x = BackwardInputs {
            q: &q,
            k: &k,
            v: &v,
            d_o: &d_o,
            o: &fwd.o,
            lse: &fwd.lse,
        };
        let expected =
            ExpectedGradients::at(&x, &shape, &shape.all_query_rows(), &shape.all_key_rows());
        let full = reference::attention_backward(&x, &shape, shape.default_scale());
        assert_eq!(expected.values.dq, full.dq);
        assert_eq!(expected.values.dk, full.dk);
        assert_eq!(expected.values.dv, full.dv);
        // The reference itself, stored as f32, passes; a gradient off by a lot fails.
        let dk: Vec<f32> = full.dk.iter().map(|&g| g as f32).collect();
        assert!(
            expected
                .check(Gradient::Dk, &dk, None, &[dk.len()])
                .passed()
        );
        let wrong: Vec<f32> = dk.iter().map(|g| g + 1.0).collect();
        assert!(
            !expected
                .check(Gradient::Dk, &wrong, None, &[dk.len()])
                .passed()
        );
    }

    #[test]
    fn head_sections_hold_what_the_l2_takes() {
        // 4096 queries of hd128: 4 MiB of Q, dO and dQ per head, 10 fit 40 MiB: sections of 8.
        let mha = AttentionShape::uniform(4, 4096, 4096, 16, 16, 128, false);
        assert_eq!(head_section(&mha, 4096), 8);
        // GQA 4 on 1 kv head: one section of the only kv head.
        let gqa = AttentionShape::uniform(1, 16384, 16384, 4, 1, 128, false);
        assert_eq!(head_section(&gqa, 16384), 1);
        // Short sequences: every head in one section, never more than there are.
        let short = AttentionShape::uniform(2, 100, 100, 6, 6, 64, true);
        assert_eq!(head_section(&short, 100), 6);
    }

    #[test]
    fn names_round_trip() {
        for v in Version::ALL {
            assert_eq!(Version::from_name(v.name()), Some(v));
        }
        assert_eq!(Version::from_name("fa3"), None);
    }

    #[test]
    fn the_mma_tiles_fit_two_blocks_per_sm_at_head_dim_128() {
        // 228 KiB per SM, 1 KiB of it reserved per block.
        let (main, dq) = Version::Fa2Mma.shared_bytes(128);
        assert!(2 * (main + 1024) <= 228 * 1024, "{main}");
        assert!(2 * (dq + 1024) <= 228 * 1024, "{dq}");
    }
}
