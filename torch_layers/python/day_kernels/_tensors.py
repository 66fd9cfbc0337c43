"""The checks every layer and operator makes before a pointer leaves Python, what autocast
hands a layer, and what a launch needs.

A tensor reaches the kernels only if it is a CUDA tensor of a dtype the kernel takes,
contiguous, on the same device as the others: otherwise one ``TypeError`` (not a tensor, a
dtype the kernel does not take) or ``ValueError`` (device, layout, shape) names the argument
and what was expected. The operators make these checks before they launch anything (the fake
implementations too, so that torch.compile refuses the same arguments while it traces); a
layer makes them itself first where an argument is not a CUDA tensor, which the dispatcher
would otherwise refuse in words of its own.
"""

import torch

from ._library import has_kernel

DTYPE_NAMES = {
    torch.bfloat16: "bfloat16",
    torch.float16: "float16",
    torch.float32: "float32",
}


def cuda_tensor(fn, name, t, dtypes, dims=None, op=None):
    """Checks one tensor argument of ``fn``; returns it. The device comes last, so a CPU
    tensor's dtype and layout are judged too (and tested without a GPU). A device other than
    CUDA passes where the operator ``op`` has an implementation for it (the meta device, a
    test's CPU reference)."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{fn}: {name} must be a torch.Tensor, not {type(t).__name__}")
    if t.dtype not in dtypes:
        wanted = " or ".join(str(d).replace("torch.", "") for d in dtypes)
        raise TypeError(f"{fn}: {name} is {str(t.dtype).replace('torch.', '')}; it must be {wanted}")
    if dims is not None and t.dim() not in dims:
        wanted = " or ".join(str(d) for d in dims)
        raise ValueError(f"{fn}: {name} has {t.dim()} dimensions {tuple(t.shape)}; it must have {wanted}")
    if not t.is_contiguous():
        raise ValueError(
            f"{fn}: {name} is not contiguous (strides {t.stride()}); the kernels read rows "
            f"back to back: pass {name}.contiguous()"
        )
    on_device(fn, name, t, op)
    return t


def on_cuda(*tensors):
    """Whether every argument is a CUDA tensor: a layer whose arguments are leaves the checks to
    its operator (which makes them before anything runs), and makes them itself otherwise, where
    the dispatcher would refuse a non-tensor or a device without a kernel in words of its own."""
    return all(
        isinstance(t, torch.Tensor) and t.is_cuda and t.layout is torch.strided and not t.is_nested
        for t in tensors
    )


def fits(dtypes, first, *rest):
    """The cheap guard an operator's CUDA implementation takes before it launches: every
    argument a contiguous CUDA tensor, all of one dtype among ``dtypes``, on one device. What it
    passes, the per-tensor checks pass too (each operator adds its shapes); where it fails, the
    full checks run and say what is wrong. A step calls the operators dozens of times, and the
    full checks cost several times this."""
    try:
        dtype, device = first.dtype, first.device
        if dtype not in dtypes or not (first.is_cuda and not first.is_nested and first.is_contiguous()):
            return False
        for t in rest:
            if t.dtype is not dtype or t.device != device or t.is_nested or not t.is_contiguous():
                return False
    except (AttributeError, RuntimeError):  # not a tensor; a layout without strides
        return False
    return isinstance(first, torch.Tensor) and all(isinstance(t, torch.Tensor) for t in rest)


def on_device(fn, name, t, op=None):
    """Checks that ``t`` is on a device the operator ``op`` runs on: CUDA, or one it has an
    implementation for."""
    if t.device.type != "cuda" and not (op is not None and has_kernel(op, t.device.type)):
        raise ValueError(f"{fn}: {name} is on {t.device}; the kernels run on CUDA tensors")


def like(fn, name, t, ref, ref_name):
    """Checks a tensor an operator takes beside ``ref`` (an upstream gradient beside the output
    it is the gradient of): ref's dtype, shape and device, contiguous."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{fn}: {name} must be a torch.Tensor, not {type(t).__name__}")
    if t.dtype != ref.dtype:
        raise TypeError(f"{fn}: {name} is {_name(t.dtype)}; it must be {_name(ref.dtype)}, as {ref_name} is")
    if t.shape != ref.shape:
        raise ValueError(
            f"{fn}: {name} has shape {tuple(t.shape)}; it must be {ref_name}'s {tuple(ref.shape)}"
        )
    if t.device != ref.device:
        raise ValueError(f"{fn}: {name} is on {t.device}; it must be on {ref_name}'s {ref.device}")
    if not t.is_contiguous():
        raise ValueError(f"{fn}: {name} is not contiguous (strides {t.stride()})")
    return t


def _name(dtype):
    return str(dtype).replace("torch.", "")


@torch.compiler.assume_constant_result
def _autocast_available(device_type):
    return torch.amp.is_autocast_available(device_type)


def _autocast_on(device_type):
    return _autocast_available(device_type) and torch.is_autocast_enabled(device_type)


def autocast(*tensors, dtype=None):
    """The tensors as autocast hands them to a layer: where autocast is on for the first
    tensor's device, each floating-point tensor in autocast's dtype, or in ``dtype`` where the
    layer computes in one dtype whatever autocast's (float64 is left as it is, as autocast
    leaves it). Anything that is not a tensor is returned as it is, for the checks to refuse.
    The casts happen before the layer's autograd function, so autograd carries each
    gradient back to its input's own dtype."""
    first = next((t for t in tensors if isinstance(t, torch.Tensor)), None)
    if first is None:
        return tensors
    device_type = first.device.type
    if not _autocast_on(device_type):
        return tensors
    dtype = dtype or torch.get_autocast_dtype(device_type)
    # A tensor already of that dtype is kept as it is: `.to` would return it too, at the cost
    # of a dispatch.
    return tuple(t.to(dtype) if _autocast_eligible(t) and t.dtype != dtype else t for t in tensors)


def autocast_like(x, *params):
    """A norm's parameters as autocast hands them to it: where autocast is on for x's device,
    each floating-point parameter in x's dtype. A norm keeps x's dtype under autocast: a
    float32 residual stream stays float32, as with PyTorch's norms, which compute in float32
    there, while a bfloat16 x stays bfloat16 (where PyTorch's LayerNorm would return float32);
    the kernels take one dtype for x and its parameters."""
    if not (isinstance(x, torch.Tensor) and x.is_floating_point() and x.dtype != torch.float64):
        return params
    if not _autocast_on(x.device.type):
        return params
    return tuple(p.to(x.dtype) if _autocast_eligible(p) and p.dtype != x.dtype else p for p in params)


def upstream(dy, like):
    """The gradient a backward receives, as its kernels read it: of ``like``'s dtype and
    contiguous. Autograd may hand over another dtype or a broadcast gradient (from a sum, say);
    where it does not, nothing is called (each call that changes nothing still costs a
    dispatch)."""
    if dy.dtype is like.dtype and dy.is_contiguous():
        return dy
    return dy.to(like.dtype).contiguous()


def _autocast_eligible(t):
    return isinstance(t, torch.Tensor) and t.is_floating_point() and t.dtype != torch.float64


def same_device(fn, **tensors):
    """Checks that the tensors share one device; returns it."""
    devices = {name: t.device for name, t in tensors.items()}
    first = next(iter(devices.values()))
    for name, device in devices.items():
        if device != first:
            listed = ", ".join(f"{n} on {d}" for n, d in devices.items())
            raise ValueError(f"{fn}: the tensors must be on one device ({listed})")
    return first


def same_dtype(fn, **tensors):
    """Checks that the tensors share one dtype; returns it."""
    dtypes = {name: t.dtype for name, t in tensors.items()}
    first = next(iter(dtypes.values()))
    if any(d != first for d in dtypes.values()):
        listed = ", ".join(f"{n} {str(d).replace('torch.', '')}" for n, d in dtypes.items())
        raise TypeError(f"{fn}: the tensors must share one dtype ({listed})")
    return first


# The current stream's raw handle without making a Stream object each call (what Triton's
# launcher reads); the public route where a build of torch lacks it.
_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)


def where(device):
    """(device index, PyTorch's current stream on it): where a launch is enqueued."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    if _raw_stream is not None:
        return index, _raw_stream(index)
    return index, torch.cuda.current_stream(index).cuda_stream
