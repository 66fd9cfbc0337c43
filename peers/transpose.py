"""PyTorch on the problems of day17 (copy, transpose, reversal), timed on the same GPU.

    python3 peers/transpose.py --out peers_transpose.json

x.clone() for the copy, x.t().contiguous() for the transpose, torch.flip for the reversal.
Writes {"torch", "device", "figures": [{key, peer, median_ms, gb_per_s}]} with the day's keys;
GB/s counts the input read once and the output written once (8 bytes per f32 element).

Beside each eager row, the same expression under `torch.compile` (compiled for each shape
outside the timing): where Inductor has no kernel of its own for the op it calls the same
library kernel, and the row shows what compiling costs or saves around it.
"""

import sys

import torch

import _peer

# The days whose tables use these figures: run.sh --days runs this script only for them.
DAYS = "day17"

ROWS, COLS = 16384, 16384
REVERSE_N = 1 << 26


def figures():
    gen = torch.Generator(device="cuda").manual_seed(0)
    x = torch.rand(ROWS, COLS, device="cuda", generator=gen) * 2 - 1
    shape = f"{ROWS}x{COLS}"
    yield from _peer.rows(f"copy/f32/{shape}", "x.clone()", lambda: x.clone(), 8 * x.numel())
    transpose = lambda: x.t().contiguous()
    yield from _peer.rows(f"transpose/f32/{shape}", ".t().contiguous()", transpose, 8 * x.numel())
    del x
    v = torch.rand(REVERSE_N, device="cuda", generator=gen)
    flip = lambda: torch.flip(v, [0])
    yield from _peer.rows(f"reverse/f32/{REVERSE_N}", "torch.flip", flip, 8 * v.numel())


if __name__ == "__main__":
    sys.exit(_peer.main(__doc__, figures))
