"""Day 16: sum, dot product, count of a value, segment sums (f32 or i32 in, f32 or u32 out) and
the inclusive scan (f32 and i32)."""

from __future__ import annotations

import math

import numpy as np

from compare import Expectation, Part, sum_bound
from problem import Problem, VerifyError, flags


def depth(n: int) -> int:
    """How many f32 additions one term may take part in, for the orders both the day's
    kernels and torch use: blocked or grid-stride partial sums of at most about sqrt(n)
    terms each, combined by a tree or one more chain (2 sqrt(n) + log2 n covers a chain of
    chains and any tree). A single sequential chain over all n is not covered, and no kernel
    here adds that way."""
    return 2 * math.isqrt(n) + 2 + max(1, math.ceil(math.log2(max(n, 2))))


def problem(label: str, which: str, n: int, segment_len: int | None = None, value: int = 7) -> Problem:
    args = flags(problem=which, n=n, segment_len=segment_len, value=value if which == "count" else None)
    return Problem(label, args, CHECKS[which], {"n": n, "segment_len": segment_len, "value": value})


def check_sum(saved, tc, n, **_) -> Expectation:
    x = tc.tensor(saved.input("x", (n,)), "f32")
    want = tc.numpy(x.sum())
    bound = sum_bound(depth(n), tc.numpy(x.abs().sum()))
    return one_part("sum", want, bound, f"gamma({depth(n)}) sum|x|")


def check_dot(saved, tc, n, **_) -> Expectation:
    a = tc.tensor(saved.input("a", (n,)), "f32")
    b = tc.tensor(saved.input("b", (n,)), "f32")
    want = tc.numpy(tc.torch.dot(a, b))
    # One more rounding per term: the product.
    bound = sum_bound(depth(n) + 1, tc.numpy((a * b).abs().sum()))
    return one_part("dot", want, bound, f"gamma({depth(n) + 1}) sum|a b|")


def check_count(saved, tc, n, value, **_) -> Expectation:
    x = tc.integers(saved.input("x", (n,)))
    want = tc.numpy((x == value).sum())
    return Expectation([Part("count", 0, 1, want, 0.0, "exact", pair_bound=0.0)])


def check_segment_sum(saved, tc, n, segment_len, **_) -> Expectation:
    segments = n // segment_len
    x = tc.tensor(saved.input("x", (segments, segment_len)), "f32")
    want = tc.numpy(x.sum(dim=1))
    d = depth(segment_len)
    bound = sum_bound(d, tc.numpy(x.abs().sum(dim=1)))
    return Expectation([Part("sums", 0, segments, want, bound, f"gamma({d}) sum|x| per segment")])


def check_scan(saved, tc, n, **_) -> Expectation:
    # `--problem scan` runs an f32 scan and then an i32 scan into the same folder: what is
    # saved is the i32 problem's (its inputs are integers -2..4; the f32 one's are quarters).
    x = saved.input("x", (n,))
    if not np.all(x == np.round(x)):
        raise VerifyError("the saved scan input is not the i32 problem's (it has fractions)")
    want = tc.numpy(tc.torch.cumsum(tc.integers(x), dim=0))
    return Expectation(
        [Part("prefix (i32)", 0, n, want, 0.0, "exact (integers)", pair_bound=0.0)],
        gaps=["scan f32: its arrays are overwritten by the i32 scan's in the same --save folder"],
    )


def one_part(name, want, bound, text) -> Expectation:
    return Expectation([Part(name, 0, 1, want, bound, text)])


CHECKS = {
    "sum": check_sum,
    "dot": check_dot,
    "count": check_count,
    "segment-sum": check_segment_sum,
    "scan": check_scan,
}
