"""Day 22: per-row top-k of a `rows x width` matrix. The values are copies of inputs, so they
must equal torch.topk's exactly. The indices are not saved (`--save` writes the checked output,
the values); the day checks them itself, exactly, against its reference."""

from compare import Expectation, Part
from problem import Problem, flags


def problem(label: str, rows: int, width: int, k: int, dtype: str) -> Problem:
    return Problem(
        label,
        flags(rows=rows, width=width, k=k, dtype=dtype),
        check,
        {"rows": rows, "width": width, "k": k, "dtype": dtype},
    )


def check(saved, tc, rows: int, width: int, k: int, dtype: str) -> Expectation:
    x = tc.tensor(saved.input("x", (rows, width)), dtype)
    values = tc.torch.topk(x, k, dim=-1, largest=True, sorted=True).values
    # Equal values in any order are the same values: ties (and -0.0 beside +0.0) cannot make
    # two correct answers differ here, only in their indices.
    return Expectation(
        [
            Part(
                "values",
                0,
                rows * k,
                tc.numpy(values),
                bound=0.0,
                tolerance="exact (copies of inputs)",
                pair_bound=0.0,
            )
        ]
    )
