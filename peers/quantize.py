"""PyTorch on the problems of day15 (per-tensor INT8 quantization), timed on the same GPU.

    python3 peers/quantize.py --out peers_quantize.json

The ops a user writes for per-tensor quantization without a fused kernel: amax (or min and
max), divide, round (half to even, as the day's kernels), clamp, cast; dequantization as a
cast, subtract and multiply; and torch._int_mm (cuBLASLt INT8 tensor cores) for the INT8
matmul. torch._int_mm has no zero points, so its figure is for za = zb = 0 (the day's kernels
also subtract zero points; the correction terms would add a few cheap reductions). Writes
{"torch", "device", "figures": [{key, peer, median_ms, gb_per_s}]} with the day's keys. GB/s
counts the least traffic as the day does: x read once and q written once (5 bytes per
element), q read and y written for dequantization, A, B read and C (int32) written for the
matmul.
"""

import sys

import torch

import _peer

# The days whose tables use these figures: run.sh --days runs this script only for them.
DAYS = "day15"

ROWS, COLS = 16384, 4096
M = N = K = 4096


def quantize_sym(x):
    scale = x.abs().amax() / 127
    return torch.clamp(torch.round(x / scale), -127, 127).to(torch.int8)


def quantize_asym(x):
    lo = torch.clamp(x.amin(), max=0)
    hi = torch.clamp(x.amax(), min=0)
    scale = (hi - lo) / 255
    zp = torch.clamp(torch.round(-lo / scale), 0, 255)
    return torch.clamp(torch.round(x / scale) + zp, 0, 255).to(torch.uint8)


def figures():
    gen = torch.Generator(device="cuda").manual_seed(0)
    x = torch.rand(ROWS, COLS, device="cuda", generator=gen) * 8 - 3
    n = x.numel()
    shape = f"{ROWS}x{COLS}"
    yield _peer.figure(f"quantize_sym/f32/{shape}", "torch ops", lambda: quantize_sym(x), 5 * n)
    yield _peer.figure(f"quantize_asym/f32/{shape}", "torch ops", lambda: quantize_asym(x), 5 * n)
    q8 = quantize_sym(x)
    scale = float(x.abs().amax() / 127)
    dequantize_i8 = lambda: q8.to(torch.float32) * scale
    yield _peer.figure(f"dequantize/i8/{shape}", "torch ops", dequantize_i8, 5 * n)
    qu8 = quantize_asym(x)
    dequantize_u8 = lambda: (qu8.to(torch.float32) - 128) * scale
    yield _peer.figure(f"dequantize/u8/{shape}", "torch ops", dequantize_u8, 5 * n)
    del x, q8, qu8

    a = torch.randint(-128, 128, (M, K), device="cuda", dtype=torch.int8, generator=gen)
    b_t = torch.randint(-128, 128, (N, K), device="cuda", dtype=torch.int8, generator=gen)
    # B stored n x k (the day's layout) is a column-major k x n: the layout cuBLASLt's INT8
    # path wants.
    b = b_t.t()
    yield _peer.figure(
        f"int8_matmul/i8/{M}x{N}x{K}",
        "torch._int_mm (zero points 0)",
        lambda: torch._int_mm(a, b),
        M * K + N * K + 4 * M * N,
        ops=2 * M * N * K,
    )


if __name__ == "__main__":
    sys.exit(_peer.main(__doc__, figures))
