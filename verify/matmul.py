"""Matmuls: days 6-9 (f32 `C = A B`, cuBLAS SGEMM as a row too) and day 18 (bf16/f16 on tensor
cores, either operand stored transposed, cuBLAS as a row)."""

import numpy as np

from compare import Expectation, Part, UNIT_ROUNDOFF, bound_from, dot_bound
from problem import Problem, flags


def sgemm(label: str, m: int, n: int, k: int) -> Problem:
    """Days 6-9. Up to 2^30 multiply-adds the day saves its full f64 reference too."""
    return Problem(label, flags(m=m, n=n, k=k), check_sgemm, {"m": m, "n": n, "k": k})


def check_sgemm(saved, tc, m: int, n: int, k: int) -> Expectation:
    a = tc.tensor(saved.input("a", (m, k)), "f32")
    b = tc.tensor(saved.input("b", (k, n)), "f32")
    want = tc.numpy(a @ b)  # TF32 is off (problem.Torch): a true f32 GEMM
    bound = dot_bound(k)
    return Expectation(
        [
            Part(
                "c",
                0,
                m * n,
                want,
                bound=bound,
                tolerance=f"{bound:.2e} = 2^-24 (k^1.5/4 + 4), k = {k}, inputs in [-1, 1]",
            )
        ]
    )


def tensor_core(
    label: str, m: int, n: int, k: int, dtype: str, a: str = "as-is", b: str = "transposed"
) -> Problem:
    """Day 18: `a`/`b` are how A and B are stored (`transposed`: A as [k, m], B as [n, k])."""
    return Problem(
        label,
        flags(m=m, n=n, k=k, dtype=dtype, a=a, b=b),
        check_tensor_core,
        {"m": m, "n": n, "k": k, "dtype": dtype, "a": a, "b": b},
    )


def check_tensor_core(saved, tc, m, n, k, dtype, a, b) -> Expectation:
    a_shape = (1, k, m) if a == "transposed" else (1, m, k)
    b_shape = (1, n, k) if b == "transposed" else (1, k, n)
    at = tc.tensor(saved.input("a", a_shape), dtype)[0]
    bt = tc.tensor(saved.input("b", b_shape), dtype)[0]
    a_mat = at.T if a == "transposed" else at
    b_mat = bt.T if b == "transposed" else bt
    # 16-bit inputs are exact products in f32; reduced-precision reductions are off, so torch
    # accumulates in f32 and rounds C once, as the kernels do.
    want = tc.numpy(a_mat @ b_mat)
    accumulate = dot_bound(k)
    u = UNIT_ROUNDOFF[dtype]
    return Expectation(
        [
            Part(
                "c",
                0,
                m * n,
                want,
                bound=bound_from(np.abs(want), accumulate, u),
                tolerance=f"{accumulate:.2e} (f32 sum of k = {k}) + 2^{int(np.log2(u))} |c| ({dtype} output)",
            )
        ]
    )
