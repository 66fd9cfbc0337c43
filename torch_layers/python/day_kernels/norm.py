"""``rms_norm`` and ``layer_norm``: days 11 and 12, forward and backward, as autograd functions.

Both normalize over the last dimension of ``x`` (``[..., cols]``, every leading dimension a
row) with a weight (and LayerNorm's bias) of ``cols``; the math is in float32 whatever the
storage. The backward recomputes each row's statistics from ``x``, so the forward saves only
its inputs. The backward is not itself differentiable (no double backward).
"""

import math

import torch
from torch.autograd.function import once_differentiable

from . import _native
from ._tensors import DTYPE_NAMES, cuda_tensor, same_device, same_dtype, where

_DTYPES = (torch.bfloat16, torch.float16, torch.float32)


def rms_norm(x, weight, eps=1e-6):
    """``x / sqrt(mean(x^2) + eps) * weight`` over the last dimension, differentiable in
    ``x`` and ``weight`` (day 11): what ``F.rms_norm(x, (cols,), weight, eps)`` computes.

    ``x`` is ``[..., cols]``, ``weight`` ``[cols]``, one dtype (bfloat16, float16 or
    float32), contiguous, on one CUDA device. ``eps`` defaults to day 11's 1e-6 (torch's
    ``F.rms_norm`` defaults to the dtype's machine epsilon instead). Returns y of x's shape
    and dtype.
    """
    fn = "rms_norm"
    eps = _eps(fn, eps)
    _check(fn, x, weight=weight)
    return _RmsNorm.apply(x, weight, eps)


def layer_norm(x, weight, bias, eps=1e-5):
    """``(x - mean) / sqrt(var + eps) * weight + bias`` over the last dimension (the biased
    variance), differentiable in ``x``, ``weight`` and ``bias`` (day 12): what
    ``F.layer_norm(x, (cols,), weight, bias, eps)`` computes.

    ``x`` is ``[..., cols]``, ``weight`` and ``bias`` ``[cols]``, one dtype (bfloat16,
    float16 or float32), contiguous, on one CUDA device. ``eps`` defaults to torch's 1e-5.
    Returns y of x's shape and dtype.
    """
    fn = "layer_norm"
    eps = _eps(fn, eps)
    _check(fn, x, weight=weight, bias=bias)
    return _LayerNorm.apply(x, weight, bias, eps)


def _check(fn, x, **params):
    """Checks x and the parameter vectors: tensors, shapes, one dtype, then dtype, layout and
    device of each, then one device. What the arguments say comes before where they are, so
    that every mistake in them is reported the same way with or without a GPU."""
    for name, t in (("x", x), *params.items()):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{fn}: {name} must be a torch.Tensor, not {type(t).__name__}")
    if x.dim() == 0:
        raise ValueError(f"{fn}: x is a scalar; it must be [..., cols], normalized over its last dimension")
    cols = x.shape[-1]
    for name, t in params.items():
        if t.dim() != 1 or t.shape[0] != cols:
            raise ValueError(
                f"{fn}: {name} has shape {tuple(t.shape)}; it must be ({cols},), x's last "
                f"dimension (x is {tuple(x.shape)})"
            )
    tensors = {"x": x, **params}
    same_dtype(fn, **tensors)
    for name, t in tensors.items():
        cuda_tensor(fn, name, t, _DTYPES)
    same_device(fn, **tensors)


def _eps(fn, eps):
    """eps as a float: non-negative and finite (the kernels take it as float32, which checks
    the range again)."""
    try:
        value = float(eps)
    except (TypeError, ValueError):
        raise TypeError(f"{fn}: eps must be a number, not {type(eps).__name__}") from None
    if not (value >= 0.0 and math.isfinite(value)):
        raise ValueError(f"{fn}: eps must be a non-negative finite number, not {eps}")
    return value


def _rows(x):
    """(rows, cols) of x seen as [rows, cols]."""
    cols = x.shape[-1]
    return (x.numel() // cols if cols else 0), cols


def _split(grads, x, params):
    """dx, then one gradient per parameter vector, from the backward's one buffer."""
    rows, cols = _rows(x)
    dx = grads[: rows * cols].view(x.shape)
    # Copied out (cols elements each): a view would keep the whole buffer, dx's size, alive
    # for as long as autograd keeps the parameter's .grad.
    rest = [grads[(rows + i) * cols:(rows + i + 1) * cols].clone() for i in range(params)]
    return (dx, *rest)


def _empty_grads(x, params):
    """The gradients of an empty x: dx empty, each parameter's zero (no row contributes)."""
    cols = x.shape[-1]
    return (torch.empty_like(x), *(torch.zeros(cols, dtype=x.dtype, device=x.device) for _ in range(params)))


def _backward(ctx, dy, native, params):
    """dx and the `params` parameter gradients of either norm, by its native backward."""
    x, weight = ctx.saved_tensors
    if x.numel() == 0:
        return _empty_grads(x, params)
    # Autograd may hand over a broadcast gradient (from a sum, say); the kernels read rows of
    # x's dtype.
    dy = dy.to(x.dtype).contiguous()
    rows, cols = _rows(x)
    device, stream = where(x.device)
    grads = torch.empty((rows + params) * cols, dtype=x.dtype, device=x.device)
    native(
        device, stream, DTYPE_NAMES[x.dtype], rows, cols, ctx.eps, x.data_ptr(),
        weight.data_ptr(), dy.data_ptr(), grads.data_ptr(),
    )
    return _split(grads, x, params)


def _forward(ctx, native, x, weight, eps, *bias):
    """y of either norm by its native forward (LayerNorm's takes the bias after the weight).
    Saves what the backward reads: x and the weight (the bias does not enter the gradients)."""
    ctx.save_for_backward(x, weight)
    ctx.eps = eps
    y = torch.empty_like(x)
    if x.numel() == 0:
        return y
    rows, cols = _rows(x)
    device, stream = where(x.device)
    native(
        device, stream, DTYPE_NAMES[x.dtype], rows, cols, eps, x.data_ptr(), weight.data_ptr(),
        *(b.data_ptr() for b in bias), y.data_ptr(),
    )
    return y


class _RmsNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, eps):
        return _forward(ctx, _native.rms_norm_forward, x, weight, eps)

    @staticmethod
    @once_differentiable
    def backward(ctx, dy):
        return (*_backward(ctx, dy, _native.rms_norm_backward, 1), None)


class _LayerNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, eps):
        return _forward(ctx, _native.layer_norm_forward, x, weight, eps, bias)

    @staticmethod
    @once_differentiable
    def backward(ctx, dy):
        return (*_backward(ctx, dy, _native.layer_norm_backward, 2), None)
