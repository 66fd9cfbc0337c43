"""Day 24: y = W x with W in NVFP4, recomputed by torch from the weights the day saves.

The day saves `w_unscaled` [n, k] (each weight's e2m1 value times its block's e4m3 scale, exact
in f32: at most 6 significant bits), `tensor_scale` [1] and `x` [k] (bf16, widened exactly).
torch computes `tensor_scale * (W x)` in f64, so its own error is nothing next to the kernel's.
Only the NVFP4 versions run here (`--kernel`): the bf16 baseline multiplies other weights.
"""

from compare import Expectation, Part, UNIT_ROUNDOFF
from problem import Problem, flags

VERSIONS = ["nvfp4_warp", "nvfp4_rows2", "nvfp4_rows4"]


def gemv(label: str, n: int, k: int) -> Problem:
    return Problem(label, flags(op="gemv", n=n, k=k, kernel=VERSIONS), check_gemv, {"n": n, "k": k})


def check_gemv(saved, tc, n: int, k: int) -> Expectation:
    torch = tc.torch
    w = tc.tensor(saved.input("w_unscaled", (n, k)), "f32").to(torch.float64)
    x = tc.tensor(saved.input("x", (k,)), "f32").to(torch.float64)
    ts = float(saved.input("tensor_scale", (1,))[0])
    products = w * x * ts
    want = tc.numpy(products.sum(dim=1))
    # The day's bound (day24_nvfp4/src/gemv.rs): every product is exact in f32, the longest
    # chain of f32 roundings a term passes through is under k / 32 + 24, so the error is
    # within gamma_c times the largest row's sum |w x| (Higham 3.1).
    chain = -(-k // 32) + 24
    u = UNIT_ROUNDOFF["f32"]
    gamma = chain * u / (1 - chain * u)
    magnitude = float(products.abs().sum(dim=1).max())
    bound = max(gamma * magnitude, 1e-30)
    return Expectation(
        [
            Part(
                "y",
                0,
                n,
                want,
                bound=bound,
                tolerance=f"{bound:.2e} = gamma_{chain} x max_row sum |w x| (chain k/32 + 24, k = {k})",
            )
        ]
    )
