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
//! gradients one bf16 buffer `[dH | dW]` and the loss one f32.
//!
//! Backend: cuBLAS, on every GPU. Day 19's Results measure `chunked_cublas` (40.4 ms at
//! 8192 x 4096 x 128256 on the H100) ahead of `chunked_day18` (43.3 ms, and Hopper only, and
//! only for vocab and hidden sizes that are multiples of 8); `naive` is faster still but holds
//! the whole logits, which is what this layer exists to avoid. The chunk is day 19's
//! `default_chunk` unless the caller names one.

use std::sync::{Arc, Mutex, MutexGuard};

use anyhow::Result;
use common::error::UsageError;
use common::gpu::cublas::Cublas;
use common::sizes;
use day19::reference::CeOptions;
use day19::{CrossEntropy, FusedPlan, Shape, default_chunk};
use half::bf16;
use pyo3::prelude::*;

use crate::borrowed::Borrowed;
use crate::device::{Cache, Device, Loaded, device};
use crate::errors::to_py;

/// The Python function's name, for messages.
const FN: &str = "fused_linear_cross_entropy";

/// What the call reports back: the loop that ran.
const VERSION: &str = "chunked_cublas";

/// The layer's state on one device: day 19's cross-entropy kernels, a cuBLAS handle per
/// PyTorch stream, and each recent problem's plan (its chunk of logits and per-token losses).
#[derive(Default)]
pub struct State {
    kernels: Loaded<CrossEntropy>,
    blas: Cache<u64, Mutex<Cublas>>,
    plans: Cache<PlanKey, Mutex<FusedPlan>>,
}

/// What a plan's scratch depends on, and the stream it is used on. Two streams with the same
/// shape get a plan each: the chunk of logits is written by every call, and two streams' calls
/// may run at the same time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct PlanKey {
    stream: u64,
    shape: Shape,
    /// Tokens per chunk, at most `shape.tokens`.
    chunk: usize,
}

/// One call's problem: where it runs, its sizes and the loss's options.
pub struct Call {
    pub device: usize,
    /// PyTorch's current stream.
    pub stream: u64,
    pub shape: Shape,
    /// Tokens per chunk; `None` for day 19's default.
    pub chunk: Option<usize>,
    pub ignore_index: i64,
    pub label_smoothing: f64,
    /// The z-loss coefficient (`lse_square_scale`: `loss += z lse^2` per token).
    pub z_loss: f64,
}

/// Device pointers of one call: H, W and the int32 labels in; `[dH | dW]` and the mean loss
/// out.
pub struct Pointers {
    pub h: u64,
    pub weight: u64,
    pub labels: u64,
    pub grads: u64,
    pub loss: u64,
}

impl Call {
    /// Checks the sizes and options before anything touches the GPU; returns the options as
    /// day 19 takes them. Day 19's own checks of the same (in `FusedPlan::new`) are internal
    /// errors; these are the caller's.
    fn check(&self) -> Result<CeOptions, UsageError> {
        check_sizes(self.shape)?;
        if self.chunk == Some(0) {
            return Err(UsageError::new(format!(
                "{FN}: chunk_size must be at least 1 token"
            )));
        }
        sizes::product(
            &format!("{FN}: chunk x vocab x 2 bytes"),
            &[self.chunk(), self.shape.vocab, 2],
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

    /// Tokens per chunk: the caller's, or day 19's default; never more than the tokens (a
    /// plan takes the same). Only after `check`, which refuses a chunk of 0.
    fn chunk(&self) -> usize {
        self.chunk
            .unwrap_or_else(|| default_chunk(self.shape))
            .min(self.shape.tokens)
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
    let chunk = call.chunk();
    let dev = device(call.device)?;
    let ce = dev.loss.kernels.get(&dev, CrossEntropy::load)?;
    // SAFETY: PyTorch's current stream of this device, alive for the call. The cuBLAS handle
    // made on it outlives the call: see `blas`.
    let gpu = unsafe { dev.on_stream(call.stream) };
    let blas = blas(&dev, call.stream, &gpu)?;
    let plan = dev.loss.plans.get(
        &dev,
        PlanKey {
            stream: call.stream,
            shape,
            chunk,
        },
        // Made on the extension's stream and synchronized there before PyTorch's uses it.
        |own| FusedPlan::new(own, shape, chunk, &opts).map(Mutex::new),
    )?;
    let Shape {
        tokens,
        hidden,
        vocab,
    } = shape;
    // SAFETY: the Python layer checked each tensor: on this device, contiguous, H of
    // tokens x hidden bf16, W of vocab x hidden bf16, the labels `tokens` int32, the gradients
    // (tokens + vocab) x hidden bf16, the loss one f32 (the sizes' products were checked
    // above); it holds them until the work is enqueued, and PyTorch's allocator keeps their
    // memory for the stream's work after that.
    let (h, w, labels, mut grads, mut loss) = unsafe {
        (
            Borrowed::<bf16>::new(&gpu, p.h, tokens * hidden),
            Borrowed::<bf16>::new(&gpu, p.weight, vocab * hidden),
            Borrowed::<i32>::new(&gpu, p.labels, tokens),
            Borrowed::<bf16>::new(&gpu, p.grads, (tokens + vocab) * hidden),
            Borrowed::<f32>::new(&gpu, p.loss, 1),
        )
    };
    // Held while the loop is enqueued: one handle and one plan serve one call at a time.
    let blas = lock(&blas);
    let mut plan = lock(&plan);
    // The buffers are this call's, so its launches are planned for it.
    let launches = plan.prepare(&gpu, &ce, &*blas, &h, &w, &grads)?;
    plan.run(
        &gpu, &launches, &h, &w, &labels, &opts, &mut grads, &mut loss,
    )?;
    Ok((VERSION, plan.chunk))
}

/// The cuBLAS handle of PyTorch's stream `stream`, made on first use on it.
///
/// A handle enqueues on the stream it was made with, and `Cublas` keeps it there: it has no
/// way to move a handle to another stream per call. Opening one per call would cost more than
/// the call: `cublasCreate` allocates the handle's workspace and `cublasDestroy` waits for the
/// whole device. So each stream keeps its own handle, which also gives each stream its own
/// workspace (one handle's workspace on two streams at once would be shared by their GEMMs).
/// PyTorch's streams (the default one and its pool's) are never destroyed, so the handle's
/// stream stays valid for every later call that names it; a stream that is destroyed is only
/// named again once its handle value belongs to a live stream, which the handle then serves.
/// The cache keeps the 8 most recent streams and waits for the device before dropping one.
fn blas(dev: &Device, stream: u64, gpu: &common::Gpu) -> Result<Arc<Mutex<Cublas>>> {
    dev.loss
        .blas
        .get(dev, stream, |_own| Cublas::open(gpu).map(Mutex::new))
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding the lock leaves the plan's scratch as it was, which every call
    // rewrites before reading: the lock is taken as it is.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Day 19's forward and backward: writes `[dH | dW]` into `grads` and the mean loss over the
/// labels not ignored into `loss` (f32; 0 when every label is ignored); returns the loop that
/// ran and its chunk (tokens per chunk). H is `[tokens, hidden]`, W `[vocab, hidden]`, both
/// bf16; the labels int32; a label outside `[0, vocab)` counts as ignored.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn fused_linear_cross_entropy(
    device: usize,
    stream: u64,
    tokens: usize,
    hidden: usize,
    vocab: usize,
    chunk: Option<usize>,
    ignore_index: i64,
    label_smoothing: f64,
    lse_square_scale: f64,
    h: u64,
    weight: u64,
    labels: u64,
    grads: u64,
    loss: u64,
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
