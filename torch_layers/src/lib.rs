//! `day_kernels._native`: the days' kernels on PyTorch's CUDA tensors.
//!
//! The Python package `day_kernels` (in `python/`) checks every tensor (device, dtype,
//! layout, contiguity, shapes) and raises `ValueError`/`TypeError` before anything reaches
//! here; these functions take what it found: the device, PyTorch's current stream, the dtype
//! name, the sizes and the tensors' device pointers. Each enqueues the days' own kernels on
//! that stream, on the tensors' memory in place, and returns without waiting for them. The
//! sizes are checked again here by the days' own validation (a `ValueError` with their
//! message), and a GPU the kernels cannot serve is a `RuntimeError`.

pub mod borrowed;
pub mod errors;
pub mod device;
pub mod attention;
pub mod norm;
pub mod activation;
pub mod loss;

use common::reference::attention::AttentionShape;
use pyo3::prelude::*;

use crate::errors::to_py;

/// The GPU's name and architecture (`NVIDIA H100 80GB HBM3 (sm_90, 132 SMs, 50 MiB L2)`), or
/// a `RuntimeError` saying why there is none: for tests and error messages.
#[pyfunction]
fn device_summary(device: usize) -> PyResult<String> {
    let dev = device::device(device).map_err(to_py)?;
    Ok(dev.gpu.info.summary())
}

/// The attention problem as `attention.py` keeps it: `(seqlens_q, seqlens_k, heads, kv_heads,
/// head_dim, causal)`.
type Problem = (Vec<usize>, Vec<usize>, usize, usize, usize, bool);

/// The call the Python layer describes: where it runs, its dtype and its problem.
fn attention_call(device: usize, stream: u64, dtype: String, problem: Problem) -> attention::Call {
    let (seqlens_q, seqlens_k, heads, kv_heads, head_dim, causal) = problem;
    let shape = AttentionShape {
        heads,
        kv_heads,
        head_dim,
        seqlens_q,
        seqlens_k,
        causal,
    };
    attention::Call {
        device,
        stream,
        dtype,
        shape,
    }
}

/// Day 10's forward: writes O and L (log-sum-exp per query row and head, f32); returns the
/// version that ran. `tickets` is two zeroed int32 made for the call (`fa_hopper`'s counters).
#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn attention_forward(
    device: usize,
    stream: u64,
    dtype: String,
    seqlens_q: Vec<usize>,
    seqlens_k: Vec<usize>,
    heads: usize,
    kv_heads: usize,
    head_dim: usize,
    causal: bool,
    q: u64,
    k: u64,
    v: u64,
    o: u64,
    lse: u64,
    tickets: u64,
) -> PyResult<&'static str> {
    let problem = (seqlens_q, seqlens_k, heads, kv_heads, head_dim, causal);
    let call = attention_call(device, stream, dtype, problem);
    let pointers = attention::ForwardPointers {
        q,
        k,
        v,
        o,
        lse,
        tickets,
    };
    attention::forward(&call, &pointers).map_err(to_py)
}

/// Day 20's backward: writes `[dQ | dK | dV]` into `grads`; returns the version that ran.
/// `workspace` is two tensors made for the call at `attention_workspace`'s sizes: (the zeroed
/// part, dQ's accumulator).
#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn attention_backward(
    device: usize,
    stream: u64,
    dtype: String,
    seqlens_q: Vec<usize>,
    seqlens_k: Vec<usize>,
    heads: usize,
    kv_heads: usize,
    head_dim: usize,
    causal: bool,
    deterministic: bool,
    q: u64,
    k: u64,
    v: u64,
    o: u64,
    d_o: u64,
    lse: u64,
    grads: u64,
    workspace: (u64, u64),
) -> PyResult<&'static str> {
    let problem = (seqlens_q, seqlens_k, heads, kv_heads, head_dim, causal);
    let call = attention_call(device, stream, dtype, problem);
    let pointers = attention::BackwardPointers {
        q,
        k,
        v,
        o,
        d_o,
        lse,
        grads,
        zeroed: workspace.0,
        dq_accum: workspace.1,
    };
    attention::backward(&call, &pointers, deterministic).map_err(to_py)
}

/// The backward's workspace for a problem (`attention_forward`'s six arguments from
/// `seqlens_q` to `causal`, as one tuple), in 4-byte elements: (the zeroed part, dQ's
/// accumulator), for the tensors the Python layer makes for each backward. `stream` is
/// PyTorch's current stream, asked whether it is capturing a CUDA graph.
#[pyfunction]
fn attention_workspace(
    device: usize,
    stream: u64,
    dtype: String,
    problem: Problem,
) -> PyResult<(usize, usize)> {
    let call = attention_call(device, stream, dtype, problem);
    attention::workspace_elements(&call).map_err(to_py)
}

#[pymodule]
#[pyo3(name = "_native")]
fn native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(device_summary, m)?)?;
    m.add_function(wrap_pyfunction!(attention_forward, m)?)?;
    m.add_function(wrap_pyfunction!(attention_backward, m)?)?;
    m.add_function(wrap_pyfunction!(attention_workspace, m)?)?;
    norm::register(m)?;
    activation::register(m)?;
    loss::register(m)?;
    Ok(())
}
