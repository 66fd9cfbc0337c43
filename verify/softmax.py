"""Days 1-5: row-wise softmax of `rows x cols` in f32, f16 or bf16 (math in f32)."""

from compare import SUBNORMAL_FLOOR, Expectation, Part, bound_from, UNIT_ROUNDOFF
from problem import Problem, flags


def problem(label: str, rows: int, cols: int, dtype: str) -> Problem:
    return Problem(
        label,
        flags(rows=rows, cols=cols, dtype=dtype),
        check,
        {"rows": rows, "cols": cols, "dtype": dtype},
    )


def f32_rtol(cols: int) -> float:
    """common/src/reference/softmax.rs: a row sum added in sequence errs by up to
    (n - 1) 2^-24 relative, expf and the scaling add a few ulp: (n + 4) 2^-24, at least 1e-5."""
    return max(1e-5, (cols + 4) * UNIT_ROUNDOFF["f32"])


def check(saved, tc, rows: int, cols: int, dtype: str) -> Expectation:
    x = tc.tensor(saved.input("x", (rows, cols)), dtype)
    # torch computes in f32 (opmath) and rounds the result to the storage type once.
    want = tc.numpy(tc.torch.softmax(x, dim=-1))
    half_ulp = 0.0 if dtype == "f32" else UNIT_ROUNDOFF[dtype]
    rtol = f32_rtol(cols) + half_ulp
    atol = SUBNORMAL_FLOOR[dtype]
    return Expectation(
        [
            Part(
                "y",
                0,
                rows * cols,
                want,
                bound=bound_from(want, atol, rtol),
                tolerance=f"{atol:.1e} + {rtol:.2e} |y| (f32 row sum of {cols} + {dtype} rounding)",
            )
        ]
    )
