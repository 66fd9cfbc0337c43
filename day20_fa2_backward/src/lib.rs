//! Day 20: FlashAttention-2, backward, and the layer that pairs it with day 10's forward.
//! [`FlashAttention::plan`] prepares one version on one batch (its kernels, launch shapes,
//! workspace and, for `fa_hopper`, its tensor maps) once, and [`BackwardPlan::launch`] computes
//! dQ, dK and dV from Q, K, V, the forward's O and log-sum-exp L, and dO as often as it is
//! asked; [`FlashAttention::backward`] does both for one call. Four versions (day 10's
//! [`Version`]): three in `attention_bwd.cu` (launched by `attention_bwd.rs`), the Hopper one
//! in `fa_hopper_bwd.cu` (`fa_hopper_bwd.rs`, its tiles in `hopper_tile.rs`), in a fast mode
//! (f32 atomics for dQ) or a deterministic one (the same bits every run).
//! [`FlashAttention::fastest`] names the best pair this GPU has; `check.rs` holds how the
//! gradients are checked.

use std::borrow::BorrowMut;

use anyhow::{Result, bail};
use common::element::Element;
use common::family::attention::{dtype_name, load_hopper};
use common::gpu::kernel::KernelSet;
use common::gpu::kernel_build::KernelBuild;
use common::reference::attention::AttentionShape;
use common::{Gpu, Kernel, LaunchShape};
use cudarc::driver::CudaSlice;

mod attention_bwd;
mod check;
mod fa_hopper_bwd;
mod hopper_tile;

pub use attention_bwd::{
    FA2_MMA_BWD, FA2_SCALAR_BWD, SOURCE, backward_shared_bytes, backward_violations, kernel_names,
    portable_defines,
};
pub use check::{ExpectedGradients, Gradient, SampledGradients, grad_slack, grad_tolerance};
pub use fa_hopper_bwd::{HOPPER_SOURCE, head_section, hopper_grid, hopper_kernel_names};
pub use hopper_tile::{
    BACKWARD_TILES, BackwardTile, PREPROCESS_ROWS, PREPROCESS_THREADS, hopper_defines,
};

pub use day10::{
    DeviceProblem, FlashTile, HEAD_DIMS, Inputs, NAIVE_MAX_HEAD_DIM, Tensors, Version, check_dtype,
    check_head_dim, check_request, validate,
};

use attention_bwd::PortableSteps;
use fa_hopper_bwd::{HopperSteps, hopper_pitch};

/// The largest P plus dS the naive version may allocate (two f32 matrices of the scores'
/// size): day 10's limit for its one matrix.
pub const NAIVE_MAX_SCORE_BYTES: u64 = day10::NAIVE_MAX_SCORE_BYTES;

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

/// A batch's shape on the device for the backward: day 10's [`DeviceProblem`], whose offsets
/// both the forward and the backward's kernels index with.
pub struct BackwardProblem {
    pub forward: DeviceProblem,
}

impl BackwardProblem {
    /// Checks the shape and uploads its offsets.
    pub fn new(gpu: &Gpu, shape: &AttentionShape) -> Result<Self> {
        Ok(Self {
            forward: DeviceProblem::new(gpu, shape)?,
        })
    }

    pub fn shape(&self) -> &AttentionShape {
        &self.forward.shape
    }

    /// Bytes of the naive version's P and dS (f32 each).
    pub fn naive_bytes(&self) -> u64 {
        self.forward.score_len() as u64 * 8
    }

    /// Elements of Q (and O, dO, dQ) and of K (and V, dK, dV).
    pub fn lens(&self) -> (usize, usize) {
        self.forward.lens()
    }
}

/// The f32 scratch of one backward call: D, dQ's accumulator, and the naive version's P and
/// dS. Allocated once per (version, problem) by [`FlashAttention::workspace`], or made of the
/// caller's buffers by [`Workspace::from_buffers`].
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
    /// The persistent blocks' tile counter and count of blocks done: zero between launches
    /// (the last block to finish sets them back).
    tickets: CudaSlice<i32>,
    /// The kv heads per section of the block order, when not
    /// [`head_section`]'s.
    head_section: Option<usize>,
}

/// Elements of each buffer of a version's workspace on a problem ([`workspace_lens`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkspaceLens {
    /// D (f32): a row per (token, head), or `fa_hopper`'s padded transposed rows.
    pub delta: usize,
    /// dQ's f32 accumulator (the preprocess zeroes it).
    pub dq_accum: usize,
    /// The naive version's P and dS (f32, each); 0 for the others.
    pub naive: usize,
    /// `fa_hopper`: L in log2 units (f32), transposed like D; 0 for the others.
    pub lse2: usize,
    /// `fa_hopper`: the deterministic mode's counters (i32, zeroed by each such call).
    pub semaphores: usize,
    /// `fa_hopper`: the persistent blocks' two tickets (i32), zero between launches.
    pub tickets: usize,
}

impl WorkspaceLens {
    /// Every buffer's bytes together (each element 4 bytes).
    pub fn bytes(&self) -> u64 {
        4 * (self.delta
            + self.dq_accum
            + 2 * self.naive
            + self.lse2
            + self.semaphores
            + self.tickets) as u64
    }
}

/// The workspace `version` needs on `problem`, in elements per buffer; refused where
/// `fa_hopper` has no tile for the head dim. Needs no GPU.
pub fn workspace_lens(version: Version, problem: &BackwardProblem) -> Result<WorkspaceLens> {
    let shape = problem.shape();
    let max_q = problem.forward.max_q();
    let (q_len, _) = problem.lens();
    let rows = shape.total_q() * shape.heads;
    if version != Version::FaHopper {
        let (dq_accum, naive) = match version {
            Version::Naive => (1, problem.forward.score_len().max(1)),
            _ => (q_len, 0),
        };
        return Ok(WorkspaceLens {
            delta: rows,
            dq_accum,
            naive,
            lse2: 0,
            semaphores: 0,
            tickets: 0,
        });
    }
    let Some(tile) = BackwardTile::for_head_dim(shape.head_dim) else {
        bail!("fa_hopper: no tile for head dim {}", shape.head_dim);
    };
    // D and L transposed (a padded row per head and sequence), and a counter per query tile.
    let transposed = shape.heads * shape.batch() * hopper_pitch(max_q);
    Ok(WorkspaceLens {
        delta: transposed,
        dq_accum: q_len,
        naive: 0,
        lse2: transposed,
        semaphores: max_q.div_ceil(tile.queries).max(1) * shape.heads * shape.batch(),
        tickets: 2,
    })
}

/// A workspace's buffers made by the caller ([`Workspace::from_buffers`]): D and dQ's
/// accumulator, and `fa_hopper`'s own (for that version only).
pub struct WorkspaceBuffers {
    pub delta: CudaSlice<f32>,
    pub dq_accum: CudaSlice<f32>,
    pub hopper: Option<HopperBuffers>,
}

/// `fa_hopper`'s part of a caller's workspace: L2, the semaphores and the tickets.
pub struct HopperBuffers {
    pub lse2: CudaSlice<f32>,
    pub semaphores: CudaSlice<i32>,
    pub tickets: CudaSlice<i32>,
}

impl WorkspaceBuffers {
    /// Whether each buffer is exactly as long as `lens` asks, and `fa_hopper`'s part is there
    /// exactly when the version is `fa_hopper` (the plan checks D and the accumulator again).
    fn fit(&self, version: Version, lens: &WorkspaceLens) -> bool {
        let hopper_fits = match &self.hopper {
            Some(h) => {
                version == Version::FaHopper
                    && h.lse2.len() == lens.lse2
                    && h.semaphores.len() == lens.semaphores
                    && h.tickets.len() == lens.tickets
            }
            None => version != Version::FaHopper,
        };
        hopper_fits && self.delta.len() == lens.delta && self.dq_accum.len() == lens.dq_accum
    }
}

impl Workspace {
    /// A workspace of `version` on `problem` on buffers the caller made (the PyTorch layer's
    /// tensors from PyTorch's allocator, made for one call, so that no call shares them and a
    /// CUDA graph can capture the call), each exactly [`workspace_lens`] long, with
    /// `fa_hopper`'s part for that version only. D, L2, the semaphores and the tickets must
    /// hold zeros (`fa_hopper` reads D and L2's padding and counts on its tickets starting at
    /// zero); the accumulator anything. Not for the naive version. A caller that does not own
    /// the memory (the PyTorch layer) lets go of it with [`Workspace::leak`]; dropped, the
    /// workspace frees it. On an error every buffer is let go of unfreed.
    pub fn from_buffers(
        version: Version,
        problem: &BackwardProblem,
        buffers: WorkspaceBuffers,
    ) -> Result<Self> {
        let fits = workspace_lens(version, problem).and_then(|lens| {
            if version == Version::Naive {
                bail!("the naive backward's workspace is its own (P and dS)");
            }
            if !buffers.fit(version, &lens) {
                bail!(
                    "a {} backward workspace is {lens:?}: the buffers given differ",
                    version.name()
                );
            }
            Ok(())
        });
        let WorkspaceBuffers {
            delta,
            dq_accum,
            hopper,
        } = buffers;
        let workspace = Self {
            delta,
            dq_accum,
            naive: None,
            hopper: hopper.map(|h| HopperScratch {
                lse2: h.lse2,
                semaphores: h.semaphores,
                tickets: h.tickets,
                head_section: None,
            }),
        };
        match fits {
            Ok(()) => Ok(workspace),
            Err(e) => {
                workspace.leak();
                Err(e)
            }
        }
    }

    /// Lets go of every buffer without freeing it: for a workspace made by
    /// [`Workspace::from_buffers`], whose buffers are the caller's.
    pub fn leak(self) {
        let _ = (self.delta.leak(), self.dq_accum.leak());
        if let Some((p, ds)) = self.naive {
            let _ = (p.leak(), ds.leak());
        }
        if let Some(h) = self.hopper {
            let _ = (h.lse2.leak(), h.semaphores.leak(), h.tickets.leak());
        }
    }

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

/// Day 10's forward and day 20's backward, compiled and loaded for one GPU: `fa_hopper` only
/// on Hopper.
pub struct FlashAttention {
    pub forward_kernels: day10::FlashAttention,
    kernels: KernelSet,
    hopper: Option<KernelSet>,
    /// The GPU's SMs: `fa_hopper`'s persistent grid has a block per SM.
    sms: usize,
}

/// What the day compiles (beside day 10's forward kernels, which day 10 lists): its
/// portable versions for the GPU's own architecture and, on Hopper, `fa_hopper_bwd.cu` for
/// sm_90a. The loader compiles these, the compile tests check them, and `cargo xtask bundle`
/// compiles them ahead of time for the GPU host's kernel cache.
pub fn kernel_builds() -> Vec<KernelBuild> {
    vec![
        attention_bwd::portable_build(),
        fa_hopper_bwd::hopper_build(),
    ]
}

/// What a version launches besides its main kernel, prepared by the plan.
enum Steps<'a> {
    Portable(PortableSteps<'a>),
    Hopper(Box<HopperSteps<'a>>),
}

/// One version in one mode on one batch, prepared once and launched as often as asked: its
/// kernels and launch shapes, the inputs it borrows, its workspace (`W`: its own, or a
/// caller's `&mut Workspace` kept between calls) and for `fa_hopper` the tensor maps of both.
pub struct BackwardPlan<'a, T: Element, W: BorrowMut<Workspace> = Workspace> {
    gpu: &'a Gpu,
    version: Version,
    mode: Mode,
    kernel: &'a Kernel,
    launch: LaunchShape,
    problem: &'a BackwardProblem,
    inputs: BackwardTensors<'a, T>,
    ws: W,
    steps: Steps<'a>,
}

impl<'a, T: Element, W: BorrowMut<Workspace>> BackwardPlan<'a, T, W> {
    pub fn version(&self) -> Version {
        self.version
    }

    /// The kernel that does the version's main work (the naive one's score kernel) and its
    /// launch shape, for the table.
    pub fn kernel(&self) -> (&'a Kernel, LaunchShape) {
        (self.kernel, self.launch)
    }

    /// `fa_hopper`: number the blocks with `heads` kv heads per section
    /// ([`Workspace::set_head_section`]).
    pub fn set_head_section(&mut self, heads: usize) {
        self.ws.borrow_mut().set_head_section(heads);
    }

    /// Enqueues one backward pass on the plan's stream: `grads` (`[dQ | dK | dV]`, the
    /// lengths of Q, K and V) is written whole.
    pub fn launch(&mut self, grads: &mut CudaSlice<T>) -> Result<()> {
        let (q_len, k_len) = self.problem.lens();
        if grads.len() != q_len + 2 * k_len {
            bail!("attention backward: the gradients buffer must hold dQ, dK and dV back to back");
        }
        let (gpu, problem, t) = (self.gpu, self.problem, &self.inputs);
        let main = (self.kernel, &self.launch);
        let ws = self.ws.borrow_mut();
        match &self.steps {
            Steps::Portable(steps) => {
                let atomic = self.version != Version::Naive && self.mode == Mode::Atomic;
                steps.launch(gpu, main, problem, t, ws, atomic, grads)
            }
            Steps::Hopper(steps) => steps.launch(gpu, main, problem, t, ws, self.mode, grads),
        }
    }

    /// The workspace back, for the next plan of the same problem.
    pub fn into_workspace(self) -> W {
        self.ws
    }
}

impl FlashAttention {
    pub fn load(gpu: &Gpu) -> Result<Self> {
        let hopper = load_hopper(gpu, &fa_hopper_bwd::hopper_build())?;
        Ok(Self {
            forward_kernels: day10::FlashAttention::load(gpu)?,
            kernels: KernelSet::load_build(gpu, &attention_bwd::portable_build())?,
            hopper,
            sms: gpu.info.sms as usize,
        })
    }

    /// The fastest forward and backward this GPU runs: `fa_hopper` for both on Hopper,
    /// `fa2_mma` elsewhere.
    pub fn fastest(&self) -> (Version, Version) {
        match self.hopper {
            Some(_) => (self.forward_kernels.fastest(), Version::FaHopper),
            None => (self.forward_kernels.fastest(), Version::Fa2Mma),
        }
    }

    /// Day 10's forward (O and L), on the tensor-core version unless told otherwise.
    pub fn forward<T: Element>(
        &self,
        gpu: &Gpu,
        version: Version,
        problem: &BackwardProblem,
        t: Tensors<'_, T>,
        o: &mut CudaSlice<T>,
    ) -> Result<()> {
        self.forward_kernels
            .forward(gpu, version, &problem.forward, t, o)
    }

    /// O and L for a backward on `problem`: day 10's fastest forward on this GPU where it
    /// takes the head dim, the naive one (with a score matrix for the call) elsewhere.
    pub fn forward_for_backward<T: Element>(
        &self,
        gpu: &Gpu,
        problem: &BackwardProblem,
        x: Inputs<'_, T>,
        o: &mut CudaSlice<T>,
        lse: &mut CudaSlice<f32>,
    ) -> Result<()> {
        let version = match self.fastest().0 {
            fastest if fastest.takes_head_dim(problem.shape().head_dim) => fastest,
            _ => Version::Naive,
        };
        let mut scores = match version {
            Version::Naive => Some(
                gpu.alloc_poisoned::<f32>((problem.forward.score_bytes() / 4).max(1) as usize)?,
            ),
            _ => None,
        };
        self.forward_kernels
            .plan(gpu, version, &problem.forward, x)?
            .launch(o, lse, scores.as_mut())
    }

    /// The kernel that does a version's main work (the naive one's score kernel) and its
    /// launch shape; refused where the version cannot take the problem. No tensors needed:
    /// what a plan starts from.
    pub fn kernel_for<T: Element>(
        &self,
        version: Version,
        problem: &BackwardProblem,
    ) -> Result<(&Kernel, LaunchShape)> {
        let dtype = dtype_name::<T>()?;
        match version {
            Version::Naive => attention_bwd::naive_launch(&self.kernels, dtype, problem),
            Version::Fa2Scalar | Version::Fa2Mma => {
                attention_bwd::flash_launch(&self.kernels, dtype, version, problem)
            }
            Version::FaHopper => {
                fa_hopper_bwd::hopper_launch(self.hopper.as_ref(), self.sms, dtype, problem.shape())
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
        let lens = workspace_lens(version, problem)?;
        gpu.check_fits(
            "the backward's scratch (D, dQ accumulator, naive P and dS)",
            lens.bytes(),
        )?;
        // fa_hopper's transposed D and L are read a whole query tile at a time, past the last
        // token up to the padded pitch: that padding must hold numbers (zeros), not poison.
        let delta = match version {
            Version::FaHopper => gpu.stream.alloc_zeros::<f32>(lens.delta)?,
            _ => gpu.alloc_poisoned::<f32>(lens.delta)?,
        };
        Ok(Workspace {
            delta,
            dq_accum: gpu.alloc_poisoned::<f32>(lens.dq_accum)?,
            naive: match version {
                Version::Naive => Some((
                    gpu.alloc_poisoned::<f32>(lens.naive)?,
                    gpu.alloc_poisoned::<f32>(lens.naive)?,
                )),
                _ => None,
            },
            hopper: match version {
                Version::FaHopper => Some(HopperScratch {
                    lse2: gpu.stream.alloc_zeros::<f32>(lens.lse2)?,
                    semaphores: gpu.stream.alloc_zeros::<i32>(lens.semaphores)?,
                    tickets: gpu.stream.alloc_zeros::<i32>(lens.tickets)?,
                    head_section: None,
                }),
                _ => None,
            },
        })
    }

    /// Plans `version` in `mode` on `problem` with inputs `t` and a workspace of its own
    /// (refused, before the workspace is made, where the version cannot take the problem).
    pub fn plan<'a, T: Element>(
        &'a self,
        gpu: &'a Gpu,
        version: Version,
        mode: Mode,
        problem: &'a BackwardProblem,
        t: BackwardTensors<'a, T>,
    ) -> Result<BackwardPlan<'a, T>> {
        self.kernel_for::<T>(version, problem)?;
        let ws = self.workspace(gpu, version, problem)?;
        self.plan_in(gpu, version, mode, problem, t, ws)
    }

    /// [`FlashAttention::plan`] in a workspace made for this version and problem (owned, or
    /// `&mut` to keep it for the next call).
    pub fn plan_in<'a, T: Element, W: BorrowMut<Workspace>>(
        &'a self,
        gpu: &'a Gpu,
        version: Version,
        mode: Mode,
        problem: &'a BackwardProblem,
        t: BackwardTensors<'a, T>,
        ws: W,
    ) -> Result<BackwardPlan<'a, T, W>> {
        let shape = problem.shape();
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
        let (kernel, launch) = self.kernel_for::<T>(version, problem)?;
        let w = ws.borrow();
        let atomic = version != Version::Naive && mode == Mode::Atomic;
        let not_its = || {
            format!(
                "attention backward: this workspace is not {}'s",
                version.name()
            )
        };
        if atomic && w.dq_accum.len() != q_len {
            bail!(not_its());
        }
        let steps = match version {
            Version::FaHopper => {
                let hopper = self.hopper.as_ref().expect("planned above");
                let kernels = (hopper, &self.kernels);
                Steps::Hopper(Box::new(HopperSteps::new(gpu, kernels, problem, &t, w)?))
            }
            _ => {
                if w.delta.len() != rows {
                    bail!(not_its());
                }
                if version == Version::Naive {
                    let score_len = problem.forward.score_len();
                    let Some((probs, dscores)) = w.naive.as_ref() else {
                        bail!("the naive version needs its workspace (P and dS)");
                    };
                    if probs.len() < score_len || dscores.len() < score_len {
                        bail!("the naive workspace must hold {score_len} floats");
                    }
                }
                Steps::Portable(PortableSteps::new(
                    &self.kernels,
                    dtype,
                    version,
                    mode,
                    problem,
                )?)
            }
        };
        Ok(BackwardPlan {
            gpu,
            version,
            mode,
            kernel,
            launch,
            problem,
            inputs: t,
            ws,
            steps,
        })
    }

    /// One backward call, planned in `ws` and launched: `grads` (`[dQ | dK | dV]`, the
    /// lengths of Q, K and V) is written whole.
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
        self.plan_in(gpu, version, mode, problem, t, ws)?
            .launch(grads)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kernel_compiles_for_sm90_without_spilling() {
        common::testing::assert_builds_compile_without_spills(&[attention_bwd::portable_build()]);
    }

    #[test]
    fn the_backward_tiles_have_the_forward_s_head_dims() {
        // Day 10's `Version::takes_head_dim` answers for both days: fa_hopper's backward must
        // have a tile at exactly the head dims its forward has one.
        let dims: Vec<usize> = BACKWARD_TILES.iter().map(|t| t.head_dim).collect();
        assert_eq!(dims, day10::hopper_head_dims());
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
}
