"""PyTorch on the problems of day 13 (activations), timed on the same GPU.

    python3 peers/activation.py --out peers_activation.json

Writes {"torch": version, "device": name, "figures": [{key, peer, median_ms, gb_per_s}]},
with keys as day13 names its problems (gelu_tanh/bf16/16384x4096), for `--peers FILE` and
`cargo xtask report`. Times with triton.testing.do_bench (median, L2 cleared between runs)
when Triton is there, else with CUDA events around each run after writing a buffer of twice
the L2 size. GB/s counts the least traffic of the fused op, as day13 does: each input read
once, each output written once, whatever torch moves in between.

What is timed for each key:
- gelu_tanh, gelu_erf: F.gelu(x, approximate="tanh" | "none"), one kernel.
- swiglu: F.silu(g) * x, torch's two kernels (silu into a temporary, then the multiply).
- gelu_tanh_bwd: torch.ops.aten.gelu_backward(dy, x, approximate="tanh"), the one kernel
  autograd runs for F.gelu's backward.
- swiglu_bwd: what autograd runs for F.silu(g) * x, written out so that nothing else is
  timed (no .grad accumulation): dx = dout * s, dg = aten.silu_backward(dout * x, g), with
  s = F.silu(g) saved by the forward (not timed): three kernels.
- bias_dropout_add: residual + (x + bias) * mask * scale in eager torch, with the same kind
  of uint8 keep mask day13 uses (four kernels).
- relu, leaky_relu, hardtanh, silu: F.relu(x), F.leaky_relu(x, 0.01), F.hardtanh(x, -1, 1),
  F.silu(x): one kernel each, torch's default scalars as day13's defaults.
- relu_bwd, leaky_relu_bwd, hardtanh_bwd, silu_bwd: the one kernel autograd runs for each:
  torch.ops.aten.threshold_backward(dy, y, 0) (autograd passes relu's output y; y <= 0 exactly
  where x <= 0, so day13 reads x: the same bytes), aten.leaky_relu_backward(dy, x, 0.01,
  False), aten.hardtanh_backward(dy, x, -1, 1), aten.silu_backward(dy, x).

Beside each eager row: the same function under `torch.compile` (Inductor fuses the swiglu and
bias-dropout-add chains into one kernel each), and for swiglu and swiglu_bwd Liger's SwiGLU
kernel (`liger_swiglu(g, x)`, its backward through autograd of its forward, on copies: it
writes the gradients over the saved inputs) where liger_kernel is installed.
"""

import sys

import torch
import torch.nn.functional as F

import _peer

# The days whose tables use these figures: run.sh --days runs this script only for them.
DAYS = "day13"

DTYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}
ROWS, COLS = 16384, 4096
DROPOUT_P = 0.1
# torch's defaults, which day13's default problems use (other values change day13's key).
NEGATIVE_SLOPE = 0.01
MIN_VAL, MAX_VAL = -1.0, 1.0

# (op, dtype): day13's default problems, plus the erf backward and the rectifiers that are
# not among the defaults (`--op` runs them there).
PROBLEMS = [
    ("gelu_tanh", "bf16"),
    ("gelu_erf", "bf16"),
    ("swiglu", "bf16"),
    ("gelu_tanh_bwd", "bf16"),
    ("gelu_erf_bwd", "bf16"),
    ("swiglu_bwd", "bf16"),
    ("bias_dropout_add", "f16"),
    ("relu", "bf16"),
    ("relu_bwd", "bf16"),
    ("leaky_relu", "bf16"),
    ("leaky_relu_bwd", "bf16"),
    ("hardtanh", "bf16"),
    ("hardtanh_bwd", "bf16"),
    ("silu", "bf16"),
    ("silu_bwd", "bf16"),
]

# One input x to one output: (peer name, torch function of x).
UNARY = {
    "relu": ("F.relu", F.relu),
    "leaky_relu": ("F.leaky_relu", lambda x: F.leaky_relu(x, NEGATIVE_SLOPE)),
    "hardtanh": ("F.hardtanh", lambda x: F.hardtanh(x, MIN_VAL, MAX_VAL)),
    "silu": ("F.silu", F.silu),
}

# (dy, x) to dx: (peer name, the aten backward kernel autograd runs).
BACKWARD = {
    "relu_bwd": (
        "aten.threshold_backward",
        lambda dy, x: torch.ops.aten.threshold_backward(dy, x, 0),
    ),
    "leaky_relu_bwd": (
        "aten.leaky_relu_backward",
        lambda dy, x: torch.ops.aten.leaky_relu_backward(dy, x, NEGATIVE_SLOPE, False),
    ),
    "hardtanh_bwd": (
        "aten.hardtanh_backward",
        lambda dy, x: torch.ops.aten.hardtanh_backward(dy, x, MIN_VAL, MAX_VAL),
    ),
    "silu_bwd": ("aten.silu_backward", torch.ops.aten.silu_backward),
}


def uniform(shape, lo, hi, dtype, gen):
    return (torch.rand(shape, device="cuda", generator=gen) * (hi - lo) + lo).to(dtype)


class LigerSwigluBackward:
    """Liger's SwiGLU backward of one saved forward, on copies of g and x (it writes dg and dx
    over them). The forward runs at the first call, inside the row's own error handling."""

    def __init__(self, lib, dout, g, x):
        self.lib, self.dout, self.g, self.x = lib, dout, g, x
        self.run = None

    def __call__(self):
        if self.run is None:
            g = self.g.clone().requires_grad_(True)
            x = self.x.clone().requires_grad_(True)
            out = self.lib.liger_swiglu(g, x)
            self.run = lambda: torch.autograd.grad(out, (g, x), self.dout, retain_graph=True)
        return self.run()


def problem(op, dtype, gen, lib):
    """(peer name, function to time, least bytes, Liger's (name, function) or None) for one
    problem."""
    n = ROWS * COLS
    size = torch.finfo(dtype).bits // 8
    shape = (ROWS, COLS)
    if op in ("gelu_tanh", "gelu_erf"):
        x = uniform(shape, -6, 6, dtype, gen)
        approximate = "tanh" if op == "gelu_tanh" else "none"
        return "F.gelu", lambda: F.gelu(x, approximate=approximate), 2 * n * size, None
    if op == "swiglu":
        g, x = uniform(shape, -6, 6, dtype, gen), uniform(shape, -6, 6, dtype, gen)
        liger_kernel = ("SwiGLU", lambda: lib.liger_swiglu(g, x)) if lib else None
        return "F.silu(g) * x", lambda: F.silu(g) * x, 3 * n * size, liger_kernel
    if op in ("gelu_tanh_bwd", "gelu_erf_bwd"):
        dy, x = uniform(shape, -1, 1, dtype, gen), uniform(shape, -6, 6, dtype, gen)
        approximate = "tanh" if op == "gelu_tanh_bwd" else "none"
        fn = lambda: torch.ops.aten.gelu_backward(dy, x, approximate=approximate)
        return "aten.gelu_backward", fn, 3 * n * size, None
    if op == "swiglu_bwd":
        dout = uniform(shape, -1, 1, dtype, gen)
        g, x = uniform(shape, -6, 6, dtype, gen), uniform(shape, -6, 6, dtype, gen)
        s = F.silu(g)

        def backward():
            dx = dout * s
            dg = torch.ops.aten.silu_backward(dout * x, g)
            return dg, dx

        liger_kernel = None
        if lib:
            liger_kernel = ("SwiGLU backward", LigerSwigluBackward(lib, dout, g, x))
        return "autograd formula", backward, 5 * n * size, liger_kernel
    if op == "bias_dropout_add":
        x, residual = uniform(shape, -2, 2, dtype, gen), uniform(shape, -2, 2, dtype, gen)
        bias = uniform((COLS,), -1, 1, dtype, gen)
        mask = (torch.rand(shape, device="cuda", generator=gen) >= DROPOUT_P).to(torch.uint8)
        scale = 1.0 / (1.0 - DROPOUT_P)
        fn = lambda: residual + (x + bias) * mask * scale
        return "torch eager", fn, n * (3 * size + 1) + COLS * size, None
    if op in UNARY:
        peer, f = UNARY[op]
        x = uniform(shape, -6, 6, dtype, gen)
        return peer, lambda: f(x), 2 * n * size, None
    if op in BACKWARD:
        peer, f = BACKWARD[op]
        dy, x = uniform(shape, -1, 1, dtype, gen), uniform(shape, -6, 6, dtype, gen)
        return peer, lambda: f(dy, x), 3 * n * size, None
    raise ValueError(op)


def figures():
    lib = _peer.liger()
    for op, dtype in PROBLEMS:
        key = f"{op}/{dtype}/{ROWS}x{COLS}"
        gen = torch.Generator(device="cuda").manual_seed(0)
        peer, fn, nbytes, liger_kernel = problem(op, DTYPES[dtype], gen, lib)
        yield from _peer.rows(key, peer, fn, nbytes, liger_kernel=liger_kernel)
        del fn, liger_kernel
        torch.cuda.empty_cache()


if __name__ == "__main__":
    sys.exit(_peer.main(__doc__, figures))
