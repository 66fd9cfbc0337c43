//! Day 10: FlashAttention-2, forward, as a layer other days call (day 20's backward builds on
//! it). [`FlashAttention::plan`] prepares one version on one batch (its kernel, launch shape,
//! arguments and, for `fa_hopper`, the tensor maps of Q, K and V) once, and [`ForwardPlan::launch`]
//! computes `O = softmax(scale Q K^T + mask) V` and the per-row log-sum-exp `L` as often as it
//! is asked; [`FlashAttention::forward`] does both for one call. Four versions: three in
//! `attention.cu` (launched by `attention.rs`), the Hopper one in `fa_hopper.cu`
//! (`fa_hopper.rs`, its tiles in `hopper_tile.rs`); [`FlashAttention::fastest`] names the best
//! one this GPU has. [`DeviceProblem`] carries a batch's shape to the GPU (cumulative sequence
//! lengths, so variable-length batches cost no padding); `check.rs` holds how O and L are
//! checked.

use anyhow::{Result, bail};
use common::element::Element;
pub use common::family::attention::check_dtype;
use common::family::attention::{AttentionArgs, dtype_name, load_hopper};
use common::gpu::kernel::KernelSet;
use common::gpu::kernel_build::KernelBuild;
use common::measure::check::Tolerance;
use common::reference::attention::AttentionShape;
use common::{Gpu, Kernel, LaunchShape, UsageError, sizes};
use cudarc::driver::CudaSlice;

mod attention;
mod check;
mod fa_hopper;
mod hopper_tile;

pub use attention::{
    FA2_MMA, FA2_SCALAR, FlashTile, SOURCE, kernel_names, naive_scores_launch, portable_defines,
};
pub use check::{ExpectedO, L_TOLERANCE, o_slack, o_tolerance};
pub use fa_hopper::{HOPPER_SOURCE, hopper_kernel_names, hopper_work_items};
pub use hopper_tile::{
    HOPPER_PRODUCER_REGISTERS, HOPPER_TILES, HopperTile, hopper_defines, hopper_head_dims,
};

use attention::NaiveSteps;
use fa_hopper::HopperArgs;

/// Head dimensions `fa2_scalar` and `fa2_mma` are compiled for, and day 20's backward
/// versions; `fa_hopper`'s forward also takes 256 ([`HOPPER_TILES`]). The naive version takes
/// any up to [`NAIVE_MAX_HEAD_DIM`].
pub const HEAD_DIMS: [usize; 2] = [64, 128];
pub const NAIVE_MAX_HEAD_DIM: usize = 1024;

/// The largest score matrix the naive version may allocate: beyond it, the memory wall.
pub const NAIVE_MAX_SCORE_BYTES: u64 = 24 << 30;

common::versions! {
    /// The versions, in the order the table shows them (day 20's backward has the same four).
    pub enum Version {
        Naive => "naive",
        Fa2Scalar => "fa2_scalar",
        Fa2Mma => "fa2_mma",
        /// sm_90a only: wgmma, TMA and warp specialisation (FlashAttention-3's design).
        FaHopper => "fa_hopper",
    }
}

impl Version {
    /// Whether this version is compiled for (or takes any) head dim `d`: `fa2_scalar` and
    /// `fa2_mma` for [`HEAD_DIMS`], `fa_hopper` for its tiles' ([`HOPPER_TILES`]: 64, 128 and
    /// 256; day 20's backward tiles have the same head dims), the naive one for 1 to
    /// [`NAIVE_MAX_HEAD_DIM`] (a thread per column).
    pub fn takes_head_dim(self, d: usize) -> bool {
        match self {
            Version::Naive => (1..=NAIVE_MAX_HEAD_DIM).contains(&d),
            Version::Fa2Scalar | Version::Fa2Mma => HEAD_DIMS.contains(&d),
            Version::FaHopper => HopperTile::for_head_dim(d).is_some(),
        }
    }

    /// The versions of `names` (`--kernel`'s names), in their order.
    pub fn named(names: &[&str]) -> Vec<Version> {
        names.iter().filter_map(|n| Version::from_name(n)).collect()
    }
}

/// A batch's shape on the device: the cumulative lengths the kernels index with, and where
/// each sequence's block of the naive versions' score matrices starts (day 20's backward
/// launches with the same offsets).
pub struct DeviceProblem {
    pub shape: AttentionShape,
    cu_q: CudaSlice<i32>,
    cu_k: CudaSlice<i32>,
    score_offsets: CudaSlice<u64>,
    score_len: usize,
    max_q: usize,
    max_k: usize,
    hopper_tile: Option<&'static HopperTile>,
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
            hopper_tile: HopperTile::for_shape(shape),
        })
    }

    /// The tile `fa_hopper` runs this problem with ([`HopperTile::for_shape`], unless set by
    /// [`DeviceProblem::with_hopper_tile`]); None at a head dim it has no tile for.
    pub fn hopper_tile(&self) -> Option<&'static HopperTile> {
        self.hopper_tile
    }

    /// The problem run with `tile` instead of the one the shape chooses: for the tests, which
    /// check every tile on every shape, and for measuring one tile against another.
    pub fn with_hopper_tile(mut self, tile: &'static HopperTile) -> Result<Self, UsageError> {
        if tile.head_dim != self.shape.head_dim {
            return Err(UsageError::new(format!(
                "fa_hopper: a tile of head dim {} for a problem of head dim {}",
                tile.head_dim, self.shape.head_dim
            )));
        }
        self.hopper_tile = Some(tile);
        Ok(self)
    }

    /// Bytes of the naive version's score matrix (f32).
    pub fn score_bytes(&self) -> u64 {
        self.score_len as u64 * 4
    }

    /// Elements of one score matrix of the whole batch (every head of every sequence).
    pub fn score_len(&self) -> usize {
        self.score_len
    }

    /// The cumulative query lengths, `batch + 1` of them.
    pub fn cu_q(&self) -> &CudaSlice<i32> {
        &self.cu_q
    }

    /// The cumulative key lengths.
    pub fn cu_k(&self) -> &CudaSlice<i32> {
        &self.cu_k
    }

    /// Where each sequence's block of a score matrix starts.
    pub fn score_offsets(&self) -> &CudaSlice<u64> {
        &self.score_offsets
    }

    /// The longest sequence's queries.
    pub fn max_q(&self) -> usize {
        self.max_q
    }

    /// The longest sequence's keys.
    pub fn max_k(&self) -> usize {
        self.max_k
    }

    /// Elements of Q (and O) and of K (and V).
    pub fn lens(&self) -> (usize, usize) {
        self.shape.lens()
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
/// fa2_mma --head-dim 96`, or a sweep, which leaves the naive version out). Day 20's backward
/// versions take the same head dims.
pub fn check_head_dim(head_dim: usize, versions: &[Version]) -> Result<(), UsageError> {
    if versions.iter().any(|v| v.takes_head_dim(head_dim)) {
        return Ok(());
    }
    let names: Vec<&str> = versions.iter().map(|v| v.name()).collect();
    Err(UsageError::new(format!(
        "--head-dim {head_dim}: none of {} takes it (fa2_scalar and fa2_mma are compiled for \
         head dims {HEAD_DIMS:?}, fa_hopper for {:?}; naive takes 1..={NAIVE_MAX_HEAD_DIM})",
        names.join(", "),
        hopper_head_dims()
    )))
}

/// What both days refuse of a problem before the GPU opens: a shape no version can take
/// ([`validate`]), or a head dim none of the selected versions (`--kernel`'s names) takes.
pub fn check_request(shape: &AttentionShape, versions: &[&str]) -> Result<()> {
    validate(shape)?;
    Ok(check_head_dim(shape.head_dim, &Version::named(versions))?)
}

/// `fa_hopper`'s ticket counters: the next work item, and the blocks done.
pub const TICKETS: usize = 2;

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

/// What the day compiles: `attention.cu` for the GPU's own architecture and, on Hopper,
/// `fa_hopper.cu` for sm_90a. The loader compiles these, the compile test checks them, and
/// `cargo xtask bundle` compiles them ahead of time for the GPU host's kernel cache.
pub fn kernel_builds() -> Vec<KernelBuild> {
    vec![attention::portable_build(), fa_hopper::hopper_build()]
}

/// Q, K and V of a forward: what a plan reads (and, for `fa_hopper`, encodes maps of).
#[derive(Clone, Copy)]
pub struct Inputs<'a, T: Element> {
    pub q: &'a CudaSlice<T>,
    pub k: &'a CudaSlice<T>,
    pub v: &'a CudaSlice<T>,
}

/// The tensors of one forward call ([`FlashAttention::forward`]).
pub struct Tensors<'a, T: Element> {
    pub q: &'a CudaSlice<T>,
    pub k: &'a CudaSlice<T>,
    pub v: &'a CudaSlice<T>,
    pub lse: &'a mut CudaSlice<f32>,
    /// The naive version's score matrix, [`DeviceProblem::score_bytes`] long; unused by the
    /// flash versions.
    pub scores: Option<&'a mut CudaSlice<f32>>,
    /// `fa_hopper`'s two ticket counters for this call, zero: the caller's own, so that calls
    /// on two streams never share them (the PyTorch layer's, a tensor per call). `None`: the
    /// counters kept with the kernels, for calls on one stream.
    pub tickets: Option<&'a CudaSlice<i32>>,
}

/// What a version launches besides its main kernel, prepared by the plan.
enum Steps<'a> {
    /// P and L, then P V.
    Naive(NaiveSteps<'a>),
    /// `fa2_scalar` and `fa2_mma`: the one kernel.
    Flash,
    /// The tensor maps and counts, and the layer's ticket counter.
    Hopper(Box<HopperArgs>, &'a CudaSlice<i32>),
}

/// One version on one batch, prepared once and launched as often as asked: its kernels and
/// launch shapes, its arguments, and for `fa_hopper` the tensor maps of the inputs it
/// borrows.
pub struct ForwardPlan<'a, T: Element> {
    gpu: &'a Gpu,
    version: Version,
    kernel: &'a Kernel,
    launch: LaunchShape,
    problem: &'a DeviceProblem,
    inputs: Inputs<'a, T>,
    steps: Steps<'a>,
}

impl<'a, T: Element> ForwardPlan<'a, T> {
    pub fn version(&self) -> Version {
        self.version
    }

    /// The kernel the version runs (the first of the naive three) and its launch shape, for
    /// the table.
    pub fn kernel(&self) -> (&'a Kernel, LaunchShape) {
        (self.kernel, self.launch)
    }

    /// O's tolerance in this storage type (each element's own allowance comes from the
    /// reference: [`ExpectedO::check_o`]).
    pub fn tolerance(&self) -> Tolerance {
        o_tolerance(T::DTYPE)
    }

    /// Enqueues one forward pass on the plan's stream: `o` and `lse` are written (and the
    /// naive version's `scores`, [`DeviceProblem::score_len`] floats, on the way).
    pub fn launch(
        &self,
        o: &mut CudaSlice<T>,
        lse: &mut CudaSlice<f32>,
        scores: Option<&mut CudaSlice<f32>>,
    ) -> Result<()> {
        let (q_len, _) = self.problem.lens();
        let shape = &self.problem.shape;
        if o.len() != q_len {
            bail!("attention: Q and O must hold {q_len} elements (total_q x heads x head_dim)");
        }
        if lse.len() != shape.total_q() * shape.heads {
            bail!("attention: L must hold total_q x heads floats");
        }
        let (gpu, problem, x) = (self.gpu, self.problem, &self.inputs);
        let main = (self.kernel, &self.launch);
        match &self.steps {
            Steps::Naive(steps) => steps.launch(gpu, main, problem, x, scores, lse, o),
            Steps::Flash => attention::launch_flash(gpu, main, problem, x, lse, o),
            Steps::Hopper(args, tickets) => args.launch(gpu, main, problem, tickets, lse, o),
        }
    }
}

impl FlashAttention {
    pub fn load(gpu: &Gpu) -> Result<Self> {
        let hopper = load_hopper(gpu, &fa_hopper::hopper_build())?;
        let tickets = match hopper {
            Some(_) => Some(gpu.stream.alloc_zeros::<i32>(TICKETS)?),
            None => None,
        };
        Ok(Self {
            kernels: KernelSet::load_build(gpu, &attention::portable_build())?,
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

    /// The kernel a version runs (the first of the naive three) and its launch shape; refused
    /// where the version cannot take the problem. No tensors needed: what a plan starts from.
    pub fn kernel_for<T: Element>(
        &self,
        version: Version,
        problem: &DeviceProblem,
    ) -> Result<(&Kernel, LaunchShape)> {
        let dtype = dtype_name::<T>()?;
        match version {
            Version::Naive => attention::naive_launch(&self.kernels, dtype, problem),
            Version::Fa2Scalar | Version::Fa2Mma => {
                attention::flash_launch(&self.kernels, dtype, version, problem)
            }
            Version::FaHopper => {
                fa_hopper::hopper_launch(self.hopper.as_ref(), self.sms, dtype, problem)
            }
        }
    }

    /// Plans `version` on `problem` with inputs `x` (refused where the version cannot take
    /// the problem): made once, then launched as often as asked.
    pub fn plan<'a, T: Element>(
        &'a self,
        gpu: &'a Gpu,
        version: Version,
        problem: &'a DeviceProblem,
        x: Inputs<'a, T>,
    ) -> Result<ForwardPlan<'a, T>> {
        self.plan_with(gpu, version, problem, x, None)
    }

    /// [`FlashAttention::plan`] with `fa_hopper`'s ticket counters the caller's (`Some`, two
    /// zeroed) or the ones loaded with the kernels (`None`).
    fn plan_with<'a, T: Element>(
        &'a self,
        gpu: &'a Gpu,
        version: Version,
        problem: &'a DeviceProblem,
        x: Inputs<'a, T>,
        tickets: Option<&'a CudaSlice<i32>>,
    ) -> Result<ForwardPlan<'a, T>> {
        let (q_len, k_len) = problem.lens();
        if x.q.len() != q_len {
            bail!("attention: Q and O must hold {q_len} elements (total_q x heads x head_dim)");
        }
        if x.k.len() != k_len || x.v.len() != k_len {
            bail!("attention: K and V must hold {k_len} elements (total_k x kv_heads x head_dim)");
        }
        let (kernel, launch) = self.kernel_for::<T>(version, problem)?;
        let steps = match version {
            Version::Naive => {
                Steps::Naive(NaiveSteps::new(&self.kernels, dtype_name::<T>()?, problem)?)
            }
            Version::Fa2Scalar | Version::Fa2Mma => Steps::Flash,
            Version::FaHopper => {
                let tickets = match tickets {
                    Some(t) if t.len() < TICKETS => {
                        bail!("attention: fa_hopper's tickets must hold {TICKETS} counters")
                    }
                    Some(t) => t,
                    None => self.tickets.as_ref().expect("allocated with the kernels"),
                };
                Steps::Hopper(Box::new(HopperArgs::new(gpu, problem, &x)?), tickets)
            }
        };
        Ok(ForwardPlan {
            gpu,
            version,
            kernel,
            launch,
            problem,
            inputs: x,
            steps,
        })
    }

    /// One forward call, planned and launched: `o` and `t.lse` are written.
    pub fn forward<T: Element>(
        &self,
        gpu: &Gpu,
        version: Version,
        problem: &DeviceProblem,
        t: Tensors<'_, T>,
        o: &mut CudaSlice<T>,
    ) -> Result<()> {
        let x = Inputs {
            q: t.q,
            k: t.k,
            v: t.v,
        };
        self.plan_with(gpu, version, problem, x, t.tickets)?
            .launch(o, t.lse, t.scores)
    }
}

common::test_kernel_builds!();

#[cfg(test)]
mod tests {
    use super::*;
    use common::dtype::Dtype;

    #[test]
    fn names_round_trip() {
        for v in Version::ALL {
            assert_eq!(Version::from_name(v.name()), Some(v));
        }
        assert_eq!(Version::from_name("fa3"), None);
        assert_eq!(
            Version::named(&["fa2_mma", "x", "naive"]),
            [Version::Fa2Mma, Version::Naive]
        );
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
        // 128 query rows per item at head dims 128 and 256 and for short problems at 64, 192
        // at 64 otherwise; no tile at 96.
        let items = |shape: &AttentionShape| {
            HopperTile::for_shape(shape).map(|tile| hopper_work_items(shape, tile))
        };
        let shape = AttentionShape::uniform(3, 300, 10, 5, 5, 128, false);
        assert_eq!(items(&shape), Some(3 * 5 * 3));
        let shape = AttentionShape::uniform(3, 300, 10, 5, 5, 64, false);
        assert_eq!(items(&shape), Some(3 * 5 * 3));
        let shape = AttentionShape::uniform(3, 1500, 10, 5, 5, 64, false);
        assert_eq!(items(&shape), Some(8 * 5 * 3));
        let shape = AttentionShape::uniform(3, 300, 10, 5, 5, 64, true);
        assert_eq!(items(&shape), Some(3 * 5 * 3));
        let shape = AttentionShape::uniform(3, 300, 10, 5, 5, 256, true);
        assert_eq!(items(&shape), Some(3 * 5 * 3));
        let shape = AttentionShape::uniform(3, 300, 10, 5, 5, 96, true);
        assert_eq!(items(&shape), None);
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
        // On Hopper fa_hopper refuses only a head dim it has no tile for.
        use common::family::attention::hopper_refusal;
        assert!(hopper_refusal(true, 256, &hopper_head_dims()).is_none());
        assert!(hopper_refusal(true, 96, &hopper_head_dims()).is_some());
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
