//! `flash_attention`: day 10's forward and day 20's backward on PyTorch's tensors.
//!
//! The tensors arrive as device pointers the Python layer has checked (device, dtype,
//! contiguity, sizes): Q, O and dO `[total_q, heads, head_dim]`, K and V `[total_k, kv_heads,
//! head_dim]`, L (f32, `[total_q, heads]`), the gradients one buffer `[dQ | dK | dV]`. A batch
//! of equal lengths `[batch, seqlen, heads, head_dim]` is the same memory as the packed layout,
//! so both are one problem to the kernels, described by the sequences' lengths.

use std::sync::{Arc, Mutex};

use anyhow::Result;
use common::Element;
use common::reference::attention::AttentionShape;
use day20::{BackwardProblem, BackwardTensors, Mode, Tensors, Workspace};
use half::{bf16, f16};

use crate::borrowed::Borrowed;
use crate::device::{Cache, Device, Loaded, device};

/// The layer's state on one device: days 10 and 20's kernels, and each recent problem's
/// scratch.
#[derive(Default)]
pub struct State {
    kernels: Loaded<day20::FlashAttention>,
    scratch: Cache<AttentionShape, Scratch>,
}

/// What a problem keeps between calls: its offsets on the device, and the backward's
/// workspace once a backward has run.
pub struct Scratch {
    problem: BackwardProblem,
    workspace: Mutex<Option<Workspace>>,
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
    fn scratch(&self, dev: &Device) -> Result<Arc<Scratch>> {
        dev.attention.scratch.get(dev, self.shape.clone(), |gpu| {
            Ok(Scratch {
                problem: BackwardProblem::new(gpu, &self.shape)?,
                workspace: Mutex::new(None),
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

/// Elements of Q (and O) and of K (and V), as day 20 counts them, and rows of L.
fn lens(problem: &BackwardProblem) -> (usize, usize, usize) {
    let (q_len, k_len) = problem.lens();
    let shape = problem.shape();
    (q_len, k_len, shape.total_q() * shape.heads)
}

/// The call's shape checked, then its device, the kernels loaded there and the problem's
/// scratch.
fn open(call: &Call) -> Result<(Arc<Device>, Arc<day20::FlashAttention>, Arc<Scratch>)> {
    day10::validate(&call.shape)?;
    let dev = device(call.device)?;
    let day = dev
        .attention
        .kernels
        .get(&dev, day20::FlashAttention::load)?;
    let scratch = call.scratch(&dev)?;
    Ok((dev, day, scratch))
}

fn forward_as<T: Element>(call: &Call, p: &ForwardPointers) -> Result<&'static str> {
    let (dev, day, scratch) = open(call)?;
    let (version, _) = day.fastest();
    let (q_len, k_len, rows) = lens(&scratch.problem);
    // SAFETY: PyTorch's current stream of this device, alive for the call.
    let gpu = unsafe { dev.on_stream(call.stream) };
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
    let tensors = Tensors {
        q: &q,
        k: &k,
        v: &v,
        lse: &mut lse,
        scores: None,
    };
    day.forward(&gpu, version, &scratch.problem, tensors, &mut o)?;
    Ok(version.name())
}

fn backward_as<T: Element>(
    call: &Call,
    p: &BackwardPointers,
    deterministic: bool,
) -> Result<&'static str> {
    let (dev, day, scratch) = open(call)?;
    let (_, version) = day.fastest();
    let mut workspace = scratch.workspace.lock().unwrap_or_else(|e| e.into_inner());
    if workspace.is_none() {
        *workspace = Some(day.workspace(&dev.gpu, version, &scratch.problem)?);
        dev.gpu.synchronize()?;
    }
    let ws = workspace.as_mut().expect("made above");
    let (q_len, k_len, rows) = lens(&scratch.problem);
    // SAFETY: as in `forward_as`.
    let gpu = unsafe { dev.on_stream(call.stream) };
    // SAFETY: as in `forward_as`; the gradients buffer holds dQ, dK and dV back to back.
    let (q, k, v, o, d_o, lse, mut grads) = unsafe {
        (
            Borrowed::<T>::new(&gpu, p.q, q_len),
            Borrowed::<T>::new(&gpu, p.k, k_len),
            Borrowed::<T>::new(&gpu, p.v, k_len),
            Borrowed::<T>::new(&gpu, p.o, q_len),
            Borrowed::<T>::new(&gpu, p.d_o, q_len),
            Borrowed::<f32>::new(&gpu, p.lse, rows),
            Borrowed::<T>::new(&gpu, p.grads, q_len + 2 * k_len),
        )
    };
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
        ws,
        &mut grads,
    )?;
    Ok(version.name())
}
