"""``swiglu``: day 13's fused SwiGLU, forward and backward, as an autograd function."""

import torch
from torch.autograd.function import once_differentiable

from . import _native
from ._tensors import DTYPE_NAMES, cuda_tensor, same_device, same_dtype, where

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
    The backward is not itself differentiable (no double backward).
    """
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
    cuda_tensor(_FN, "gate", gate, _DTYPES)
    cuda_tensor(_FN, "up", up, _DTYPES)
    same_device(_FN, gate=gate, up=up)
    return _Swiglu.apply(gate, up)


class _Swiglu(torch.autograd.Function):
    @staticmethod
    def forward(ctx, gate, up):
        ctx.save_for_backward(gate, up)
        out = torch.empty_like(gate)
        if gate.numel() == 0:
            return out
        device, stream = where(gate.device)
        _native.swiglu_forward(
            device, stream, DTYPE_NAMES[gate.dtype], gate.numel(), gate.data_ptr(),
            up.data_ptr(), out.data_ptr(),
        )
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, dout):
        gate, up = ctx.saved_tensors
        if gate.numel() == 0:
            return torch.empty_like(gate), torch.empty_like(up)
        # Autograd may hand over a broadcast gradient (from a sum, say); the kernels read n
        # elements of the inputs' dtype back to back.
        dout = dout.to(gate.dtype).contiguous()
        n = gate.numel()
        device, stream = where(gate.device)
        grads = torch.empty(2 * n, dtype=gate.dtype, device=gate.device)
        _native.swiglu_backward(
            device, stream, DTYPE_NAMES[gate.dtype], n, dout.data_ptr(), gate.data_ptr(),
            up.data_ptr(), grads.data_ptr(),
        )
        dgate, dup = torch.split(grads, [n, n])
        return dgate.view(gate.shape), dup.view(up.shape)
