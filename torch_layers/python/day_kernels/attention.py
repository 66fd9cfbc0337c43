"""``flash_attention``: day 10's forward and day 20's backward as operators and an autograd
function.

The operators (``torch.ops.day_kernels``):
``flash_attention_forward(q, k, v, cu_seqlens_q, cu_seqlens_k, causal) -> (out, lse)``, with
``lse`` the log-sum-exp of each query row and head (float32, ``[total_q, heads]``), and
``flash_attention_backward(dout, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, causal,
deterministic)``, which returns the one buffer day 20's kernels write: dq, dk and dv back to
back, flat (``q.numel() + 2 k.numel()`` elements of q's dtype). The sequences' starts are
lists of ints, or None for the batched layout.
"""

import functools
import math

import torch
from torch.autograd.function import once_differentiable

from . import _native
from ._library import define
from ._tensors import (
    DTYPE_NAMES, autocast, cuda_tensor, fits, like, on_cuda, same_device, same_dtype, upstream, where,
)

_FN = "flash_attention"
_DTYPES = (torch.bfloat16, torch.float16)


def flash_attention(
    q,
    k,
    v,
    causal=False,
    scale=None,
    cu_seqlens_q=None,
    cu_seqlens_k=None,
    deterministic=False,
):
    """``softmax(scale * q k^T + mask) v`` per head, differentiable in q, k and v.

    Layouts: ``[batch, seqlen, heads, head_dim]`` for q and ``[batch, seqlen_k, kv_heads,
    head_dim]`` for k and v; or, with ``cu_seqlens_q`` and ``cu_seqlens_k`` (the sequences'
    starts and the total, ``[0, l0, l0 + l1, ...]``, as a list or an integer tensor), packed
    ``[total, heads, head_dim]`` sequences of different lengths. ``heads`` must be a multiple of
    ``kv_heads`` (grouped-query attention). bfloat16 or float16; the head dims the day's
    kernels take (64, 128 and 256 on Hopper). ``causal`` masks each query to the keys at or
    before its position counted from the end of the sequence (bottom-right, as
    FlashAttention does; the same as PyTorch's ``is_causal`` when a sequence's query and key
    lengths are equal). ``scale`` defaults to ``1 / sqrt(head_dim)``; another one multiplies q
    by the ratio first (a copy of q). ``deterministic`` makes the backward's dQ the same bits every run.

    The launch's grid depends on the lengths, so they are read on the host: a tensor
    ``cu_seqlens`` is copied there (a wait for the GPU when it is a CUDA tensor; under
    torch.compile a graph break, and an error with ``fullgraph=True``): pass a list, which
    costs nothing. Under autocast, q, k and v are cast to autocast's dtype first. Not
    differentiable twice.
    """
    q, k, v = autocast(q, k, v)
    cu_seqlens_q = _host_starts("cu_seqlens_q", cu_seqlens_q)
    cu_seqlens_k = _host_starts("cu_seqlens_k", cu_seqlens_k)
    # The operator checks its arguments before it launches; here only where q is copied first
    # (another scale), or where an argument is not a CUDA tensor.
    if scale is not None or not on_cuda(q, k, v):
        _check("day_kernels::flash_attention_forward", q, k, v, cu_seqlens_q, cu_seqlens_k)
    ratio = 1.0 if scale is None else float(scale) * math.sqrt(q.shape[-1])
    if ratio != 1.0:
        q = q * ratio
    # Autograd carries the ratio into q's gradient through this product.
    return _FlashAttention.apply(q, k, v, cu_seqlens_q, cu_seqlens_k, bool(causal), bool(deterministic))


def _host_starts(name, cu):
    """The sequences' starts as a list (None stays None): a tensor is read back to the host."""
    if isinstance(cu, torch.Tensor):
        if cu.dim() != 1 or cu.dtype not in (torch.int32, torch.int64):
            raise TypeError(f"{_FN}: {name} must be a 1-D int32 or int64 tensor, not {cu.dtype} {tuple(cu.shape)}")
        return cu.tolist()
    if cu is None:
        return None
    # The operators' schema takes ints; under torch.compile they may be symbolic ones, which
    # are taken as they are.
    return [c if isinstance(c, (int, torch.SymInt)) else int(c) for c in cu]


def _lengths(fn, name, cu, total):
    """The sequence lengths the starts ``cu`` describe, checked."""
    if len(cu) < 2 or cu[0] != 0:
        raise ValueError(f"{fn}: {name} must start at 0 and hold at least one sequence, got {list(cu)}")
    lengths = [b - a for a, b in zip(cu, cu[1:])]
    if any(n < 0 for n in lengths):
        raise ValueError(f"{fn}: {name} must not decrease, got {list(cu)}")
    if cu[-1] != total:
        raise ValueError(f"{fn}: {name} ends at {cu[-1]} but the tensor holds {total} tokens")
    return lengths


def _check(op, q, k, v, cu_seqlens_q, cu_seqlens_k):
    """Checks q, k and v (each in turn, its device last: one the operator ``op`` runs on), then
    the problem they and the sequences' starts describe."""
    q = cuda_tensor(_FN, "q", q, _DTYPES, dims=(3, 4), op=op)
    k = cuda_tensor(_FN, "k", k, _DTYPES, dims=(3, 4), op=op)
    v = cuda_tensor(_FN, "v", v, _DTYPES, dims=(3, 4), op=op)
    same_device(_FN, q=q, k=k, v=v)
    same_dtype(_FN, q=q, k=k, v=v)
    if k.shape != v.shape:
        raise ValueError(f"{_FN}: k {tuple(k.shape)} and v {tuple(v.shape)} must have one shape")
    if (cu_seqlens_q is None) != (cu_seqlens_k is None):
        raise ValueError(f"{_FN}: give both cu_seqlens_q and cu_seqlens_k, or neither")
    if cu_seqlens_q is None:
        if q.dim() != 4 or k.dim() != 4:
            raise ValueError(
                f"{_FN}: without cu_seqlens, q and k must be [batch, seqlen, heads, head_dim], "
                f"got q {tuple(q.shape)} and k {tuple(k.shape)}"
            )
        if q.shape[0] != k.shape[0]:
            raise ValueError(f"{_FN}: q has {q.shape[0]} sequences but k has {k.shape[0]}")
    else:
        if q.dim() != 3 or k.dim() != 3:
            raise ValueError(
                f"{_FN}: with cu_seqlens, q and k must be packed [total, heads, head_dim], "
                f"got q {tuple(q.shape)} and k {tuple(k.shape)}"
            )
        _lengths(_FN, "cu_seqlens_q", cu_seqlens_q, q.shape[0])
        _lengths(_FN, "cu_seqlens_k", cu_seqlens_k, k.shape[0])
        if len(cu_seqlens_q) != len(cu_seqlens_k):
            raise ValueError(
                f"{_FN}: cu_seqlens_q has {len(cu_seqlens_q) - 1} sequences but cu_seqlens_k has "
                f"{len(cu_seqlens_k) - 1}"
            )
    heads, head_dim = q.shape[-2], q.shape[-1]
    kv_heads = k.shape[-2]
    if k.shape[-1] != head_dim:
        raise ValueError(f"{_FN}: q's head dim is {head_dim} but k's is {k.shape[-1]}")
    if kv_heads == 0 or heads % kv_heads != 0:
        raise ValueError(f"{_FN}: q's {heads} heads are not a multiple of k's {kv_heads}")


def _problem(q, k, cu_seqlens_q, cu_seqlens_k, causal):
    """The kernels' description of a checked problem: (seqlens_q, seqlens_k, heads, kv_heads,
    head_dim, causal)."""
    if cu_seqlens_q is None:
        seqlens_q = [q.shape[1]] * q.shape[0]
        seqlens_k = [k.shape[1]] * k.shape[0]
    else:
        seqlens_q = [b - a for a, b in zip(cu_seqlens_q, cu_seqlens_q[1:])]
        seqlens_k = [b - a for a, b in zip(cu_seqlens_k, cu_seqlens_k[1:])]
    return seqlens_q, seqlens_k, q.shape[-2], k.shape[-2], q.shape[-1], bool(causal)


def _lse_rows(q):
    """Query rows of the problem (tokens of every sequence): the rows of L."""
    return q.shape[0] * q.shape[1] if q.dim() == 4 else q.shape[0]


def _batched_fits(q, k, v, cu_seqlens_q, cu_seqlens_k, *more):
    """The cheap guard of a batched problem (packed ones take the full checks): q, k and v
    [batch, seqlen, heads, head_dim] with one batch and head dim, whole groups of heads, and
    they and ``more`` contiguous CUDA tensors of one dtype."""
    return (
        cu_seqlens_q is None and cu_seqlens_k is None and fits(_DTYPES, q, k, v, *more)
        and q.dim() == 4 and k.dim() == 4 and k.shape == v.shape and q.shape[0] == k.shape[0]
        and q.shape[3] == k.shape[3] and k.shape[2] != 0 and q.shape[2] % k.shape[2] == 0
    )


def _forward_cuda(q, k, v, cu_seqlens_q, cu_seqlens_k, causal):
    if not _batched_fits(q, k, v, cu_seqlens_q, cu_seqlens_k):
        _check("day_kernels::flash_attention_forward", q, k, v, cu_seqlens_q, cu_seqlens_k)
    problem = _problem(q, k, cu_seqlens_q, cu_seqlens_k, causal)
    device, stream = where(q.device)
    o = torch.empty_like(q)
    lse = torch.empty(_lse_rows(q), q.shape[-2], dtype=torch.float32, device=q.device)
    # The persistent kernel's two ticket counters, this call's own (zero), so that calls on
    # two streams never share them.
    tickets = torch.zeros(2, dtype=torch.int32, device=q.device)
    _native.attention_forward(
        device, stream, DTYPE_NAMES[q.dtype], *problem, q.data_ptr(), k.data_ptr(), v.data_ptr(),
        o.data_ptr(), lse.data_ptr(), tickets.data_ptr(),
    )
    return o, lse


def _forward_fake(q, k, v, cu_seqlens_q, cu_seqlens_k, causal):
    _check("day_kernels::flash_attention_forward", q, k, v, cu_seqlens_q, cu_seqlens_k)
    return torch.empty_like(q), q.new_empty((_lse_rows(q), q.shape[-2]), dtype=torch.float32)


def _lse_fits(lse, q):
    """Whether the tensor ``lse`` is the forward's L for q: contiguous float32, a row per query
    token and a column per head, on q's device."""
    return (
        lse.dtype is torch.float32 and lse.shape == (_lse_rows(q), q.shape[-2])
        and lse.device == q.device and lse.is_contiguous()
    )


def _backward_checks(dout, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k):
    _check("day_kernels::flash_attention_backward", q, k, v, cu_seqlens_q, cu_seqlens_k)
    like(_FN, "out", out, q, "q")
    like(_FN, "dout", dout, q, "q")
    if not isinstance(lse, torch.Tensor):
        raise TypeError(f"{_FN}: lse must be a torch.Tensor, not {type(lse).__name__}")
    if not _lse_fits(lse, q):
        rows = (_lse_rows(q), q.shape[-2])
        raise ValueError(
            f"{_FN}: lse is {str(lse.dtype).replace('torch.', '')} {tuple(lse.shape)} on {lse.device}; "
            f"it must be the forward's, contiguous float32 {rows} on {q.device}"
        )


def _backward_cuda(dout, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, causal, deterministic):
    if not (
        _batched_fits(q, k, v, cu_seqlens_q, cu_seqlens_k, out, dout)
        and out.shape == q.shape and dout.shape == q.shape and isinstance(lse, torch.Tensor)
        and _lse_fits(lse, q)
    ):
        _backward_checks(dout, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k)
    problem = _problem(q, k, cu_seqlens_q, cu_seqlens_k, causal)
    device, stream = where(q.device)
    grads = torch.empty(q.numel() + 2 * k.numel(), dtype=q.dtype, device=q.device)
    # The workspace, this call's own from PyTorch's allocator: D, L2 and the counters, which
    # start at zero, then dQ's f32 accumulator, which the kernels zero themselves.
    zeroed, accum = _workspace(device, DTYPE_NAMES[q.dtype], problem)
    zeroed = torch.zeros(zeroed, dtype=torch.int32, device=q.device)
    accum = torch.empty(accum, dtype=torch.float32, device=q.device)
    _native.attention_backward(
        device, stream, DTYPE_NAMES[q.dtype], *problem, bool(deterministic), q.data_ptr(),
        k.data_ptr(), v.data_ptr(), out.data_ptr(), dout.data_ptr(), lse.data_ptr(),
        grads.data_ptr(), (zeroed.data_ptr(), accum.data_ptr()),
    )
    return grads


@functools.lru_cache(maxsize=64)
def _workspace_of(device, dtype, problem):
    # The current stream is the call's: a capture on it must find the problem known already.
    stream = torch.cuda.current_stream(device).cuda_stream
    return _native.attention_workspace(device, stream, dtype, problem)


def _workspace(device, dtype, problem):
    """The backward's workspace for ``problem`` (``_problem``'s tuple), in 4-byte elements:
    (the part that starts at zero, dQ's accumulator). Asked of the extension once per problem."""
    seqlens_q, seqlens_k, *rest = problem
    return _workspace_of(device, dtype, (tuple(seqlens_q), tuple(seqlens_k), *rest))


def _backward_fake(dout, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, causal, deterministic):
    _backward_checks(dout, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k)
    return q.new_empty(q.numel() + 2 * k.numel())


flash_attention_forward = define(
    "flash_attention_forward(Tensor q, Tensor k, Tensor v, SymInt[]? cu_seqlens_q, "
    "SymInt[]? cu_seqlens_k, bool causal) -> (Tensor out, Tensor lse)",
    _forward_cuda,
    _forward_fake,
)
flash_attention_backward = define(
    "flash_attention_backward(Tensor dout, Tensor q, Tensor k, Tensor v, Tensor out, Tensor lse, "
    "SymInt[]? cu_seqlens_q, SymInt[]? cu_seqlens_k, bool causal, bool deterministic) -> Tensor",
    _backward_cuda,
    _backward_fake,
)


class _FlashAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, cu_seqlens_q, cu_seqlens_k, causal, deterministic):
        o, lse = flash_attention_forward(q, k, v, cu_seqlens_q, cu_seqlens_k, causal)
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.problem = (cu_seqlens_q, cu_seqlens_k, causal, deterministic)
        return o

    @staticmethod
    @once_differentiable
    def backward(ctx, do):
        q, k, v, o, lse = ctx.saved_tensors
        grads = flash_attention_backward(upstream(do, q), q, k, v, o, lse, *ctx.problem)
        dq, dk, dv = torch.split(grads, [q.numel(), k.numel(), k.numel()])
        return dq.view(q.shape), dk.view(k.shape), dv.view(v.shape), None, None, None, None
