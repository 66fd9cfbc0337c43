"""PyTorch on the problems of day18 (C = A B^T, B stored [n, k]), timed on the same GPU.

    python3 peers/gemm.py --out peers_gemm.json

torch.matmul(a, b.t()) (cuBLAS or cuBLASLt underneath, as torch picks) in bf16 on the day's
square sizes 1024 to 8192 by 512 (its default problems and its --sweep), its --llm shapes (8192
tokens through an 8B model's linear layers), and the odd 1000 x 1001 x 999;
torch._scaled_mm on the FP8 problems (e4m3 A [m, k] and B [n, k], bf16 out, unit scales, fast
accumulation as the day's cuBLASLt row) at 4096 and 8192.
Writes {"torch", "device", "figures": [{key, peer, median_ms, gb_per_s}]} with the day's keys;
GB/s counts A and B read once and C written once. Reduced-precision (bf16) split-k reductions
are switched off, as in the day's cuBLAS row.
"""

import sys

import torch

import _peer

# The days whose tables use these figures: run.sh --days runs this script only for them.
DAYS = "day18"

SIZES = list(range(1024, 8192 + 1, 512))
LLM = [(8192, 4096, 4096), (8192, 14336, 4096), (8192, 4096, 14336), (8192, 128256, 4096)]
ODD = (1000, 1001, 999)


def one(m, n, k, gen):
    a = torch.rand(m, k, device="cuda", generator=gen, dtype=torch.bfloat16) * 2 - 1
    b = torch.rand(n, k, device="cuda", generator=gen, dtype=torch.bfloat16) * 2 - 1
    nbytes = 2 * (m * k + n * k + m * n)
    return _peer.figure(
        f"gemm/bf16/{m}x{n}x{k}", "torch.matmul(a, b.t())", lambda: a @ b.t(), nbytes,
        ops=2 * m * n * k,
    )


def one_fp8(s, gen):
    a = (torch.rand(s, s, device="cuda", generator=gen) * 2 - 1).to(torch.float8_e4m3fn)
    b = (torch.rand(s, s, device="cuda", generator=gen) * 2 - 1).to(torch.float8_e4m3fn)
    one_scale = torch.ones((), device="cuda")
    nbytes = s * s + s * s + 2 * s * s
    return _peer.figure(
        f"gemm/e4m3/{s}x{s}x{s}", "torch._scaled_mm(a, b.t(), fast accum)",
        lambda: torch._scaled_mm(a, b.t(), scale_a=one_scale, scale_b=one_scale,
                                 out_dtype=torch.bfloat16, use_fast_accum=True),
        nbytes, ops=2 * s * s * s,
    )


def figures():
    # f32 accumulation throughout, as day18's kernels and its cuBLAS row (torch's default lets
    # cuBLAS add split-k partial sums in bf16).
    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
    gen = torch.Generator(device="cuda").manual_seed(0)
    for s in SIZES:
        yield one(s, s, s, gen)
    for shape in LLM:
        yield one(*shape, gen)
    yield one(*ODD, gen)
    for s in (4096, 8192):
        yield one_fp8(s, gen)


if __name__ == "__main__":
    sys.exit(_peer.main(__doc__, figures))
