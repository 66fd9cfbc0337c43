"""``rms_norm`` and ``layer_norm``: days 11 and 12, forward and backward, as operators and
autograd functions.

Both normalize over the last dimension of ``x`` (``[..., cols]``, every leading dimension a
row) with a weight (and LayerNorm's bias) of ``cols``; the math is in float32 whatever the
storage. The backward recomputes each row's statistics from ``x``, so the forward saves only
its inputs. The backward is not itself differentiable (no double backward).

The operators (``torch.ops.day_kernels``): ``rms_norm_forward(x, weight, eps) -> y`` and
``layer_norm_forward(x, weight, bias, eps) -> y``; ``rms_norm_backward(dy, x, weight, eps) ->
(dx, dweight)`` and ``layer_norm_backward(dy, x, weight, eps) -> (dx, dparams)``, dx of x's
shape, dweight ``[cols]``, dparams ``[2, cols]`` (dweight, then dbias), all of x's dtype.
"""

import math

import torch
from torch.autograd.function import once_differentiable

from . import _native
from ._library import define
from ._tensors import (
    DTYPE_NAMES, autocast_like, cuda_tensor, fits, like, on_cuda, same_device, same_dtype, upstream,
    where,
)

_DTYPES = (torch.bfloat16, torch.float16, torch.float32)


def rms_norm(x, weight, eps=1e-6):
    """``x / sqrt(mean(x^2) + eps) * weight`` over the last dimension, differentiable in
    ``x`` and ``weight`` (day 11): what ``F.rms_norm(x, (cols,), weight, eps)`` computes.

    ``x`` is ``[..., cols]``, ``weight`` ``[cols]``, one dtype (bfloat16, float16 or
    float32), contiguous, on one CUDA device. ``eps`` defaults to day 11's 1e-6 (torch's
    ``F.rms_norm`` defaults to the dtype's machine epsilon instead). Returns y of x's shape
    and dtype. Under autocast, y keeps x's dtype (a float32 x stays float32, as with PyTorch's
    norms; a bfloat16 x stays bfloat16) and the weight is cast to it (the kernels take one
    dtype for all).
    """
    fn = "rms_norm"
    eps = _eps(fn, eps)
    (weight,) = autocast_like(x, weight)
    if not on_cuda(x, weight):
        _check(fn, "day_kernels::rms_norm_forward", x, weight=weight)
    return _RmsNorm.apply(x, weight, eps)


def layer_norm(x, weight, bias, eps=1e-5):
    """``(x - mean) / sqrt(var + eps) * weight + bias`` over the last dimension (the biased
    variance), differentiable in ``x``, ``weight`` and ``bias`` (day 12): what
    ``F.layer_norm(x, (cols,), weight, bias, eps)`` computes.

    ``x`` is ``[..., cols]``, ``weight`` and ``bias`` ``[cols]``, one dtype (bfloat16,
    float16 or float32), contiguous, on one CUDA device. ``eps`` defaults to torch's 1e-5.
    Returns y of x's shape and dtype. Under autocast, y keeps x's dtype (a float32 x stays
    float32, as with PyTorch's; a bfloat16 x stays bfloat16, where ``F.layer_norm`` would
    return float32) and the weight and bias are cast to it (the kernels take one dtype for
    all).
    """
    fn = "layer_norm"
    eps = _eps(fn, eps)
    weight, bias = autocast_like(x, weight, bias)
    if not on_cuda(x, weight, bias):
        _check(fn, "day_kernels::layer_norm_forward", x, weight=weight, bias=bias)
    return _LayerNorm.apply(x, weight, bias, eps)


def _check(fn, op, x, **params):
    """Checks x and the parameter vectors: tensors, shapes, one dtype, then dtype, layout and
    device of each (a device the operator ``op`` runs on), then one device. What the arguments say comes
    before where they are, so that every mistake in them is reported the same way with or
    without a GPU."""
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
        cuda_tensor(fn, name, t, _DTYPES, op=op)
    same_device(fn, **tensors)


def _eps(fn, eps):
    """eps as a float: non-negative and finite (the kernels take it as float32, which checks
    the range again)."""
    try:
        value = float(eps)
    except (TypeError, ValueError):
        raise TypeError(f"{fn}: eps must be a number, not {type(eps).__name__}") from None
    # Comparisons only (NaN fails both): under torch.compile the value may be a symbolic float.
    if not 0.0 <= value < math.inf:
        raise ValueError(f"{fn}: eps must be a non-negative finite number, not {eps}")
    return value


def _rows(x):
    """(rows, cols) of x seen as [rows, cols]."""
    return math.prod(x.shape[:-1]), x.shape[-1]


def _forward_checks(fn, x, eps, params):
    _eps(fn, eps)
    _check(fn, f"day_kernels::{fn}_forward", x, **params)


def _backward_checks(fn, dy, x, eps, weight):
    _eps(fn, eps)
    _check(fn, f"day_kernels::{fn}_backward", x, weight=weight)
    like(fn, "dy", dy, x, "x")


def _vectors_fit(x, params):
    """Whether each parameter is a vector of x's last dimension (the cheap guard's shapes)."""
    if x.dim() == 0:
        return False
    cols = x.shape[-1]
    return all(p.dim() == 1 and p.shape[0] == cols for p in params)


def _forward_cuda(fn, native, x, eps, **params):
    """y of either norm by its native forward (LayerNorm's takes the bias after the weight)."""
    if fits(_DTYPES, x, *params.values()) and _vectors_fit(x, params.values()):
        _eps(fn, eps)
    else:
        _forward_checks(fn, x, eps, params)
    y = torch.empty_like(x)
    if x.numel() == 0:
        return y
    rows, cols = _rows(x)
    device, stream = where(x.device)
    native(
        device, stream, DTYPE_NAMES[x.dtype], rows, cols, eps, x.data_ptr(),
        *(p.data_ptr() for p in params.values()), y.data_ptr(),
    )
    return y


def _forward_fake(fn, x, eps, **params):
    _forward_checks(fn, x, eps, params)
    return torch.empty_like(x)


def _param_grads(x, params):
    """An empty tensor for the parameters' gradients: ``[cols]`` (RMSNorm's dweight) or
    ``[2, cols]`` (LayerNorm's dweight, then dbias)."""
    cols = x.shape[-1]
    return x.new_empty((cols,) if params == 1 else (params, cols))


def _backward_cuda(fn, native, params, dy, x, weight, eps):
    """dx and the parameters' gradients of either norm by its native backward, two tensors
    (dx of x's shape; `params` gradient vectors). An empty x has no rows to read: its
    parameters' gradients are zeros (no row adds to them)."""
    if fits(_DTYPES, x, weight, dy) and dy.shape == x.shape and _vectors_fit(x, (weight,)):
        _eps(fn, eps)
    else:
        _backward_checks(fn, dy, x, eps, weight)
    dx = torch.empty_like(x)
    dparams = _param_grads(x, params)
    if x.numel() == 0:
        return dx, dparams.zero_()
    rows, cols = _rows(x)
    device, stream = where(x.device)
    native(
        device, stream, DTYPE_NAMES[x.dtype], rows, cols, eps, x.data_ptr(), weight.data_ptr(),
        dy.data_ptr(), dx.data_ptr(), dparams.data_ptr(),
    )
    return dx, dparams


def _backward_fake(fn, params, dy, x, weight, eps):
    _backward_checks(fn, dy, x, eps, weight)
    return torch.empty_like(x), _param_grads(x, params)


def _rms_forward_cuda(x, weight, eps):
    return _forward_cuda("rms_norm", _native.rms_norm_forward, x, eps, weight=weight)


def _rms_forward_fake(x, weight, eps):
    return _forward_fake("rms_norm", x, eps, weight=weight)


def _rms_backward_cuda(dy, x, weight, eps):
    return _backward_cuda("rms_norm", _native.rms_norm_backward, 1, dy, x, weight, eps)


def _rms_backward_fake(dy, x, weight, eps):
    return _backward_fake("rms_norm", 1, dy, x, weight, eps)


def _layer_forward_cuda(x, weight, bias, eps):
    return _forward_cuda("layer_norm", _native.layer_norm_forward, x, eps, weight=weight, bias=bias)


def _layer_forward_fake(x, weight, bias, eps):
    return _forward_fake("layer_norm", x, eps, weight=weight, bias=bias)


def _layer_backward_cuda(dy, x, weight, eps):
    return _backward_cuda("layer_norm", _native.layer_norm_backward, 2, dy, x, weight, eps)


def _layer_backward_fake(dy, x, weight, eps):
    return _backward_fake("layer_norm", 2, dy, x, weight, eps)


rms_norm_forward = define(
    "rms_norm_forward(Tensor x, Tensor weight, float eps) -> Tensor", _rms_forward_cuda, _rms_forward_fake
)
rms_norm_backward = define(
    "rms_norm_backward(Tensor dy, Tensor x, Tensor weight, float eps) -> (Tensor dx, Tensor dweight)",
    _rms_backward_cuda,
    _rms_backward_fake,
)
layer_norm_forward = define(
    "layer_norm_forward(Tensor x, Tensor weight, Tensor bias, float eps) -> Tensor",
    _layer_forward_cuda,
    _layer_forward_fake,
)
layer_norm_backward = define(
    "layer_norm_backward(Tensor dy, Tensor x, Tensor weight, float eps) -> (Tensor dx, Tensor dparams)",
    _layer_backward_cuda,
    _layer_backward_fake,
)


class _RmsNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, eps):
        # The backward reads x and the weight (and recomputes the statistics).
        ctx.save_for_backward(x, weight)
        ctx.eps = eps
        return rms_norm_forward(x, weight, eps)

    @staticmethod
    @once_differentiable
    def backward(ctx, dy):
        x, weight = ctx.saved_tensors
        dx, dweight = rms_norm_backward(upstream(dy, x), x, weight, ctx.eps)
        return dx, dweight, None


class _LayerNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, eps):
        # The bias does not enter the gradients.
        ctx.save_for_backward(x, weight)
        ctx.eps = eps
        return layer_norm_forward(x, weight, bias, eps)

    @staticmethod
    @once_differentiable
    def backward(ctx, dy):
        x, weight = ctx.saved_tensors
        dx, dparams = layer_norm_backward(upstream(dy, x), x, weight, ctx.eps)
        dweight, dbias = dparams.unbind(0)
        return dx, dweight, dbias, None
