"""``flash_attention``: day 10's forward and day 20's backward as an autograd function."""

import math

import torch

from . import _native
from ._tensors import DTYPE_NAMES, cuda_tensor, same_device, same_dtype, where

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
    """
    q = cuda_tensor(_FN, "q", q, _DTYPES, dims=(3, 4))
    k = cuda_tensor(_FN, "k", k, _DTYPES, dims=(3, 4))
    v = cuda_tensor(_FN, "v", v, _DTYPES, dims=(3, 4))
    same_device(_FN, q=q, k=k, v=v)
    same_dtype(_FN, q=q, k=k, v=v)
    problem = _problem(q, k, v, causal, cu_seqlens_q, cu_seqlens_k)
    head_dim = q.shape[-1]
    ratio = 1.0 if scale is None else float(scale) * math.sqrt(head_dim)
    if ratio != 1.0:
        q = q * ratio
    # Autograd carries the ratio into q's gradient through this product.
    return _FlashAttention.apply(q, k, v, problem, bool(deterministic))


def _lengths(fn, name, cu, total):
    """The sequence lengths ``cu`` (a list or a tensor of starts) describes, checked."""
    if isinstance(cu, torch.Tensor):
        if cu.dim() != 1 or cu.dtype not in (torch.int32, torch.int64):
            raise TypeError(f"{fn}: {name} must be a 1-D int32 or int64 tensor, not {cu.dtype} {tuple(cu.shape)}")
        cu = cu.tolist()
    cu = [int(c) for c in cu]
    if len(cu) < 2 or cu[0] != 0:
        raise ValueError(f"{fn}: {name} must start at 0 and hold at least one sequence, got {cu}")
    lengths = [b - a for a, b in zip(cu, cu[1:])]
    if any(n < 0 for n in lengths):
        raise ValueError(f"{fn}: {name} must not decrease, got {cu}")
    if cu[-1] != total:
        raise ValueError(f"{fn}: {name} ends at {cu[-1]} but the tensor holds {total} tokens")
    return lengths


def _problem(q, k, v, causal, cu_seqlens_q, cu_seqlens_k):
    """The kernels' description of the problem: lengths, heads, head dim, mask."""
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
        seqlens_q = [q.shape[1]] * q.shape[0]
        seqlens_k = [k.shape[1]] * k.shape[0]
    else:
        if q.dim() != 3 or k.dim() != 3:
            raise ValueError(
                f"{_FN}: with cu_seqlens, q and k must be packed [total, heads, head_dim], "
                f"got q {tuple(q.shape)} and k {tuple(k.shape)}"
            )
        seqlens_q = _lengths(_FN, "cu_seqlens_q", cu_seqlens_q, q.shape[0])
        seqlens_k = _lengths(_FN, "cu_seqlens_k", cu_seqlens_k, k.shape[0])
        if len(seqlens_q) != len(seqlens_k):
            raise ValueError(
                f"{_FN}: cu_seqlens_q has {len(seqlens_q)} sequences but cu_seqlens_k has {len(seqlens_k)}"
            )
    heads, head_dim = q.shape[-2], q.shape[-1]
    kv_heads = k.shape[-2]
    if k.shape[-1] != head_dim:
        raise ValueError(f"{_FN}: q's head dim is {head_dim} but k's is {k.shape[-1]}")
    if kv_heads == 0 or heads % kv_heads != 0:
        raise ValueError(f"{_FN}: q's {heads} heads are not a multiple of k's {kv_heads}")
    return (seqlens_q, seqlens_k, heads, kv_heads, head_dim, bool(causal))


class _FlashAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, problem, deterministic):
        seqlens_q, seqlens_k, heads, kv_heads, head_dim, causal = problem
        device, stream = where(q.device)
        o = torch.empty_like(q)
        lse = torch.empty(sum(seqlens_q), heads, dtype=torch.float32, device=q.device)
        _native.attention_forward(
            device, stream, DTYPE_NAMES[q.dtype], seqlens_q, seqlens_k, heads, kv_heads,
            head_dim, causal, q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(),
            lse.data_ptr(),
        )
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.problem = problem
        ctx.deterministic = deterministic
        return o

    @staticmethod
    def backward(ctx, do):
        q, k, v, o, lse = ctx.saved_tensors
        seqlens_q, seqlens_k, heads, kv_heads, head_dim, causal = ctx.problem
        # Autograd may hand over a broadcast gradient (from a sum, say); the kernels read rows.
        do = do.contiguous()
        device, stream = where(q.device)
        grads = torch.empty(q.numel() + 2 * k.numel(), dtype=q.dtype, device=q.device)
        _native.attention_backward(
            device, stream, DTYPE_NAMES[q.dtype], seqlens_q, seqlens_k, heads, kv_heads,
            head_dim, causal, ctx.deterministic, q.data_ptr(), k.data_ptr(), v.data_ptr(),
            o.data_ptr(), do.data_ptr(), lse.data_ptr(), grads.data_ptr(),
        )
        dq, dk, dv = torch.split(grads, [q.numel(), k.numel(), k.numel()])
        return dq.view(q.shape), dk.view(k.shape), dv.view(v.shape), None, None
