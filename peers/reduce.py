"""PyTorch on the problems of day 16 (reductions and scans), timed on the same GPU.

    python3 peers/reduce.py --out peers_reduce.json

Writes {"torch": version, "device": name, "figures": [{key, peer, median_ms, gb_per_s}]},
with keys as day16's report names its problems (sum/f32/268435456), for `--peers FILE` and
`cargo xtask report`. Times with triton.testing.do_bench (median, L2 cleared between runs)
when Triton is there, else with CUDA events around each run after writing a buffer of twice
the L2 size. GB/s counts each input read once and each output written once, as the day does.

Beside each eager row, the same expression under `torch.compile` (compiled for each shape
outside the timing): where Inductor has no kernel of its own for the op it calls the same
library kernel, and the row shows what compiling costs or saves around it.
"""

import sys

import torch

import _peer

# The days whose tables use these figures: run.sh --days runs this script only for them.
DAYS = "day16"

N = 1 << 28
SEGMENT_LEN = 4096


def floats(gen, n):
    # The day's inputs: uniform in [-0.5, 1.5).
    return torch.rand(n, device="cuda", generator=gen) * 2 - 0.5


def problems(gen):
    """(key, peer, fn, bytes) for each problem; the inputs live as long as the closures."""
    x = floats(gen, N)
    yield f"sum/f32/{N}", "torch.sum", lambda: torch.sum(x), 4 * N + 4
    ints = torch.randint(1, 17, (N,), device="cuda", dtype=torch.int32, generator=gen)
    yield f"count/i32/{N}", "(x == v).sum()", lambda: (ints == 7).sum(), 4 * N + 4
    del ints
    y = floats(gen, N)
    yield f"dot/f32/{N}", "torch.dot", lambda: torch.dot(x, y), 8 * N + 4
    del y
    segments = N // SEGMENT_LEN
    rows = x.view(segments, SEGMENT_LEN)
    yield (
        f"segment_sum/f32/{segments}x{SEGMENT_LEN}",
        "x.view(s, len).sum(1)",
        lambda: rows.sum(dim=1),
        4 * N + 4 * segments,
    )
    yield f"scan/f32/{N}", "torch.cumsum", lambda: torch.cumsum(x, 0), 8 * N
    del x, rows
    small = torch.randint(-2, 5, (N,), device="cuda", dtype=torch.int32, generator=gen)
    # dtype=int32 keeps the output i32 (torch would widen it to i64 otherwise).
    yield (
        f"scan/i32/{N}",
        "torch.cumsum",
        lambda: torch.cumsum(small, 0, dtype=torch.int32),
        8 * N,
    )


def figures():
    gen = torch.Generator(device="cuda").manual_seed(0)
    for key, peer, fn, nbytes in problems(gen):
        yield from _peer.rows(key, peer, fn, nbytes)


if __name__ == "__main__":
    sys.exit(_peer.main(__doc__, figures))
