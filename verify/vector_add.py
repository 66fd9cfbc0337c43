"""Day 0: out = a + b in f32."""

from compare import Expectation, Part, UNIT_ROUNDOFF
from problem import Problem, flags


def problem(label: str, n: int) -> Problem:
    return Problem(label, flags(n=n), check, {"n": n})


def check(saved, tc, n: int) -> Expectation:
    a = tc.tensor(saved.input("a", (n,)), "f32")
    b = tc.tensor(saved.input("b", (n,)), "f32")
    want = tc.numpy(a + b)
    # An f32 addition is correctly rounded: within half an ulp of the exact sum, and the same
    # bits whoever computes it, so the kernel must equal torch exactly.
    return Expectation(
        [
            Part(
                "out",
                0,
                n,
                want,
                bound=UNIT_ROUNDOFF["f32"] * abs(want),
                pair_bound=0.0,
                tolerance="exact vs torch (correctly rounded); 2^-24 |x| vs reference",
            )
        ]
    )
