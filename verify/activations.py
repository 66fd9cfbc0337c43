"""Day 13: element-wise activations and their gradients, math in f32, stored in f32, f16 or
bf16. Each op is one entry of OPS: adding an op (relu, leaky_relu, hardtanh, silu and their
backward, say) is one line there, see verify/README.md."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from compare import SUBNORMAL_FLOOR, UNIT_ROUNDOFF, Expectation, Part, bound_from
from problem import Problem, flags


@dataclass(frozen=True)
class Op:
    """`inputs`: the saved arrays (rows x cols each, `bias` cols), in the day's order;
    `torch(tc, t)` -> the outputs (back to back in the day's buffer) from the input tensors
    `t` by name, and the op's scalar flags under their names (`t["negative_slope"]`);
    `roundings`: how often torch's eager formula rounds to the storage type on the way (the
    day's fused kernels round once)."""

    inputs: tuple[str, ...]
    torch: Callable
    roundings: int
    outputs: int = 1
    # An input the day does not save yet; its absence makes the op `not verifiable yet`.
    needs: str | None = None


def grad_of(f: Callable, wrt: tuple[str, ...], upstream: str):
    """Autograd of `f(tc, t)` against the inputs `wrt`, given the upstream gradient `upstream`:
    torch's own backward formulas (aten.gelu_backward, ...)."""

    def run(tc, t):
        for name in wrt:
            t[name].requires_grad_(True)
        f(tc, t).backward(t[upstream])
        return [t[name].grad for name in wrt]

    return run


def gelu_tanh(tc, t):
    return tc.F.gelu(t["x"], approximate="tanh")


def gelu_erf(tc, t):
    return tc.F.gelu(t["x"])


def swiglu(tc, t):
    return tc.F.silu(t["g"]) * t["x"]


def leaky_relu(tc, t):
    return tc.F.leaky_relu(t["x"], t.get("negative_slope", 0.01))


def hardtanh(tc, t):
    return tc.F.hardtanh(t["x"], t.get("min_val", -1.0), t.get("max_val", 1.0))


def bias_dropout_add(tc, t):
    # In f32, rounded once to the storage type at the end, as the day's fused kernel does:
    # eager torch in f16 rounds x + bias and the product before the residual is added, and
    # where the sum cancels those roundings are large against |y|, beyond any bound relative
    # to y (measured: 89x the one-rounding bound on f16 7 x 1000).
    f32 = tc.torch.float32
    x, bias, residual = (t[n].to(f32) for n in ("x", "bias", "residual"))
    y = residual + (x + bias) * (t["mask"].to(f32) * t["scale"].to(f32))
    return y.to(t["x"].dtype)


OPS = {
    "gelu_tanh": Op(("x",), lambda tc, t: [gelu_tanh(tc, t)], 1),
    "gelu_erf": Op(("x",), lambda tc, t: [gelu_erf(tc, t)], 1),
    "swiglu": Op(("g", "x"), lambda tc, t: [swiglu(tc, t)], 2),
    "gelu_tanh_bwd": Op(("dy", "x"), grad_of(gelu_tanh, ("x",), "dy"), 1),
    "gelu_erf_bwd": Op(("dy", "x"), grad_of(gelu_erf, ("x",), "dy"), 1),
    # dg (silu's backward of dout * x, itself rounded) and dx (dout * the rounded silu(g)).
    "swiglu_bwd": Op(("dout", "g", "x"), grad_of(swiglu, ("g", "x"), "dout"), 2, outputs=2),
    # The rectifiers and SiLU, with torch's defaults unless a problem gives its flags; their
    # backward is what autograd runs (threshold_backward, leaky_relu_backward,
    # hardtanh_backward, silu_backward). One rounding each: torch computes them in f32 and
    # rounds once, as the day does (the rectifiers are exact either way).
    "relu": Op(("x",), lambda tc, t: [tc.F.relu(t["x"])], 1),
    "relu_bwd": Op(("dy", "x"), grad_of(lambda tc, t: tc.F.relu(t["x"]), ("x",), "dy"), 1),
    "leaky_relu": Op(("x",), lambda tc, t: [leaky_relu(tc, t)], 1),
    "leaky_relu_bwd": Op(("dy", "x"), grad_of(leaky_relu, ("x",), "dy"), 1),
    "hardtanh": Op(("x",), lambda tc, t: [hardtanh(tc, t)], 1),
    "hardtanh_bwd": Op(("dy", "x"), grad_of(hardtanh, ("x",), "dy"), 1),
    "silu": Op(("x",), lambda tc, t: [tc.F.silu(t["x"])], 1),
    "silu_bwd": Op(("dy", "x"), grad_of(lambda tc, t: tc.F.silu(t["x"]), ("x",), "dy"), 1),
    # x + bias, times mask * scale, plus the residual, in f32 and rounded once. The keep scale
    # 1 / (1 - p) is saved as `scale`.
    "bias_dropout_add": Op(
        ("x", "bias", "residual", "mask"), lambda tc, t: [bias_dropout_add(tc, t)], 1, needs="scale"
    ),
}


def problem(label: str, op: str, rows: int, cols: int, dtype: str, **scalars) -> Problem:
    """`scalars`: the op's own flags, given explicitly so the check knows them
    (`negative_slope=0.01` becomes `--negative-slope 0.01` and `t["negative_slope"]`)."""
    if op not in OPS:
        raise ValueError(f"day13 has no op {op!r} in verify/activations.py's OPS")
    return Problem(
        label,
        flags(op=op, rows=rows, cols=cols, dtype=dtype, **scalars),
        check,
        {"op": op, "rows": rows, "cols": cols, "dtype": dtype, "scalars": scalars},
    )


def check(saved, tc, op: str, rows: int, cols: int, dtype: str, scalars: dict) -> Expectation:
    spec = OPS[op]
    if spec.needs and not saved.has(spec.needs):
        return Expectation(
            gaps=[f"{op}: `{spec.needs}` is not saved (add it with session.save_input)"]
        )
    t = dict(scalars)
    for name in spec.inputs:
        shape = (cols,) if name == "bias" else (rows, cols)
        # The mask is 0/1 bytes, kept exact in any float type.
        t[name] = tc.tensor(saved.input(name, shape), dtype)
    if spec.needs:
        # Kept in f32, as the kernel gets it.
        t[spec.needs] = tc.tensor(saved.input(spec.needs, (1,)), "f32")
    outputs = spec.torch(tc, t)
    # day13_activations/src/reference.rs: the f32 part (a few ulp, the conditioning of exp,
    # cancellation where a gradient crosses zero) is within 1e-5 + 1e-5 |y| for inputs in
    # [-6, 6]; each rounding to the storage type adds half an ulp relative (and f16's subnormal
    # spacing absolutely).
    r = spec.roundings
    u = 0.0 if dtype == "f32" else UNIT_ROUNDOFF[dtype]
    floor = 0.0 if dtype == "f32" else SUBNORMAL_FLOOR[dtype]
    atol, rtol = 1e-5 + r * floor, 1e-5 + r * u
    n = rows * cols
    names = ["dg", "dx"] if op == "swiglu_bwd" else ["out"] * len(outputs)
    parts = []
    for i, (name, out) in enumerate(zip(names, outputs)):
        want = tc.numpy(out)
        parts.append(
            Part(
                name,
                i * n,
                (i + 1) * n,
                want,
                bound_from(want, atol, rtol),
                f"{atol:.1e} + {rtol:.2e} |y| (f32 math, {r} rounding(s) to {dtype})",
            )
        )
    return Expectation(parts)
