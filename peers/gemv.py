"""PyTorch's GEMV on the problems of day 14, timed on the same GPU.

    python3 peers/gemv.py --out peers_gemv.json

Writes {"torch": version, "device": name, "figures": [{key, peer, median_ms, gb_per_s}]},
with keys as day14 names its problems (gemv/f32/8192x8192), for `--peers FILE` and
`cargo xtask report`. Times torch.mv(A, x) (cuBLAS SGEMV underneath) with
triton.testing.do_bench (median, L2 cleared between runs) when Triton is there, else with CUDA
events around each run after writing a buffer of twice the L2 size. TF32 is off (it does not
apply to GEMV, but the figure must be plain f32 whatever the default). GB/s counts the least
traffic as day14 does: A, x and y once each, 4 * (m n + n + m) bytes.

Beside each eager row, the same expression under `torch.compile` (compiled for each shape
outside the timing): where Inductor has no kernel of its own for the op it calls the same
library kernel, and the row shows what compiling costs or saves around it.
"""

import sys

import torch

import _peer

# The days whose tables use these figures: run.sh --days runs this script only for them.
DAYS = "day14"

# Square, tall-skinny and short-wide: day14's default problems, 256 MiB of A each.
PROBLEMS = [(8192, 8192), (1 << 20, 64), (64, 1 << 20)]


def figures():
    torch.backends.cuda.matmul.allow_tf32 = False
    for m, n in PROBLEMS:
        gen = torch.Generator(device="cuda").manual_seed(0)
        a = torch.rand(m, n, device="cuda", generator=gen) * 2 - 1
        x = torch.rand(n, device="cuda", generator=gen) * 2 - 1
        nbytes = 4 * (m * n + n + m)
        yield from _peer.rows(f"gemv/f32/{m}x{n}", "torch.mv", lambda: torch.mv(a, x), nbytes)
        del a, x
        torch.cuda.empty_cache()


if __name__ == "__main__":
    sys.exit(_peer.main(__doc__, figures))
