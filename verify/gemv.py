"""Day 14: y = A x in f32, A `m x n`."""

from compare import Expectation, Part, dot_bound
from problem import Problem, flags


def problem(label: str, m: int, n: int) -> Problem:
    return Problem(label, flags(m=m, n=n), check, {"m": m, "n": n})


def check(saved, tc, m: int, n: int) -> Expectation:
    a = tc.tensor(saved.input("a", (m, n)), "f32")
    x = tc.tensor(saved.input("x", (n,)), "f32")
    want = tc.numpy(tc.torch.mv(a, x))
    # Each output is a dot product of n terms in [-1, 1]: the matmul days' bound with k = n.
    bound = dot_bound(n)
    return Expectation(
        [
            Part(
                "y",
                0,
                m,
                want,
                bound=bound,
                tolerance=f"{bound:.2e} = 2^-24 (n^1.5/4 + 4), n = {n}",
            )
        ]
    )
