//! `fused_linear_cross_entropy`: day 19's chunked linear + cross-entropy on PyTorch's tensors.
//!
//! One call is day 19's whole `chunked_cublas` run: for each chunk of tokens, the chunk's
//! logits `H W^T` (cuBLAS), the loss rows and their gradient written over those logits in
//! place (day 19's row kernel), the chunk's dH and its share of dW (cuBLAS); then the mean
//! loss. The forward therefore returns the gradients too; the Python layer keeps them for its
//! backward, which only scales them by the incoming gradient. The whole `[tokens, vocab]`
//! logits never exist, only one chunk of them.
//!
//! The tensors arrive as device pointers the Python layer has checked (device, dtype,
//! contiguity, sizes): H `[tokens, hidden]` and W `[vocab, hidden]` (nn.Linear's layout, the
//! one day 19 takes) in bf16, the labels as int32 `[tokens]` (day 19's targets), the
//! gradients one bf16 buffer `[dH | dW]` and the loss one f32. The call's scratch arrives the
//! same way, made by the Python layer for this call from PyTorch's allocator: the chunk of
//! logits, the per-token losses and cuBLAS's workspace.
//!
//! Backend: cuBLAS, on every GPU. Day 19's Results measure `chunked_cublas` (40.4 ms at
//! 8192 x 4096 x 128256 on the H100) ahead of `chunked_day18` (43.3 ms, and Hopper only, and
//! only for vocab and hidden sizes that are multiples of 8); `naive` is faster still but holds
//! the whole logits, which is what this layer exists to avoid. The chunk is day 19's
//! `default_chunk` unless the caller names one (the Python layer asks
//! `fused_linear_cross_entropy_chunk` for it, to size the logits).

use std::sync::{Mutex, MutexGuard};

use anyhow::Result;
use common::error::UsageError;
use common::gpu::cublas::Cublas;
use common::sizes;
use day19::reference::CeOptions;
use day19::{CrossEntropy, FusedPlan, LossScratch, Shape, default_chunk};
use half::bf16;
use pyo3::prelude::*;

use crate::borrowed::{Borrowed, Lent, Release, release};
use crate::device::{Loaded, device};
use crate::errors::to_py;

/// The Python function's name, for messages.
const FN: &str = "fused_linear_cross_entropy";

/// What the call reports back: the loop that ran.
const VERSION: &str = "chunked_cublas";

/// The layer's state on one device: day 19's cross-entropy kernels and one cuBLAS handle,
/// both made on the first call. Everything a call writes besides its outputs (the chunk of
/// logits, the per-token losses, cuBLAS's workspace) is the caller's: PyTorch tensors taken
/// from its allocator for that call, so two streams' calls never share scratch and a CUDA
/// graph can capture a call (after a first one has made the kernels and the handle). The
/// handle still names the last call's stream and workspace after it returns: every call binds
/// it to its own before using it, under its lock.
#[derive(Default)]
pub struct State {
    kernels: Loaded<CrossEntropy>,
    blas: Loaded<Mutex<Cublas>>,
}

/// One call's problem: where it runs, its sizes and the loss's options.
pub struct Call {
    pub device: usize,
    /// PyTorch's current stream.
    pub stream: u64,
    pub shape: Shape,
    /// Tokens per chunk (the Python layer's choice, or day 19's default), at most the tokens.
    pub chunk: usize,
    pub ignore_index: i64,
    pub label_smoothing: f64,
    /// The z-loss coefficient (`lse_square_scale`: `loss += z lse^2` per token).
    pub z_loss: f64,
}

/// Device pointers of one call: H, W and the int32 labels in; `[dH | dW]` and the mean loss
/// out; the call's scratch.
pub struct Pointers {
    pub h: u64,
    pub weight: u64,
    pub labels: u64,
    pub grads: u64,
    pub loss: u64,
    /// `chunk x vocab` bf16: a chunk's logits, then their gradient.
    pub logits: u64,
    /// `tokens + 1` f32: each token's loss, then 1/N.
    pub rows: u64,
    /// cuBLAS's workspace, `workspace_bytes` long.
    pub workspace: u64,
    pub workspace_bytes: usize,
}

impl Call {
    /// Checks the sizes and options before anything touches the GPU; returns the options as
    /// day 19 takes them. Day 19's own checks of the same (in `FusedPlan::new`) are internal
    /// errors; these are the caller's.
    fn check(&self) -> Result<CeOptions, UsageError> {
        check_sizes(self.shape)?;
        if self.chunk == 0 || self.chunk > self.shape.tokens {
            return Err(UsageError::new(format!(
                "{FN}: a chunk of {} tokens; it takes from 1 to the {} tokens",
                self.chunk, self.shape.tokens
            )));
        }
        sizes::product(
            &format!("{FN}: chunk x vocab x 2 bytes"),
            &[self.chunk, self.shape.vocab, 2],
        )?;
        let ignore_index = i32::try_from(self.ignore_index).map_err(|_| {
            UsageError::new(format!(
                "{FN}: ignore_index {} is not an int32, as the kernels' labels are",
                self.ignore_index
            ))
        })?;
        let opts = CeOptions {
            label_smoothing: self.label_smoothing,
            z_loss: self.z_loss,
            ignore_index,
        };
        day19::validate_options(&opts).map_err(|e| UsageError::new(format!("{FN}: {e}")))?;
        Ok(opts)
    }
}

/// The sizes day 19 takes, and every buffer's bytes addressable.
fn check_sizes(shape: Shape) -> Result<(), UsageError> {
    let Shape {
        tokens,
        hidden,
        vocab,
    } = shape;
    if tokens == 0 || hidden == 0 || vocab == 0 {
        return Err(UsageError::new(format!(
            "{FN}: {tokens} tokens, hidden size {hidden} and vocabulary {vocab}; the kernels \
             take at least one of each"
        )));
    }
    // The labels are day 19's i32 targets; cuBLAS takes dimensions below 2^31; the row kernel
    // launches 8 blocks per token of a chunk (day 19's own limits, its main.rs).
    sizes::at_most(&format!("{FN}: the vocabulary"), vocab, i32::MAX as usize)?;
    sizes::at_most(&format!("{FN}: the hidden size"), hidden, i32::MAX as usize)?;
    sizes::at_most(&format!("{FN}: tokens"), tokens, i32::MAX as usize / 8)?;
    // [dH | dW] in bytes (H and W are smaller), and `default_chunk`'s 4 x tokens x hidden.
    sizes::product(
        &format!("{FN}: (tokens + vocab) x hidden x 4"),
        &[tokens + vocab, hidden, 4],
    )?;
    Ok(())
}

/// Runs the forward and backward on the stream; returns the loop that ran and its chunk.
pub fn run(call: &Call, p: &Pointers) -> Result<(&'static str, usize)> {
    let opts = call.check()?;
    let shape = call.shape;
    let chunk = call.chunk;
    let dev = device(call.device)?;
    // SAFETY: PyTorch's current stream of this device, alive for the call.
    let gpu = unsafe { dev.on_stream(call.stream) };
    let ce = dev.loss.kernels.get(&dev, &gpu, CrossEntropy::load)?;
    let blas = dev
        .loss
        .blas
        .get(&dev, &gpu, |own| Cublas::open(own).map(Mutex::new))?;
    let Shape {
        tokens,
        hidden,
        vocab,
    } = shape;
    // SAFETY: the Python layer checked each tensor: on this device, contiguous, H of
    // tokens x hidden bf16, W of vocab x hidden bf16, the labels `tokens` int32, the gradients
    // (tokens + vocab) x hidden bf16, the loss one f32, and made the scratch for this call:
    // the logits chunk x vocab bf16, the rows tokens + 1 f32 (the sizes' products were
    // checked above); it holds them until the work is enqueued, and PyTorch's allocator keeps
    // their memory for the stream's work after that.
    let (h, w, labels, mut grads, mut loss, logits, scratch) = unsafe {
        (
            Borrowed::<bf16>::new(&gpu, p.h, tokens * hidden),
            Borrowed::<bf16>::new(&gpu, p.weight, vocab * hidden),
            Borrowed::<i32>::new(&gpu, p.labels, tokens),
            Borrowed::<bf16>::new(&gpu, p.grads, (tokens + vocab) * hidden),
            Borrowed::<f32>::new(&gpu, p.loss, 1),
            Borrowed::<bf16>::new(&gpu, p.logits, chunk * vocab).into_slice(),
            LossScratch {
                row_loss: Borrowed::<f32>::new(&gpu, p.rows, tokens).into_slice(),
                inv_count: Borrowed::<f32>::new(&gpu, p.rows + 4 * tokens as u64, 1).into_slice(),
            },
        )
    };
    let mut plan = Lent::new(FusedPlan::with_scratch(
        shape, chunk, &opts, logits, scratch,
    )?);
    // Held while the loop is enqueued: the handle points at this call's stream and workspace
    // until the next call's `bind`.
    let mut blas = lock(&blas);
    // SAFETY: PyTorch's stream of the handle's device; the workspace is this call's tensor,
    // which PyTorch's allocator keeps for the stream's work.
    unsafe { blas.bind(gpu.stream.clone(), p.workspace, p.workspace_bytes) }?;
    // The buffers are this call's, so its launches are planned for it.
    let launches = plan.prepare(&gpu, &ce, &*blas, &h, &w, &grads)?;
    plan.run(
        &gpu, &launches, &h, &w, &labels, &opts, &mut grads, &mut loss,
    )?;
    Ok((VERSION, plan.chunk))
}

impl Release for FusedPlan {
    fn release(self) {
        let (logits, scratch) = self.into_scratch();
        release(logits);
        release(scratch.row_loss);
        release(scratch.inv_count);
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding the lock leaves a handle whose next call binds it again: the lock
    // is taken as it is.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Day 19's forward and backward: writes `[dH | dW]` into `grads` and the mean loss over the
/// labels not ignored into `loss` (f32; 0 when every label is ignored); returns the loop that
/// ran and its chunk (tokens per chunk). H is `[tokens, hidden]`, W `[vocab, hidden]`, both
/// bf16; the labels int32; a label outside `[0, vocab)` counts as ignored. `scratch` is the
/// call's: the logits (`chunk x vocab` bf16), the rows (`tokens + 1` f32), and cuBLAS's
/// workspace and its bytes.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn fused_linear_cross_entropy(
    device: usize,
    stream: u64,
    tokens: usize,
    hidden: usize,
    vocab: usize,
    chunk: usize,
    ignore_index: i64,
    label_smoothing: f64,
    lse_square_scale: f64,
    h: u64,
    weight: u64,
    labels: u64,
    grads: u64,
    loss: u64,
    scratch: (u64, u64, u64, usize),
) -> PyResult<(&'static str, usize)> {
    let call = Call {
        device,
        stream,
        shape: Shape {
            tokens,
            hidden,
            vocab,
        },
        chunk,
        ignore_index,
        label_smoothing,
        z_loss: lse_square_scale,
    };
    let p = Pointers {
        h,
        weight,
        labels,
        grads,
        loss,
        logits: scratch.0,
        rows: scratch.1,
        workspace: scratch.2,
        workspace_bytes: scratch.3,
    };
    run(&call, &p).map_err(to_py)
}

/// Day 19's default chunk (tokens per chunk) for a problem, capped at its tokens: the chunk's
/// logits about four times the size of H, a power of two of at least 128 rows. Needs no GPU.
#[pyfunction]
fn fused_linear_cross_entropy_chunk(tokens: usize, hidden: usize, vocab: usize) -> PyResult<usize> {
    let shape = Shape {
        tokens,
        hidden,
        vocab,
    };
    check_sizes(shape).map_err(|e| to_py(e.into()))?;
    Ok(default_chunk(shape).min(tokens))
}

/// Adds the layer's functions to the module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(fused_linear_cross_entropy, m)?)?;
    m.add_function(wrap_pyfunction!(fused_linear_cross_entropy_chunk, m)?)?;
    Ok(())
}
