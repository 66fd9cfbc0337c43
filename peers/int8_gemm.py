"""PyTorch on the problems of day23 (INT8 GEMM on tensor cores), timed on the same GPU.

    python3 peers/int8_gemm.py --out peers_int8_gemm.json

torch._int_mm (cuBLASLt's INT8 tensor-core GEMM: int8 x int8 -> int32) at 4096^3 and 8192^3,
the day's int32 problems without zero points. A is m x k; B is stored n x k (a linear layer's
weight), and b.t() of it is the column-major k x n operand cuBLASLt's INT8 path wants, so no
copy is made. For the quantized linear layer (per-channel zero points of B, za = -3, scales,
bf16 out) the peer is what a user writes without a fused kernel: torch._int_mm on the raw
bytes, then the zero-point corrections from row and column sums, and the scaling and cast, as
separate torch ops. Writes {"torch", "device", "figures": [{key, peer, median_ms, gb_per_s}]}
with the day's keys; GB/s counts A and B read once and C written once (4 bytes for int32, 2
for bf16).
"""

import sys

import torch

import _peer

# The days whose tables use these figures: run.sh --days runs this script only for them.
DAYS = "day23"

SIZES = [4096, 8192]
ZA = -3


def int_mm(m, n, k, gen):
    a = torch.randint(-128, 128, (m, k), device="cuda", dtype=torch.int8, generator=gen)
    b = torch.randint(-128, 128, (n, k), device="cuda", dtype=torch.int8, generator=gen)
    return _peer.figure(
        f"int8_gemm/s32/{m}x{n}x{k}",
        "torch._int_mm",
        lambda: torch._int_mm(a, b.t()),
        m * k + n * k + 4 * m * n,
        ops=2 * m * n * k,
    )


def per_channel(m, n, k, gen):
    a = torch.randint(-128, 128, (m, k), device="cuda", dtype=torch.int8, generator=gen)
    b = torch.randint(-128, 128, (n, k), device="cuda", dtype=torch.int8, generator=gen)
    zb = torch.randint(-8, 9, (n,), device="cuda", dtype=torch.int32, generator=gen)
    scale_b = torch.rand(n, device="cuda", generator=gen) * 9e-3 + 1e-3
    scale_a = 0.02

    def linear():
        acc = torch._int_mm(a, b.t())
        row = a.sum(1, dtype=torch.int32).unsqueeze(1)
        col = b.sum(1, dtype=torch.int32).unsqueeze(0)
        c = acc - zb.unsqueeze(0) * row - ZA * col + k * ZA * zb.unsqueeze(0)
        return (c.float() * (scale_a * scale_b)).to(torch.bfloat16)

    return _peer.figure(
        f"int8_gemm_per_channel/bf16/{m}x{n}x{k}",
        "torch._int_mm + torch ops",
        linear,
        m * k + n * k + 2 * m * n,
        ops=2 * m * n * k,
    )


def figures():
    gen = torch.Generator(device="cuda").manual_seed(0)
    for s in SIZES:
        yield int_mm(s, s, s, gen)
    yield per_channel(4096, 4096, 4096, gen)


if __name__ == "__main__":
    sys.exit(_peer.main(__doc__, figures))
