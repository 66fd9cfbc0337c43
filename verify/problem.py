"""What the per-day table is made of: a `Problem` (the day's flags and the family check that
knows what the day saves), the `Saved` arrays of one run, and the `Torch` context a check
computes with.
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from compare import Expectation


class VerifyError(Exception):
    """A saved array is missing or not what the day's code says it writes: the problem fails
    with this message (the day changed, or the table reads it wrongly)."""


@dataclass(frozen=True)
class Problem:
    """One run of a day: `args` are its problem flags (without --save, --iters, --warmup,
    --json, which the runner adds); `check(saved, torch, **params)` computes PyTorch's answer.
    `label` names it in the report ("small", "medium-bf16")."""

    label: str
    args: tuple[str, ...]
    check: Callable[..., Expectation]
    params: dict = field(default_factory=dict)

    def expect(self, saved: "Saved", tc: "Torch") -> Expectation:
        return self.check(saved, tc, **self.params)


def flags(**values) -> tuple[str, ...]:
    """`flags(rows=7, dtype="bf16", causal=True)` -> ("--rows", "7", "--dtype", "bf16",
    "--causal"): underscores become dashes (a trailing one, as in `pass_`, is dropped), True is a bare flag, None and False are left out,
    lists are comma-separated."""
    out: list[str] = []
    for name, value in values.items():
        if value is None or value is False:
            continue
        flag = "--" + name.rstrip("_").replace("_", "-")
        if value is True:
            out.append(flag)
        elif isinstance(value, (list, tuple)):
            out += [flag, ",".join(str(v) for v in value)]
        else:
            out += [flag, str(value)]
    return tuple(out)


class Saved:
    """The arrays a `--save DIR` run wrote: inputs by name, `reference` (or None) and
    `out_<version>` per version, loaded on demand."""

    def __init__(self, folder: str):
        self.folder = folder
        names = sorted(f[:-4] for f in os.listdir(folder) if f.endswith(".npy"))
        self.versions = [n[len("out_") :] for n in names if n.startswith("out_")]
        self.input_names = [n for n in names if n != "reference" and not n.startswith("out_")]
        self._has_reference = "reference" in names

    def _load(self, name: str) -> np.ndarray:
        return np.load(os.path.join(self.folder, name + ".npy"))

    def has(self, name: str) -> bool:
        return name in self.input_names

    def input(self, name: str, shape: tuple[int, ...]) -> np.ndarray:
        """An input, checked to have the shape the day's code saves it with."""
        if not self.has(name):
            raise VerifyError(
                f"{name}.npy was not saved (saved inputs: {', '.join(self.input_names) or 'none'})"
            )
        a = self._load(name)
        if tuple(a.shape) != tuple(shape):
            raise VerifyError(f"{name}.npy has shape {a.shape}, expected {tuple(shape)}")
        return a

    def reference(self) -> np.ndarray | None:
        """The f64 reference, flat (None when the day saves none for this problem)."""
        return self._load("reference").reshape(-1) if self._has_reference else None

    def output(self, version: str, size: int) -> np.ndarray:
        a = self._load("out_" + version).reshape(-1)
        if a.size != size:
            raise VerifyError(f"out_{version}.npy has {a.size} values, expected {size}")
        return a.astype(np.float64)


# The torch dtype of each storage type the days use.
TORCH_DTYPES = {"f32": "float32", "f16": "float16", "bf16": "bfloat16", "f64": "float64"}


class Torch:
    """torch on one device, with TF32 and reduced-precision reductions off, so that an f32
    matmul is an f32 matmul and a 16-bit one accumulates in f32."""

    def __init__(self, torch_module, device: str):
        self.torch = torch_module
        self.device = device
        self.F = torch_module.nn.functional
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch_module.set_float32_matmul_precision("highest")
            torch_module.backends.cuda.matmul.allow_tf32 = False
            torch_module.backends.cudnn.allow_tf32 = False
            torch_module.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
            torch_module.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = False

    def tensor(self, a: np.ndarray, dtype: str):
        """A saved array (f32 or f64) on the device as `dtype`. The days save 16-bit data
        widened exactly, so converting back is exact too."""
        t = self.torch.from_numpy(np.ascontiguousarray(a))
        return t.to(self.device).to(getattr(self.torch, TORCH_DTYPES[dtype]))

    def integers(self, a: np.ndarray):
        """Integer data (saved as exact f32) as int64 on the device."""
        if not np.all(a == np.round(a)):
            raise VerifyError("integer data saved with a fractional part")
        return self.torch.from_numpy(np.ascontiguousarray(a.astype(np.int64))).to(self.device)

    @staticmethod
    def numpy(t) -> np.ndarray:
        """Any tensor as a flat f64 array (exact for every float type and for int64 below
        2^53)."""
        return t.detach().to("cpu").double().numpy().reshape(-1)


def open_torch(device: str = "cuda") -> Torch:
    """torch on `device`, or VerifyError saying why not (no torch, no CUDA)."""
    try:
        import torch
    except ImportError as e:
        raise VerifyError(f"torch does not import ({e}); the verification needs PyTorch") from e
    if device == "cuda" and not torch.cuda.is_available():
        raise VerifyError("torch sees no CUDA device; the verification computes on the GPU")
    return Torch(torch, device)
