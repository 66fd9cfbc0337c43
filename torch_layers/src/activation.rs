//! `swiglu`: day 13's fused SwiGLU, forward and backward, on PyTorch's tensors.
//!
//! Day 13's layout: the gate `g` and the up projection `x` are two tensors of `n` elements
//! each; the forward writes `silu(g) * x`, the backward reads `dout`, `g` and `x` and writes
//! one buffer `dg | dx` (`2 n` elements), as the day's kernels do. Element-wise, so the
//! tensors' shapes do not matter here, only their element count.
//!
//! Version: `vec` (16-byte loads and stores, the faster in the day's Results table) where
//! every tensor starts on a 16-byte boundary; `scalar` otherwise (a view that starts inside
//! its storage at an odd offset), which any element-aligned pointer serves. The day's
//! `unfused` version (torch's two kernels, `silu(g)` stored between them) is slower in its
//! table and is not used.

use anyhow::Result;
use common::error::UsageError;
use common::{Element, Gpu};
use day13::{Activations, DeviceInputs, Op, OpParams};
use half::{bf16, f16};
use pyo3::prelude::*;

use crate::borrowed::{Borrowed, Lent, Release, release};
use crate::device::{Loaded, device};
use crate::errors::to_py;

/// The layer's state on one device: day 13's kernels, loaded on first use (the day compiles
/// all its ops at once).
#[derive(Default)]
pub struct State {
    kernels: Loaded<Activations>,
}

/// One call: where it runs, the op (`Swiglu` or `SwigluBwd`) and its elements.
struct Call {
    device: usize,
    /// PyTorch's current stream.
    stream: u64,
    /// `bfloat16`, `float16` or `float32`.
    dtype: String,
    op: Op,
    n: usize,
    /// The op's inputs in the day's argument order (`g, x`; `dout, g, x`).
    inputs: Vec<u64>,
    /// `out` (forward) or `dg | dx` (backward).
    out: u64,
}

impl Call {
    /// The element count, checked before anything touches the GPU: the day's own check of an
    /// empty problem is an internal error, this one the caller's.
    fn check(&self) -> Result<(), UsageError> {
        // The largest buffer is the backward's `dg | dx`, of f32 at most.
        let fits = self
            .n
            .checked_mul(self.op.outputs())
            .and_then(|n| n.checked_mul(4))
            .is_some_and(|bytes| bytes <= isize::MAX as usize);
        if self.n == 0 {
            return Err(UsageError::new(
                "swiglu: the tensors are empty; the kernels take at least one element",
            ));
        }
        if !fits {
            return Err(UsageError::new(format!(
                "swiglu: {} elements cannot be addressed",
                self.n
            )));
        }
        Ok(())
    }

    /// `vec` when every pointer is 16-byte aligned, `scalar` otherwise.
    fn version(&self) -> &'static str {
        let aligned = self
            .inputs
            .iter()
            .chain([&self.out])
            .all(|p| p.is_multiple_of(16));
        if aligned { "vec" } else { "scalar" }
    }
}

fn run(call: &Call) -> Result<&'static str> {
    call.check()?;
    match call.dtype.as_str() {
        "bfloat16" => run_as::<bf16>(call),
        "float16" => run_as::<f16>(call),
        "float32" => run_as::<f32>(call),
        other => Err(UsageError::new(format!(
            "swiglu takes bfloat16, float16 or float32 tensors, not {other}"
        ))
        .into()),
    }
}

fn run_as<T: Element>(call: &Call) -> Result<&'static str> {
    let dev = device(call.device)?;
    // SAFETY: PyTorch's current stream of this device, alive for the call; nothing is
    // allocated on it here.
    let gpu = unsafe { dev.on_stream(call.stream) };
    let day = dev.activation.kernels.get(&dev, &gpu, Activations::load)?;
    let version = call.version();
    // SAFETY: the Python layer checked each tensor: on this device, contiguous, of T, the
    // inputs `n` elements each, the output `n` per output of the op; it holds them until the
    // work is enqueued, and PyTorch's allocator keeps their memory for the stream's work after
    // that.
    let (inputs, mut out) = unsafe {
        (
            lend::<T>(&gpu, call),
            Borrowed::<T>::new(&gpu, call.out, call.n * call.op.outputs()),
        )
    };
    let mut plan = day.plan::<T>(&gpu, version, &inputs)?;
    (plan.launch)(&mut out)?;
    Ok(version)
}

/// The day's `DeviceInputs` of one call, made of PyTorch's memory.
///
/// # Safety
/// As [`Borrowed::new`] for each of `call.inputs`, `call.n` elements each.
unsafe fn lend<T>(gpu: &Gpu, call: &Call) -> Lent<DeviceInputs<T>> {
    let borrowed: Vec<Borrowed<T>> = call
        .inputs
        .iter()
        // SAFETY: as the caller promised. A `Borrowed` releases its slice if a later one
        // panics; from here to the guard nothing can fail.
        .map(|&p| unsafe { Borrowed::<T>::new(gpu, p, call.n) })
        .collect();
    Lent::new(DeviceInputs {
        op: call.op,
        // The ops are element-wise: one row of n is the same problem as any other split.
        rows: 1,
        cols: call.n,
        tensors: borrowed.into_iter().map(Borrowed::into_slice).collect(),
        mask: None,
        scale: 1.0,
        params: OpParams::default(),
    })
}

impl<T> Release for DeviceInputs<T> {
    fn release(self) {
        self.tensors.into_iter().for_each(release);
        if let Some(mask) = self.mask {
            release(mask);
        }
    }
}

/// Day 13's forward: `out = silu(g) * x = g * sigmoid(g) * x` over `n` elements; returns the
/// version that ran.
#[pyfunction]
fn swiglu_forward(
    device: usize,
    stream: u64,
    dtype: String,
    n: usize,
    g: u64,
    x: u64,
    out: u64,
) -> PyResult<&'static str> {
    let call = Call {
        device,
        stream,
        dtype,
        op: Op::Swiglu,
        n,
        inputs: vec![g, x],
        out,
    };
    run(&call).map_err(to_py)
}

/// Day 13's backward: writes `dg | dx` (`2 n` elements) into `grads`, `dg = dout * x * s *
/// (1 + g (1 - s))` and `dx = dout * silu(g)`, `s = sigmoid(g)`; returns the version that ran.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn swiglu_backward(
    device: usize,
    stream: u64,
    dtype: String,
    n: usize,
    dout: u64,
    g: u64,
    x: u64,
    grads: u64,
) -> PyResult<&'static str> {
    let call = Call {
        device,
        stream,
        dtype,
        op: Op::SwigluBwd,
        n,
        inputs: vec![dout, g, x],
        out: grads,
    };
    run(&call).map_err(to_py)
}

/// Adds the layer's functions to the module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(swiglu_forward, m)?)?;
    m.add_function(wrap_pyfunction!(swiglu_backward, m)?)?;
    Ok(())
}
