//! `flash_attention`: day 10's forward and day 20's backward on PyTorch's tensors.
//!
//! The tensors arrive as device pointers the Python layer has checked (device, dtype,
//! contiguity, sizes): Q, O and dO `[total_q, heads, head_dim]`, K and V `[total_k, kv_heads,
//! head_dim]`, L (f32, `[total_q, heads]`), the gradients one buffer `[dQ | dK | dV]`. A batch
//! of equal lengths `[batch, seqlen, heads, head_dim]` is the same memory as the packed layout,
//! so both are one problem to the kernels, described by the sequences' lengths.

use std::sync::Arc;

use anyhow::Result;
use common::reference::attention::AttentionShape;
use common::{Element, Gpu};
use day20::{
    BackwardProblem, BackwardTensors, HopperBuffers, Mode, Tensors, Version, Workspace,
    WorkspaceBuffers,
};
use half::{bf16, f16};

use crate::borrowed::{Borrowed, Lent, Release};
use crate::device::{Cache, Device, Loaded, capturing, device};

/// The layer's state on one device: days 10 and 20's kernels, and each problem's offsets on
/// the device (the recent problems', and for good those a CUDA graph captured: see [`Cache`]).
/// Everything else a call writes besides its outputs (the forward's tickets, the backward's
/// workspace) is the caller's: PyTorch tensors made for that call, so two streams' calls never
/// share them and a graph holds its own.
#[derive(Default)]
pub struct State {
    kernels: Loaded<day20::FlashAttention>,
    scratch: Cache<AttentionShape, Scratch>,
}

/// What a problem keeps between calls: its offsets on the device.
pub struct Scratch {
    problem: BackwardProblem,
}

/// One call's problem: where it runs and its shape.
pub struct Call {
    pub device: usize,
    /// PyTorch's current stream.
    pub stream: u64,
    /// `bfloat16` or `float16`.
    pub dtype: String,
    pub shape: AttentionShape,
}

impl Call {
    /// The problem's offsets; `capturing` as [`Cache::get`] takes it.
    fn scratch(&self, dev: &Device, capturing: bool) -> Result<Arc<Scratch>> {
        dev.attention
            .scratch
            .get(dev, self.shape.clone(), capturing, |gpu| {
                Ok(Scratch {
                    problem: BackwardProblem::new(gpu, &self.shape)?,
                })
            })
    }
}

/// Device pointers of one forward: Q, K, V in; O and L out.
pub struct ForwardPointers {
    pub q: u64,
    pub k: u64,
    pub v: u64,
    pub o: u64,
    pub lse: u64,
    /// `fa_hopper`'s two ticket counters (int32), zero.
    pub tickets: u64,
}

/// Device pointers of one backward: the forward's inputs and outputs, dO, and the gradients.
pub struct BackwardPointers {
    pub q: u64,
    pub k: u64,
    pub v: u64,
    pub o: u64,
    pub d_o: u64,
    pub lse: u64,
    pub grads: u64,
    /// The workspace's buffers that start at zero, back to back: D, L2 (f32), the semaphores
    /// and the tickets (int32), as [`workspace_elements`] sizes them.
    pub zeroed: u64,
    /// dQ's f32 accumulator.
    pub dq_accum: u64,
}

/// Runs the forward on the stream; returns the version that ran (`fa_hopper` on Hopper).
pub fn forward(call: &Call, p: &ForwardPointers) -> Result<&'static str> {
    match call.dtype.as_str() {
        "bfloat16" => forward_as::<bf16>(call, p),
        "float16" => forward_as::<f16>(call, p),
        other => Err(common::UsageError::new(format!(
            "flash_attention takes bfloat16 or float16 tensors, not {other}"
        ))
        .into()),
    }
}

/// Runs the backward on the stream; returns the version that ran.
pub fn backward(call: &Call, p: &BackwardPointers, deterministic: bool) -> Result<&'static str> {
    match call.dtype.as_str() {
        "bfloat16" => backward_as::<bf16>(call, p, deterministic),
        "float16" => backward_as::<f16>(call, p, deterministic),
        other => Err(common::UsageError::new(format!(
            "flash_attention takes bfloat16 or float16 tensors, not {other}"
        ))
        .into()),
    }
}

/// The backward's workspace for a call's problem, in 4-byte elements: (the buffers that
/// start at zero, back to back: D, L2, the semaphores, the tickets; dQ's accumulator). The
/// Python layer makes them as tensors for each backward.
pub fn workspace_elements(call: &Call) -> Result<(usize, usize)> {
    let Opened { day, scratch, .. } = open(call)?;
    let (_, version) = day.fastest();
    let lens = day20::workspace_lens(version, &scratch.problem)?;
    Ok((
        lens.delta + lens.lse2 + lens.semaphores + lens.tickets,
        lens.dq_accum,
    ))
}

impl Release for Workspace {
    fn release(self) {
        self.leak();
    }
}

/// Elements of Q (and O) and of K (and V), as day 20 counts them, and rows of L.
fn lens_of(problem: &BackwardProblem) -> (usize, usize, usize) {
    let (q_len, k_len) = problem.lens();
    let shape = problem.shape();
    (q_len, k_len, shape.total_q() * shape.heads)
}

/// What a call runs with: the device, PyTorch's stream there, the kernels and the problem's
/// offsets.
struct Opened {
    gpu: Gpu,
    day: Arc<day20::FlashAttention>,
    scratch: Arc<Scratch>,
}

/// The call's shape checked, then its device, the kernels loaded there and the problem's
/// offsets.
fn open(call: &Call) -> Result<Opened> {
    day10::validate(&call.shape)?;
    let dev = device(call.device)?;
    // SAFETY: PyTorch's current stream of this device, alive for the call.
    let gpu = unsafe { dev.on_stream(call.stream) };
    let day = dev
        .attention
        .kernels
        .get(&dev, &gpu, day20::FlashAttention::load)?;
    let scratch = call.scratch(&dev, capturing(&gpu)?)?;
    Ok(Opened { gpu, day, scratch })
}

fn forward_as<T: Element>(call: &Call, p: &ForwardPointers) -> Result<&'static str> {
    let Opened { gpu, day, scratch } = open(call)?;
    let (version, _) = day.fastest();
    let (q_len, k_len, rows) = lens_of(&scratch.problem);
    // SAFETY: the Python layer checked each tensor: on this device, contiguous, of T, of these
    // lengths; it holds them until the work is enqueued, and PyTorch's allocator keeps their
    // memory for the stream's work after that.
    let (q, k, v, mut o, mut lse) = unsafe {
        (
            Borrowed::<T>::new(&gpu, p.q, q_len),
            Borrowed::<T>::new(&gpu, p.k, k_len),
            Borrowed::<T>::new(&gpu, p.v, k_len),
            Borrowed::<T>::new(&gpu, p.o, q_len),
            Borrowed::<f32>::new(&gpu, p.lse, rows),
        )
    };
    // SAFETY: the Python layer made two zeroed int32 for this call's tickets.
    let tickets = unsafe { Borrowed::<i32>::new(&gpu, p.tickets, day10::TICKETS) };
    let tensors = Tensors {
        q: &q,
        k: &k,
        v: &v,
        lse: &mut lse,
        scores: None,
        tickets: Some(&tickets),
    };
    day.forward(&gpu, version, &scratch.problem, tensors, &mut o)?;
    Ok(version.name())
}

fn backward_as<T: Element>(
    call: &Call,
    p: &BackwardPointers,
    deterministic: bool,
) -> Result<&'static str> {
    let Opened { gpu, day, scratch } = open(call)?;
    let (_, version) = day.fastest();
    let lens = day20::workspace_lens(version, &scratch.problem)?;
    let (q_len, k_len, rows) = lens_of(&scratch.problem);
    // SAFETY: as in `forward_as`; the gradients buffer holds dQ, dK and dV back to back; the
    // workspace's tensors were made for this call by the Python layer at the sizes
    // `workspace_elements` gave for this problem: `zeroed` zeros of 4 bytes each, D, L2, the
    // semaphores and the tickets back to back (D's length a multiple of 4, so L2 starts
    // 16-byte aligned for its tensor map), and the accumulator.
    let (q, k, v, o, d_o, lse, mut grads, buffers) = unsafe {
        let at = |elements: usize| p.zeroed + 4 * elements as u64;
        (
            Borrowed::<T>::new(&gpu, p.q, q_len),
            Borrowed::<T>::new(&gpu, p.k, k_len),
            Borrowed::<T>::new(&gpu, p.v, k_len),
            Borrowed::<T>::new(&gpu, p.o, q_len),
            Borrowed::<T>::new(&gpu, p.d_o, q_len),
            Borrowed::<f32>::new(&gpu, p.lse, rows),
            Borrowed::<T>::new(&gpu, p.grads, q_len + 2 * k_len),
            WorkspaceBuffers {
                delta: Borrowed::<f32>::new(&gpu, at(0), lens.delta).into_slice(),
                dq_accum: Borrowed::<f32>::new(&gpu, p.dq_accum, lens.dq_accum).into_slice(),
                hopper: (version == Version::FaHopper).then(|| HopperBuffers {
                    lse2: Borrowed::<f32>::new(&gpu, at(lens.delta), lens.lse2).into_slice(),
                    semaphores: Borrowed::<i32>::new(
                        &gpu,
                        at(lens.delta + lens.lse2),
                        lens.semaphores,
                    )
                    .into_slice(),
                    tickets: Borrowed::<i32>::new(
                        &gpu,
                        at(lens.delta + lens.lse2 + lens.semaphores),
                        lens.tickets,
                    )
                    .into_slice(),
                }),
            },
        )
    };
    let mut ws = Lent::new(Workspace::from_buffers(version, &scratch.problem, buffers)?);
    let tensors = BackwardTensors {
        q: &q,
        k: &k,
        v: &v,
        o: &o,
        d_o: &d_o,
        lse: &lse,
    };
    let mode = if deterministic {
        Mode::Deterministic
    } else {
        Mode::Atomic
    };
    day.backward(
        &gpu,
        version,
        mode,
        &scratch.problem,
        tensors,
        &mut ws,
        &mut grads,
    )?;
    Ok(version.name())
}
