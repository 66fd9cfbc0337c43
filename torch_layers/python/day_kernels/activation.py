"""``swiglu``: day 13's fused SwiGLU, forward and backward, as operators and an autograd
function.

The operators (``torch.ops.day_kernels``): ``swiglu_forward(gate, up) -> out`` and
``swiglu_backward(dout, gate, up)``, which returns the one buffer the day's backward kernel
writes, ``[2, *gate.shape]`` (dgate, then dup).
"""

import torch
from torch.autograd.function import once_differentiable

from . import _native
from ._library import define
from ._tensors import (
    DTYPE_NAMES, autocast, cuda_tensor, fits, like, on_cuda, same_device, same_dtype, upstream, where,
)

_FN = "swiglu"
_DTYPES = (torch.bfloat16, torch.float16, torch.float32)


def swiglu(gate, up):
    """``F.silu(gate) * up`` (``gate * sigmoid(gate) * up``), element by element, differentiable
    in ``gate`` and ``up``: the gated unit of a SwiGLU MLP, ``down(swiglu(x @ W_gate.T,
    x @ W_up.T))``, in one kernel (day 13) where eager torch runs two and stores
    ``silu(gate)`` in between.

    ``gate`` and ``up`` are two tensors of one shape (any), one dtype (bfloat16, float16 or
    float32), contiguous, on one CUDA device: day 13's layout, the two projections apart. The
    halves of one fused projection, ``h.chunk(2, dim=-1)``, are not contiguous views; pass
    them ``.contiguous()``. Returns a tensor of that shape and dtype; the math is in float32.
    Under autocast, both are cast to autocast's dtype first. The backward is not itself
    differentiable (no double backward).
    """
    gate, up = autocast(gate, up)
    if not on_cuda(gate, up):
        _check("day_kernels::swiglu_forward", gate, up)
    return _Swiglu.apply(gate, up)


def _check(op, gate, up):
    """Checks gate and up for the operator ``op``."""
    for name, t in (("gate", gate), ("up", up)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{_FN}: {name} must be a torch.Tensor, not {type(t).__name__}")
    # What the arguments say (shapes, one dtype) before where they are, so that a mistake in
    # them is reported the same way with or without a GPU.
    if gate.shape != up.shape:
        raise ValueError(
            f"{_FN}: gate {tuple(gate.shape)} and up {tuple(up.shape)} must have one shape "
            f"(no broadcasting)"
        )
    same_dtype(_FN, gate=gate, up=up)
    cuda_tensor(_FN, "gate", gate, _DTYPES, op=op)
    cuda_tensor(_FN, "up", up, _DTYPES, op=op)
    same_device(_FN, gate=gate, up=up)


def _forward_cuda(gate, up):
    if not (fits(_DTYPES, gate, up) and gate.shape == up.shape):
        _check("day_kernels::swiglu_forward", gate, up)
    out = torch.empty_like(gate)
    if gate.numel() == 0:
        return out
    device, stream = where(gate.device)
    _native.swiglu_forward(
        device, stream, DTYPE_NAMES[gate.dtype], gate.numel(), gate.data_ptr(), up.data_ptr(),
        out.data_ptr(),
    )
    return out


def _forward_fake(gate, up):
    _check("day_kernels::swiglu_forward", gate, up)
    return torch.empty_like(gate)


def _backward_checks(dout, gate, up):
    _check("day_kernels::swiglu_backward", gate, up)
    like(_FN, "dout", dout, gate, "gate")


def _backward_cuda(dout, gate, up):
    if not (fits(_DTYPES, gate, up, dout) and gate.shape == up.shape == dout.shape):
        _backward_checks(dout, gate, up)
    grads = torch.empty((2, *gate.shape), dtype=gate.dtype, device=gate.device)
    if gate.numel() == 0:
        return grads
    device, stream = where(gate.device)
    _native.swiglu_backward(
        device, stream, DTYPE_NAMES[gate.dtype], gate.numel(), dout.data_ptr(), gate.data_ptr(),
        up.data_ptr(), grads.data_ptr(),
    )
    return grads


def _backward_fake(dout, gate, up):
    _backward_checks(dout, gate, up)
    return gate.new_empty((2, *gate.shape))


swiglu_forward = define("swiglu_forward(Tensor gate, Tensor up) -> Tensor", _forward_cuda, _forward_fake)
swiglu_backward = define(
    "swiglu_backward(Tensor dout, Tensor gate, Tensor up) -> Tensor", _backward_cuda, _backward_fake
)


class _Swiglu(torch.autograd.Function):
    @staticmethod
    def forward(ctx, gate, up):
        ctx.save_for_backward(gate, up)
        return swiglu_forward(gate, up)

    @staticmethod
    @once_differentiable
    def backward(ctx, dout):
        gate, up = ctx.saved_tensors
        # The kernels read n elements of the inputs' dtype back to back.
        dgate, dup = swiglu_backward(upstream(dout, gate), gate, up).unbind(0)
        return dgate, dup
