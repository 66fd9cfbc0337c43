"""PyTorch's bf16 GEMV and GEMM on the shapes of day 24, timed on the same GPU: what the NVFP4
kernels are compared with (PyTorch has no NVFP4 GEMV for a GPU without FP4 tensor cores).

    python3 peers/nvfp4.py --out peers_nvfp4.json

Writes {"torch": version, "device": name, "figures": [{key, peer, median_ms, gb_per_s}]},
with keys as day24 names its problems (nvfp4_gemv/bf16/8192x8192), for `--peers FILE` and
`cargo xtask report`. Times torch.mv(W, x) with W bf16 (cuBLAS underneath) and F.linear(A, W)
for the GEMM, with triton.testing.do_bench when Triton is there (see _peer.py). GB/s counts
the bytes as day24's table does, the NVFP4 least traffic (W's codes and scales, x, y), so the
column compares times: the bf16 GEMV really moves 3.55x those bytes.
"""

import sys

import torch
import torch.nn.functional as F

import _peer

# The days whose tables use these figures: run.sh --days runs this script only for them.
DAYS = "day24"

# day24's default GEMV shapes (N rows x K) and its GEMMs (M x N x K).
GEMV = [(8192, 8192), (14336, 4096), (28672, 8192)]
GEMM = [(4096, 4096, 4096), (8192, 14336, 4096)]


def nvfp4_bytes(rows, cols):
    return rows * cols // 2 + rows * cols // 16


def figures():
    for n, k in GEMV:
        gen = torch.Generator(device="cuda").manual_seed(0)
        w = (torch.rand(n, k, device="cuda", generator=gen) * 2 - 1).to(torch.bfloat16)
        x = (torch.rand(k, device="cuda", generator=gen) * 2 - 1).to(torch.bfloat16)
        nbytes = nvfp4_bytes(n, k) + 2 * k + 4 * n
        yield _peer.figure(f"nvfp4_gemv/bf16/{n}x{k}", "torch.mv bf16", lambda: torch.mv(w, x), nbytes)
        del w, x
        torch.cuda.empty_cache()
    for m, n, k in GEMM:
        gen = torch.Generator(device="cuda").manual_seed(0)
        a = (torch.rand(m, k, device="cuda", generator=gen) * 2 - 1).to(torch.bfloat16)
        w = (torch.rand(n, k, device="cuda", generator=gen) * 2 - 1).to(torch.bfloat16)
        nbytes = 2 * m * k + nvfp4_bytes(n, k) + 4 * m * n
        yield _peer.figure(
            f"nvfp4_gemm/bf16/{m}x{n}x{k}", "F.linear bf16", lambda: F.linear(a, w), nbytes, ops=2 * m * n * k
        )
        del a, w
        torch.cuda.empty_cache()


if __name__ == "__main__":
    sys.exit(_peer.main(__doc__, figures))
