"""PyTorch's convolutions on the problems of day 21, timed on the same GPU.

    python3 peers/conv.py --out peers_conv.json

Writes {"torch": version, "device": name, "figures": [{key, peer, median_ms, gb_per_s}]},
with keys as day21 names its problems (conv1d/f32/67108864/k7, conv2d/f32/8192x8192/5x5,
conv2d_nchw/bf16/16x3x512x512/16x3x3x3), for `--peers FILE` and `cargo xtask report`. Times
F.conv1d / F.conv2d with padding="same", stride 1, no bias, as users get them by default:
cuDNN enabled with torch's default settings, including torch.backends.cudnn.allow_tf32 = True
(the default for convolutions), so the f32 problems may run on TF32 tensor cores (10-bit
mantissa products, which day21's f32 kernels do not use); benchmark mode off (the default).
Timed with triton.testing.do_bench (median, L2 cleared between runs) when Triton is there,
else with CUDA events around each run after writing a buffer of twice the L2 size. GB/s
counts the least traffic as day21 does: x, w and y once each. The TOPS printed beside are 2 x
multiply-adds of the output's full window (day21 counts only products inside the input: the
same to a fraction of a percent on these sizes).

Beside each eager row, the same expression under `torch.compile` (compiled for each shape
outside the timing): where Inductor has no kernel of its own for the op it calls the same
library kernel, and the row shows what compiling costs or saves around it.
"""

import sys

import torch
import torch.nn.functional as F

import _peer

# The days whose tables use these figures: run.sh --days runs this script only for them.
DAYS = "day21"

# (key, dtype, input shape, weight shape, conv): day21's default problems.
PROBLEMS = [
    ("conv1d/f32/67108864/k7", torch.float32, (1, 1, 1 << 26), (1, 1, 7), F.conv1d),
    ("conv1d/bf16/67108864/k7", torch.bfloat16, (1, 1, 1 << 26), (1, 1, 7), F.conv1d),
    ("conv2d/f32/8192x8192/5x5", torch.float32, (1, 1, 8192, 8192), (1, 1, 5, 5), F.conv2d),
    (
        "conv2d_nchw/bf16/16x3x512x512/16x3x3x3",
        torch.bfloat16,
        (16, 3, 512, 512),
        (16, 3, 3, 3),
        F.conv2d,
    ),
]


def numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def figures():
    for key, dtype, x_shape, w_shape, conv in PROBLEMS:
        gen = torch.Generator(device="cuda").manual_seed(0)
        x = (torch.rand(x_shape, device="cuda", generator=gen) * 2 - 1).to(dtype)
        w = (torch.rand(w_shape, device="cuda", generator=gen) * 2 - 1).to(dtype)
        out_shape = (x_shape[0], w_shape[0]) + tuple(x_shape[2:])
        size = x.element_size()
        nbytes = size * (numel(x_shape) + numel(w_shape) + numel(out_shape))
        macs = numel(out_shape) * numel(w_shape[1:])
        yield from _peer.rows(
            key,
            f"F.{conv.__name__}",
            lambda: conv(x, w, padding="same"),
            nbytes,
            ops=2 * macs,
        )
        del x, w
        torch.cuda.empty_cache()


if __name__ == "__main__":
    sys.exit(_peer.main(__doc__, figures))
