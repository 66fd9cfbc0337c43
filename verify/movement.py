"""Day 17: matrix copy, transpose and array reversal of f32: data movement, compared exactly."""

from __future__ import annotations

from compare import Expectation, Part
from problem import Problem, flags


def problem(label: str, op: str, rows: int = 0, cols: int = 0, n: int = 0) -> Problem:
    if op == "reverse":
        return Problem(label, flags(op=op, n=n), check, {"op": op, "shape": (n,)})
    return Problem(label, flags(op=op, rows=rows, cols=cols), check, {"op": op, "shape": (rows, cols)})


def check(saved, tc, op: str, shape: tuple[int, ...]) -> Expectation:
    # The day saves no input yet: `x` is the name to save it under.
    if not saved.has("x"):
        return Expectation(gaps=[f"{op}: the input x is not saved"])
    x = tc.tensor(saved.input("x", shape), "f32")
    if op == "copy":
        want = x.clone()
    elif op == "transpose":
        want = x.t().contiguous()
    else:
        want = tc.torch.flip(x, dims=[0])
    size = x.numel()
    return Expectation([Part(op, 0, size, tc.numpy(want), 0.0, "exact (data movement)", pair_bound=0.0)])
