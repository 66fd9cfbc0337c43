"""PyTorch's softmax on the problems of the softmax days (02-05), timed on the same GPU.

    python3 peers/softmax.py --out peers_softmax.json

Writes {"torch": version, "device": name, "figures": [{key, peer, median_ms, gb_per_s}]},
with keys as the days' reports name their problems (softmax/f32/32768x4096), for
`--peers FILE` and `cargo xtask report`. Times with triton.testing.do_bench (median, L2
cleared between runs) when Triton is there, else with CUDA events around each run after
writing a buffer of twice the L2 size. GB/s counts the input read once and the output
written once, as the days do.

Beside eager `torch.softmax`, the same expression under `torch.compile` (Inductor's Triton
kernel, compiled for each shape outside the timing) and Liger's softmax kernel where the
liger_kernel package is installed.
"""

import sys

import torch

import _peer

# The days whose tables use these figures: run.sh --days runs this script only for them.
DAYS = "day01 day02 day03 day04 day05"

DTYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}

# The softmax targets, the dtype-day problems, and the sweep (2^26 elements, 128..1M columns).
PROBLEMS = [
    ("f32", 32768, 4096),
    ("f16", 32768, 4096),
    ("bf16", 32768, 4096),
    ("f32", 4096, 32768),
    ("f32", 1 << 20, 128),
    ("f32", 8, 1 << 20),
] + [("f32", (1 << 26) >> k, 1 << k) for k in range(7, 21)]


def key_of(problem):
    dtype, rows, cols = problem
    return f"softmax/{dtype}/{rows}x{cols}"


def figures():
    lib = _peer.liger()
    for key, (dtype, rows, cols) in _peer.distinct(PROBLEMS, key_of):
        gen = torch.Generator(device="cuda").manual_seed(0)
        x = (torch.rand(rows, cols, device="cuda", generator=gen) * 8 - 4).to(DTYPES[dtype])
        nbytes = 2 * x.numel() * x.element_size()
        softmax = lambda: torch.softmax(x, dim=-1)  # noqa: E731
        liger_kernel = ("softmax", lambda: lib.liger_softmax(x)) if lib else None
        yield from _peer.rows(key, "torch.softmax", softmax, nbytes, liger_kernel=liger_kernel)
        del x


if __name__ == "__main__":
    sys.exit(_peer.main(__doc__, figures))
