"""The checks every layer makes before a pointer leaves Python, and what a launch needs.

A tensor reaches the kernels only if it is a CUDA tensor of a dtype the kernel takes,
contiguous, on the same device as the others: otherwise one ``TypeError`` (not a tensor, a
dtype the kernel does not take) or ``ValueError`` (device, layout, shape) names the argument
and what was expected.
"""

import torch

DTYPE_NAMES = {
    torch.bfloat16: "bfloat16",
    torch.float16: "float16",
    torch.float32: "float32",
}


def cuda_tensor(fn, name, t, dtypes, dims=None):
    """Checks one tensor argument of ``fn``; returns it. The device comes last, so a CPU
    tensor's dtype and layout are judged too (and tested without a GPU)."""
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
    if t.device.type != "cuda":
        raise ValueError(f"{fn}: {name} is on {t.device}; the kernels run on CUDA tensors")
    return t


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
