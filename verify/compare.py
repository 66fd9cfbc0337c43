"""Comparing a kernel's output with PyTorch's and with the saved f64 reference.

Every family module describes an output as `Part`s: a slice of the flat output, PyTorch's
values for it, and `bound`, the largest error (per element, absolute) that any correct
implementation may have against the exact answer. Then

- torch vs reference and kernel vs reference must each be within `bound`;
- kernel vs torch must be within `pair_bound`: by the triangle inequality two results that
  are each within `bound` of the exact answer are within `2 * bound` of each other, so
  that is the default; a part where both must be bit-identical (a correctly rounded sum,
  integer results, data movement) sets it to 0.

Only NumPy is needed here, so the checks are testable without a GPU or torch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

# Unit roundoff (half an ulp relative, at most) of each storage type: 2^-24 for f32's 24
# significant bits, 2^-11 for f16's 11. bf16 has 8 significant bits, so 2^-9 would be its
# unit roundoff; but just above a power of two one ulp is 2^-7 of the value, so half an ulp
# reaches 2^-8 of it: the days use 2^-8, and so do we.
UNIT_ROUNDOFF = {"f32": 2.0**-24, "f16": 2.0**-11, "bf16": 2.0**-8}

# The absolute floor where a format turns subnormal: f16's subnormal spacing is 2^-24, so a
# tiny f16 output is rounded absolutely, not relatively. f32 and bf16 share f32's exponent
# range; 1e-30 only keeps exact zeros from dividing by zero.
SUBNORMAL_FLOOR = {"f32": 1e-30, "f16": 2.0**-24, "bf16": 1e-30}


def unit_roundoff(dtype: str) -> float:
    if dtype not in UNIT_ROUNDOFF:
        raise ValueError(f"no unit roundoff for dtype {dtype!r}; floats are f32, f16, bf16")
    return UNIT_ROUNDOFF[dtype]


@dataclass
class Part:
    """One part of an output (dx, then dweight, ...) as PyTorch computes it.

    `start`/`stop` index the kernel's flattened output; `torch` and `bound` have
    `stop - start` elements (or `bound` is a scalar). `tolerance` says in words where the bound
    comes from, for the report.
    """

    name: str
    start: int
    stop: int
    torch: np.ndarray
    bound: np.ndarray | float
    tolerance: str
    pair_bound: np.ndarray | float | None = None

    def __post_init__(self) -> None:
        self.torch = np.asarray(self.torch, dtype=np.float64).reshape(-1)
        if self.torch.size != self.stop - self.start:
            raise ValueError(
                f"part {self.name}: torch has {self.torch.size} values for "
                f"{self.stop - self.start} outputs"
            )
        if self.pair_bound is None:
            self.pair_bound = 2.0 * np.asarray(self.bound, dtype=np.float64)


@dataclass
class Diff:
    """How far `got` is from `want` against a per-element bound."""

    elements: int
    max_abs: float
    max_rel: float
    # max |got - want| / bound: 1 is the edge of the tolerance (inf where a bound of 0 is
    # missed).
    worst_ratio: float
    mismatches: int
    # NaN in one where the other is a number, or infinities that differ.
    nan_or_inf: int
    first_mismatch: int | None = None

    @property
    def passed(self) -> bool:
        return self.elements > 0 and self.mismatches == 0

    def as_dict(self) -> dict:
        return {
            "elements": self.elements,
            "max_abs": finite_or_none(self.max_abs),
            "max_rel": finite_or_none(self.max_rel),
            "worst_ratio": finite_or_none(self.worst_ratio),
            "mismatches": self.mismatches,
            "nan_or_inf": self.nan_or_inf,
            "first_mismatch": self.first_mismatch,
            "passed": self.passed,
        }


def finite_or_none(v: float) -> float | None:
    """JSON has no inf or NaN."""
    return float(v) if math.isfinite(v) else None


def diff(got: np.ndarray, want: np.ndarray, bound: np.ndarray | float) -> Diff:
    """Compares element-wise: `|got - want| <= bound`; equal values (infinities too) always
    pass, a NaN on either side never does (no saved output or reference is NaN on purpose)."""
    got = np.asarray(got, dtype=np.float64).reshape(-1)
    want = np.asarray(want, dtype=np.float64).reshape(-1)
    if got.shape != want.shape:
        raise ValueError(f"comparing {got.size} values with {want.size}")
    bound = np.broadcast_to(np.asarray(bound, dtype=np.float64), got.shape)
    if got.size == 0:
        return Diff(0, 0.0, 0.0, 0.0, 0, 0)
    equal = got == want
    finite = np.isfinite(got) & np.isfinite(want)
    with np.errstate(invalid="ignore", divide="ignore"):
        err = np.where(finite, np.abs(got - want), np.inf)
        err = np.where(equal, 0.0, err)
        ok = err <= bound
        rel = np.where(equal, 0.0, err / np.abs(want))
        ratio = np.where(equal, 0.0, np.where(bound > 0, err / bound, np.inf))
    bad = ~ok
    nonfinite = int(np.count_nonzero(~equal & ~finite))
    first = int(np.argmax(bad)) if bad.any() else None
    finite_err = err[np.isfinite(err)]
    finite_rel = rel[np.isfinite(rel)]
    return Diff(
        elements=int(got.size),
        max_abs=float(finite_err.max()) if finite_err.size else (math.inf if nonfinite else 0.0),
        max_rel=float(finite_rel.max()) if finite_rel.size else 0.0,
        worst_ratio=float(ratio.max()),
        mismatches=int(np.count_nonzero(bad)),
        nan_or_inf=nonfinite,
        first_mismatch=first,
    )


def bound_from(
    values: np.ndarray,
    atol: float = 0.0,
    rtol: float = 0.0,
    slack: np.ndarray | float = 0.0,
) -> np.ndarray:
    """`atol + rtol * |values| + slack`, element-wise (the days' tolerance shape)."""
    values = np.abs(np.asarray(values, dtype=np.float64))
    return atol + rtol * values + np.asarray(slack, dtype=np.float64)


def sum_bound(depth: int, abs_sum: np.ndarray | float) -> np.ndarray:
    """Higham's bound of an f32 summation in any order whose terms each go through at most
    `depth` additions: `gamma(depth) * sum |x_i|`, gamma(d) = d u / (1 - d u), u = 2^-24."""
    du = depth * UNIT_ROUNDOFF["f32"]
    if du >= 0.5:
        raise ValueError(f"a summation depth of {depth} has no useful f32 bound")
    return du / (1.0 - du) * np.asarray(abs_sum, dtype=np.float64)


@dataclass
class PartResult:
    name: str
    tolerance: str
    vs_torch: Diff
    torch_vs_ref: Diff | None
    vs_ref: Diff | None

    @property
    def passed(self) -> bool:
        return all(d is None or d.passed for d in (self.vs_torch, self.torch_vs_ref, self.vs_ref))

    def failure(self) -> str | None:
        """What failed, in words (None when nothing did)."""
        if not self.vs_torch.passed:
            return f"{self.name}: kernel vs torch"
        if self.torch_vs_ref is not None and not self.torch_vs_ref.passed:
            return f"{self.name}: torch vs reference (the bound or the inputs' reading is wrong)"
        if self.vs_ref is not None and not self.vs_ref.passed:
            return f"{self.name}: kernel vs reference"
        return None

    def as_dict(self) -> dict:
        return {
            "part": self.name,
            "tolerance": self.tolerance,
            "vs_torch": self.vs_torch.as_dict(),
            "torch_vs_reference": self.torch_vs_ref.as_dict() if self.torch_vs_ref else None,
            "vs_reference": self.vs_ref.as_dict() if self.vs_ref else None,
        }


def compare_part(part: Part, out: np.ndarray, reference: np.ndarray | None) -> PartResult:
    """One part of one version's flat output against torch and (when saved) the reference."""
    got = out[part.start : part.stop]
    ref = None if reference is None else reference[part.start : part.stop]
    return PartResult(
        name=part.name,
        tolerance=part.tolerance,
        vs_torch=diff(got, part.torch, part.pair_bound),
        torch_vs_ref=None if ref is None else diff(part.torch, ref, part.bound),
        vs_ref=None if ref is None else diff(got, ref, part.bound),
    )


@dataclass
class Expectation:
    """What a family module gives for one problem: the parts PyTorch computed, and what it
    cannot verify yet (an input the day does not save)."""

    parts: list[Part] = field(default_factory=list)
    # Problems (or parts of one) that cannot be verified yet, each with the reason: reported
    # as `not verifiable yet`, never as passed. With no parts, the whole problem is one.
    gaps: list[str] = field(default_factory=list)


def dot_bound(k: int, a_max: float = 1.0, b_max: float = 1.0) -> float:
    """The matmul days' bound on an f32 sum of `k` products of inputs bounded by `a_max` and
    `b_max` (common/src/reference/matmul.rs): partial sums wander like a random walk to about
    `sqrt(j / 9)` after `j` terms, each addition rounds by `u` of its partial sum, so the
    sequential worst case is `u k^1.5 / 4.5`; `u (k^1.5 / 4 + 4)` bounds it, and blocked or
    tree orders (cuBLAS, torch) give less. A lost product (about 0.25) is far outside it."""
    u = UNIT_ROUNDOFF["f32"]
    return u * (k**1.5 / 4.0 + 4.0) * a_max * b_max
