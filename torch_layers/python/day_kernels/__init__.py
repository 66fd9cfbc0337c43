"""The days' CUDA kernels as PyTorch layers.

Each function runs a day's own kernels on PyTorch CUDA tensors, in place, on torch's current
stream, and is differentiable (a ``torch.autograd.Function``):

- ``flash_attention(q, k, v, causal=False, scale=None, ...)``: day 10's forward, day 20's
  backward;
- ``rms_norm`` and ``layer_norm``: days 11 and 12, forward and backward;
- ``swiglu``: day 13's fused SwiGLU, forward and backward;
- ``fused_linear_cross_entropy(h, weight, labels, ...)``: day 19's chunked loss, which never
  holds the whole logits.

Bad input (a tensor on the CPU, a dtype or head dim the kernels do not take, shapes that do
not match, a non-contiguous tensor) raises ``ValueError`` or ``TypeError`` with one message
before anything runs. Importing this package needs no GPU and no torch; the functions need
both.

The kernels are PyTorch operators, ``torch.ops.day_kernels.*`` (``_library.py``), which each
layer's autograd function calls: torch.compile traces the layers whole, and autocast hands
them its dtype. A layer's module defines its operators when it is first imported;
``day_kernels.ops`` imports every layer and is ``torch.ops.day_kernels``.
"""

from . import _nvrtc

_nvrtc.preload()

from . import _native  # noqa: E402  (NVRTC first: the kernels are compiled at first use)

__all__ = [
    "flash_attention",
    "rms_norm",
    "layer_norm",
    "swiglu",
    "fused_linear_cross_entropy",
]

# Each layer imports torch; importing them on first use keeps `import day_kernels` (and the
# tests that need neither torch nor a GPU) free of it.
_HOMES = {
    "flash_attention": "attention",
    "rms_norm": "norm",
    "layer_norm": "norm",
    "swiglu": "activation",
    "fused_linear_cross_entropy": "loss",
}


def __getattr__(name):
    import importlib

    if name == "ops":
        for home in sorted(set(_HOMES.values())):
            importlib.import_module(f".{home}", __name__)
        import torch

        return torch.ops.day_kernels
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'day_kernels' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{home}", __name__), name)
    # Kept as the package's own attribute: a model that calls dk.rms_norm on every step finds
    # it at once from then on, without this function.
    globals()[name] = value
    return value


def device_summary(device=0):
    """The GPU the kernels would run on, in one line, or a RuntimeError saying why none can."""
    return _native.device_summary(device)
