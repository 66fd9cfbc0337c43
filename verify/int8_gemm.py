"""Day 23: the INT8 GEMM on tensor cores, C = (A - za)(B - zb)^T with B stored [n, k] and zb
per tensor or per output channel: exact int32, or scale_a scale_b C rounded to bf16.

The integer product is exact in f64 (every partial sum is an integer below 2^53). The bf16
output repeats the kernel's arithmetic: the f32 product scale_a scale_b[j], times the integer
in f32, rounded once to bf16; torch's bf16 rounding and the kernel's are both round-to-nearest,
so they agree to within one rounding of the f32 value: 2^-8 |y| (bf16's unit roundoff, a
whole ulp just above a power of two) plus the few f32 roundings, 2^-22 |y|."""

import numpy as np

from compare import Expectation, Part
from problem import Problem, VerifyError, flags

# f32 holds every integer up to 2^24 exactly: the .npy files widen integers to f32.
EXACT_F32_INTEGERS = 2**24


def problem(label: str, m: int, n: int, k: int, out: str = "s32", za: int = 0, zb: int = 0,
            per_channel: bool = False) -> Problem:
    return Problem(
        label,
        flags(m=m, n=n, k=k, out=out, za=za, zb=zb, per_channel=per_channel),
        check,
        {"m": m, "n": n, "k": k, "out": out, "za": za, "zb": zb, "per_channel": per_channel},
    )


def check(saved, tc, m, n, k, out, za, zb, per_channel) -> Expectation:
    channels = n if per_channel else 1
    a = tc.integers(saved.input("a", (m, k))) - za
    b = tc.integers(saved.input("b", (n, k)))
    zb_values = tc.integers(saved.input("zb", (channels,)))
    if not per_channel and int(zb_values[0]) != zb:
        raise VerifyError(f"the saved zb {int(zb_values[0])} is not the flag's {zb}")
    b = b - zb_values.reshape(-1, 1)
    exact = a.double() @ b.double().T
    if out == "s32":
        want = tc.numpy(exact)
        if np.abs(want).max() >= EXACT_F32_INTEGERS:
            raise VerifyError(
                "int32 outputs reach 2^24, beyond what the f32 .npy files hold exactly; take a smaller k"
            )
        return Expectation([Part("c", 0, m * n, want, 0.0, "exact (int32)", pair_bound=0.0)])
    torch = tc.torch
    scale_a = tc.tensor(saved.input("scale_a", (1,)), "f32")
    scale_b = tc.tensor(saved.input("scale_b", (channels,)), "f32")
    # The kernel's order: (scale_a scale_b[j]) in f32, times the integer in f32, then bf16.
    y = ((scale_a * scale_b).reshape(1, -1) * exact.float()).to(torch.bfloat16)
    want = tc.numpy(y)
    bound = (2.0**-8 + 2.0**-22) * np.abs(want)
    return Expectation([Part("y", 0, m * n, want, bound, "one bf16 rounding of the f32 scaling (2^-8 |y|)")])
