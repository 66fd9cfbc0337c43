"""PyTorch on the problems of day 22 (per-row top-k), timed on the same GPU.

    python3 peers/topk.py --out peers_topk.json

Writes {"torch": version, "device": name, "figures": [{key, peer, median_ms, gb_per_s}]},
with keys as day22's report names its problems (topk/f32/4096x32768/k64), for `--peers FILE`
and `cargo xtask report`. Times torch.topk(x, k, dim=-1, largest=True, sorted=True) with
triton.testing.do_bench (median, L2 cleared between runs) when Triton is there, else with CUDA
events around each run after writing a buffer of twice the L2 size. GB/s counts the input read
once and the values and indices written once, with 4-byte indices as the day writes them
(torch writes int64 ones: it moves more bytes than it is credited with).

Beside each eager row, the same expression under `torch.compile` (compiled for each shape
outside the timing): where Inductor has no kernel of its own for the op it calls the same
library kernel, and the row shows what compiling costs or saves around it.
"""

import sys

import torch

import _peer

# The days whose tables use these figures: run.sh --days runs this script only for them.
DAYS = "day22"

# (rows, width, k, dtype): day22's default problems.
PROBLEMS = [
    (4096, 32768, 64, torch.float32),
    (64, 128256, 50, torch.bfloat16),
    (16, 1 << 20, 1024, torch.float32),
]
NAMES = {torch.float32: "f32", torch.bfloat16: "bf16"}


def logits(gen, rows, width, dtype):
    """The day's inputs (common::measure::inputs::logits): uniform in [-4, 4), about one in
    256 an outlier of magnitude 20 to 60 and either sign. The distribution matters to a radix
    select: it decides how many elements survive each digit."""
    x = torch.rand(rows, width, device="cuda", generator=gen) * 8 - 4
    outlier = torch.rand(rows, width, device="cuda", generator=gen) < 1 / 256
    magnitude = torch.rand(rows, width, device="cuda", generator=gen) * 40 + 20
    sign = torch.where(torch.rand(rows, width, device="cuda", generator=gen) < 0.5, -1.0, 1.0)
    return torch.where(outlier, magnitude * sign, x).to(dtype)


def figures():
    gen = torch.Generator(device="cuda").manual_seed(0)
    for rows, width, k, dtype in PROBLEMS:
        x = logits(gen, rows, width, dtype)
        size = x.element_size()
        nbytes = rows * width * size + rows * k * (size + 4)
        key = f"topk/{NAMES[dtype]}/{rows}x{width}/k{k}"
        fn = lambda: torch.topk(x, k, dim=-1, largest=True, sorted=True)  # noqa: E731
        yield from _peer.rows(key, "torch.topk", fn, nbytes)
        del x


if __name__ == "__main__":
    sys.exit(_peer.main(__doc__, figures))
