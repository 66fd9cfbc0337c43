"""Day 21: "same" convolution, stride 1, no bias (torch's `padding="same"`: the extra zero of an
even filter goes after), in f32 or bf16 with f32 math. `conv1d`: one signal `x` [n], one filter
`w` [width]; `conv2d`: one image `x` [1, 1, H, W], one filter `w` [1, 1, KH, KW];
`conv2d_nchw`: `x` [N, C_in, H, W], `w` [C_out, C_in, KH, KW]. The output is [n] or
[N, C_out, H, W]."""

from __future__ import annotations

import contextlib
import warnings

import numpy as np

from compare import SUBNORMAL_FLOOR, UNIT_ROUNDOFF, Expectation, Part, bound_from, sum_bound
from problem import Problem, flags


def conv1d(label: str, length: int, width: int, dtype: str) -> Problem:
    return Problem(
        label,
        flags(op="conv1d", length=length, width=width, dtype=dtype),
        check,
        {"op": "conv1d", "x_shape": (length,), "w_shape": (width,), "dtype": dtype},
    )


def conv2d(label: str, image: tuple[int, int], filter_: tuple[int, int], dtype: str) -> Problem:
    """One image, one filter."""
    (h, w), (kh, kw) = image, filter_
    return Problem(
        label,
        flags(op="conv2d", image=f"{h}x{w}", filter=f"{kh}x{kw}", dtype=dtype),
        check,
        {"op": "conv2d", "x_shape": (1, 1, h, w), "w_shape": (1, 1, kh, kw), "dtype": dtype},
    )


def conv2d_nchw(
    label: str,
    batch: int,
    in_channels: int,
    out_channels: int,
    image: tuple[int, int],
    filter_: tuple[int, int],
    dtype: str,
) -> Problem:
    (h, w), (kh, kw) = image, filter_
    return Problem(
        label,
        flags(
            op="conv2d_nchw",
            batch=batch,
            in_channels=in_channels,
            out_channels=out_channels,
            image=f"{h}x{w}",
            filter=f"{kh}x{kw}",
            dtype=dtype,
        ),
        check,
        {
            "op": "conv2d_nchw",
            "x_shape": (batch, in_channels, h, w),
            "w_shape": (out_channels, in_channels, kh, kw),
            "dtype": dtype,
        },
    )


@contextlib.contextmanager
def direct_convolution(torch):
    """torch's own convolution (a direct loop, or im2col and a GEMM), not cuDNN's: cuDNN picks
    its algorithm by heuristics, and its FFT and Winograd ones err relative to the norms of
    whole tiles, not to each output's own sum |x w|, so the per-element bound below would not
    hold for them. The native paths sum each output's products in f32 (a bf16 GEMM accumulates
    in f32, reduced-precision reductions are off) and round once."""
    enabled = torch.backends.cudnn.enabled
    torch.backends.cudnn.enabled = False
    try:
        with warnings.catch_warnings():
            # padding="same" with an even filter: torch pads a copy of the input, and says so.
            warnings.simplefilter("ignore")
            yield
    finally:
        torch.backends.cudnn.enabled = enabled


def same_conv(tc, op: str, x, w):
    """F.conv1d / F.conv2d with padding="same" on the saved layouts."""
    if op == "conv1d":
        return tc.F.conv1d(x.view(1, 1, -1), w.view(1, 1, -1), padding="same")
    return tc.F.conv2d(x, w, padding="same")


def check(saved, tc, op: str, x_shape, w_shape, dtype: str) -> Expectation:
    x_saved = saved.input("x", x_shape)
    w_saved = saved.input("w", w_shape)
    x, w = tc.tensor(x_saved, dtype), tc.tensor(w_saved, dtype)
    # The exact sums and sum |x w| per output, in f64 from the stored values (f64 products of
    # 16-bit or f32 inputs are exact, and k <= 7 x 7 x C_in terms add little).
    x64, w64 = tc.tensor(x_saved, "f64"), tc.tensor(w_saved, "f64")
    with direct_convolution(tc.torch):
        want = tc.numpy(same_conv(tc, op, x, w))
        exact = tc.numpy(same_conv(tc, op, x64, w64))
        magnitude = tc.numpy(same_conv(tc, op, x64.abs(), w64.abs()))
    # Each output sums k = C_in KH KW (1D: width) products in f32, within gamma_k sum |x w| of
    # the exact sum in any order, then is stored once: u_out of itself (0 for f32, where the
    # sum is the output). day21_convolution/src/reference.rs: u_out |s| + (1 + u_out) gamma_k M.
    terms = int(np.prod(w_shape[1:])) if op != "conv1d" else int(w_shape[0])
    u_out = 0.0 if dtype == "f32" else UNIT_ROUNDOFF[dtype]
    slack = (1.0 + u_out) * sum_bound(terms, magnitude)
    bound = bound_from(exact, SUBNORMAL_FLOOR[dtype], u_out, slack)
    rounding = "" if dtype == "f32" else f" + 2^{int(np.log2(u_out))} |y| ({dtype} output)"
    text = f"gamma_k sum|x w| (f32 sum of k = {terms} products, any order){rounding}"
    return Expectation([Part("y", 0, want.size, want, bound, text)])
