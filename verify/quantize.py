"""Day 15: per-tensor INT8 quantization (symmetric i8, asymmetric u8), dequantization and the
INT8 matmul with zero points. Every result is an integer (or one f32 product of one), so every
comparison is exact. common/src/reference/quantize.rs gives the formulas: IEEE f32 division,
round half to even (torch.round), clamps."""

import numpy as np

from compare import Expectation, Part
from problem import Problem, VerifyError, flags

# f32 holds every integer up to 2^24 exactly: the .npy files widen integers to f32.
EXACT_F32_INTEGERS = 2**24


def quantize(label: str, scheme: str, rows: int, cols: int) -> Problem:
    return Problem(
        label,
        flags(op=f"quantize_{scheme}", rows=rows, cols=cols),
        check_quantize,
        {"scheme": scheme, "rows": rows, "cols": cols},
    )


def check_quantize(saved, tc, scheme: str, rows: int, cols: int) -> Expectation:
    torch = tc.torch
    x = tc.tensor(saved.input("x", (rows, cols)), "f32")
    lo, hi = x.min(), x.max()
    # Divisors as device tensors: torch turns a division by a Python number into a product
    # with its reciprocal (one more rounding, so a scale one ulp off and codes off by one at
    # rounding ties); the day's definition is IEEE division, which torch does between tensors.
    levels = tc.tensor(np.array(127.0 if scheme == "sym" else 255.0, np.float32), "f32")
    if scheme == "sym":
        scale = torch.maximum(hi, -lo) / levels
        scale = torch.where(scale == 0, torch.ones_like(scale), scale)
        q = torch.clamp(torch.round(x / scale), -127, 127)
    else:
        # The range is widened to hold 0 (as PyTorch's min-max observer does).
        lo, hi = torch.clamp(lo, max=0.0), torch.clamp(hi, min=0.0)
        scale = (hi - lo) / levels
        scale = torch.where(scale == 0, torch.ones_like(scale), scale)
        zero_point = torch.clamp(torch.round(-lo / scale), 0, 255)
        q = torch.clamp(torch.round(x / scale) + zero_point, 0, 255)
    want = tc.numpy(q)
    return Expectation(
        [Part("q", 0, rows * cols, want, 0.0, "exact (integer codes)", pair_bound=0.0)]
    )


def dequantize(label: str, rows: int, cols: int) -> Problem:
    return Problem(label, flags(op="dequantize", rows=rows, cols=cols), check_dequantize, {"rows": rows, "cols": cols})


def check_dequantize(saved, tc, rows: int, cols: int) -> Expectation:
    # The day runs the i8 and then the u8 problem into one --save folder, so the arrays here
    # are the u8 problem's (q, [scale, zero point] and each version's output, all overwritten
    # together); the i8 dequantization is checked by the day's own exact reference only.
    if not (saved.has("q") and saved.has("params")):
        return Expectation(gaps=["dequantize: q and its scale and zero point are not saved"])
    q = tc.tensor(saved.input("q", (rows, cols)), "f32")
    scale, zero_point = saved.input("params", (2,))
    want = tc.numpy((q - float(zero_point)) * tc.tensor(np.array([scale], np.float32), "f32"))
    return Expectation([Part("x", 0, rows * cols, want, 0.0, "exact (one f32 product)", pair_bound=0.0)])


def int8_matmul(label: str, m: int, n: int, k: int, za: int, zb: int) -> Problem:
    return Problem(
        label,
        flags(op="int8_matmul", m=m, n=n, k=k, za=za, zb=zb),
        check_int8_matmul,
        {"m": m, "n": n, "k": k, "za": za, "zb": zb},
    )


def check_int8_matmul(saved, tc, m, n, k, za, zb) -> Expectation:
    if not (saved.has("a") and saved.has("b_t")):
        return Expectation(gaps=["int8_matmul: A and B^T are not saved"])
    a = tc.integers(saved.input("a", (m, k))) - za
    b_t = tc.integers(saved.input("b_t", (n, k))) - zb
    # Exact in f64: every partial sum is an integer below 2^53.
    want = tc.numpy(a.double() @ b_t.double().T)
    if np.abs(want).max() >= EXACT_F32_INTEGERS:
        raise VerifyError(
            "int32 outputs reach 2^24, beyond what the f32 .npy files hold exactly; take a smaller k"
        )
    return Expectation([Part("c", 0, m * n, want, 0.0, "exact (int32)", pair_bound=0.0)])
