"""PyTorch on the problems of day18 (C = A B^T, B stored [n, k]), timed on the same GPU.

    python3 peers/gemm.py --out peers_gemm.json

torch.matmul(a, b.t()) (cuBLAS or cuBLASLt underneath, as torch picks) in bf16 on the day's
square sizes 256 to 8192 (its default problems and its --sweep), and the odd 1000 x 1001 x 999.
Writes {"torch", "device", "figures": [{key, peer, median_ms, gb_per_s}]} with the day's keys;
GB/s counts A and B read once and C written once. Reduced-precision (bf16) split-k reductions
are switched off, as in the day's cuBLAS row.
"""

import sys

import torch

import _peer

SIZES = [256, 512, 1024, 2048, 3072, 4096, 6144, 8192]
ODD = (1000, 1001, 999)


def one(m, n, k, gen):
    a = torch.rand(m, k, device="cuda", generator=gen, dtype=torch.bfloat16) * 2 - 1
    b = torch.rand(n, k, device="cuda", generator=gen, dtype=torch.bfloat16) * 2 - 1
    nbytes = 2 * (m * k + n * k + m * n)
    return _peer.figure(
        f"gemm/bf16/{m}x{n}x{k}", "torch.matmul(a, b.t())", lambda: a @ b.t(), nbytes,
        ops=2 * m * n * k,
    )


def figures():
    # f32 accumulation throughout, as day18's kernels and its cuBLAS row (torch's default lets
    # cuBLAS add split-k partial sums in bf16).
    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
    gen = torch.Generator(device="cuda").manual_seed(0)
    for s in SIZES:
        yield one(s, s, s, gen)
    yield one(*ODD, gen)


if __name__ == "__main__":
    sys.exit(_peer.main(__doc__, figures))
