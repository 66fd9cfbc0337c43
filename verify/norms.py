"""Days 11-12: RMSNorm and LayerNorm over the last `cols`, forward and backward (math in f32,
stored in f32, f16 or bf16). The backward's output is dx (`rows x cols`), then dweight (and
dbias for LayerNorm), one row each."""

from __future__ import annotations

import numpy as np

from compare import SUBNORMAL_FLOOR, UNIT_ROUNDOFF, Expectation, Part, bound_from
from problem import Problem, flags

# eps is passed explicitly (not left to the day's default), so the check knows it.
DEFAULT_EPS = {"rms": 1e-6, "layer": 1e-5}

# Roundings to the storage type on the way to an output: torch's composite formulas may
# round an intermediate (x * rstd) before the weight multiplies it, and the output once more.
ROUNDINGS = 2


def problem(label, kind, pass_, rows, cols, dtype) -> Problem:
    eps = DEFAULT_EPS[kind]
    return Problem(
        label,
        flags(rows=rows, cols=cols, dtype=dtype, pass_=pass_, eps=eps),
        check,
        {"kind": kind, "pass_": pass_, "rows": rows, "cols": cols, "dtype": dtype, "eps": eps},
    )


def f32_gamma(chain: int) -> float:
    """common/src/reference/norm.rs: a chain of `chain` f32 additions and a few operations
    more, (chain + 8) 2^-24, relative to the magnitude of the terms (at least 1e-5)."""
    return max(1e-5, (chain + 8) * UNIT_ROUNDOFF["f32"])


def bound_for(values, magnitude, chain: int, dtype: str) -> tuple[np.ndarray, str]:
    """An output computed in f32 with sums of `chain` terms of size `magnitude`, rounded to
    `dtype` up to ROUNDINGS times: each rounding is relative to the terms it rounds, so
    it is counted against `magnitude` as well as the output."""
    u = 0.0 if dtype == "f32" else UNIT_ROUNDOFF[dtype]
    g = f32_gamma(chain)
    bound = bound_from(values, SUBNORMAL_FLOOR[dtype], ROUNDINGS * u, (g + ROUNDINGS * u) * magnitude)
    text = f"{SUBNORMAL_FLOOR[dtype]:.0e} + {ROUNDINGS * u:.1e} |x| + {g + ROUNDINGS * u:.1e} terms (f32 chain {chain})"
    return bound, text


def check(saved, tc, kind, pass_, rows, cols, dtype, eps) -> Expectation:
    torch, F = tc.torch, tc.F
    x = tc.tensor(saved.input("x", (rows, cols)), dtype)
    w = tc.tensor(saved.input("weight", (cols,)), dtype)
    b = None
    if kind == "layer" and pass_ == "forward":
        b = tc.tensor(saved.input("bias", (cols,)), dtype)
    # The statistics in f32 from the stored values, for the magnitudes of the terms.
    xf, wf = x.float(), w.float()
    mean = xf.mean(-1, keepdim=True) if kind == "layer" else torch.zeros_like(xf[:, :1])
    var = ((xf - mean) ** 2).mean(-1, keepdim=True) if kind == "layer" else (xf * xf).mean(-1, keepdim=True)
    rstd = torch.rsqrt(var + eps)
    xhat = (xf - mean) * rstd

    def norm(x_, w_, b_):
        if kind == "rms":
            return F.rms_norm(x_, (cols,), w_, eps)
        return F.layer_norm(x_, (cols,), w_, b_, eps)

    if pass_ == "forward":
        want = tc.numpy(norm(x, w, b))
        # y = (x - mean) rstd w + b: errors relative to each term's size.
        mag = (xf.abs() + mean.abs()) * rstd * wf.abs()
        if b is not None:
            mag = mag + b.float().abs()
        bound, text = bound_for(want, tc.numpy(mag), cols, dtype)
        return Expectation([Part("y", 0, rows * cols, want, bound, text)])

    dy = tc.tensor(saved.input("dy", (rows, cols)), dtype)
    x.requires_grad_(True)
    w.requires_grad_(True)
    bias = None
    if kind == "layer":
        bias = torch.zeros(cols, dtype=x.dtype, device=x.device, requires_grad=True)
    norm(x, w, bias).backward(dy)
    dyf = dy.float()
    g = wf * dyf
    # dx = rstd (w dy - xhat mean(w dy xhat) [- mean(w dy)]): the size of its terms.
    dx_mag = rstd * (g.abs() + xhat.abs() * (g * xhat).abs().mean(-1, keepdim=True))
    if kind == "layer":
        dx_mag = dx_mag + rstd * g.abs().mean(-1, keepdim=True)
    n = rows * cols
    dx_bound, dx_text = bound_for(tc.numpy(x.grad), tc.numpy(dx_mag), cols, dtype)
    parts = [Part("dx", 0, n, tc.numpy(x.grad), dx_bound, dx_text)]
    dw_mag = (dyf * xhat).abs().sum(0)
    dw_bound, dw_text = bound_for(tc.numpy(w.grad), tc.numpy(dw_mag), rows + cols, dtype)
    parts.append(Part("dweight", n, n + cols, tc.numpy(w.grad), dw_bound, dw_text))
    if kind == "layer":
        db_bound, db_text = bound_for(tc.numpy(bias.grad), tc.numpy(dyf.abs().sum(0)), rows, dtype)
        parts.append(Part("dbias", n + cols, n + 2 * cols, tc.numpy(bias.grad), db_bound, db_text))
    return Expectation(parts)
