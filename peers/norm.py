"""PyTorch's RMSNorm and LayerNorm, forward and backward, on the problems of days 11 and 12.

    python3 peers/norm.py --out peers_norm.json

Writes {"torch": version, "device": name, "figures": [{key, peer, median_ms, gb_per_s}]},
with keys as the days' reports name their problems (rmsnorm/bf16/16384x4096,
rmsnorm_bwd/bf16/16384x4096, layernorm/..., layernorm_bwd/...), for `--peers FILE` and
`cargo xtask report`. Times with triton.testing.do_bench (median, L2 cleared between runs)
when Triton is there, else with CUDA events after writing a buffer of twice the L2 size.

Bytes are counted as the days count them (common/src/family/norm/mod.rs, bytes_per_run): forward, x read
and y written once plus the weight (and bias) read; backward, x and dy read, dx written, the
weight read and one gradient per parameter written. The backward figure times only the
backward: the forward runs once, outside the timing, and each timed run is
`torch.autograd.grad` of the saved graph (retain_graph) for the same dy.

Beside eager torch: the same forward under `torch.compile` (its backward rows time the
backward AOTAutograd compiled for it), and Liger's RMSNorm and LayerNorm kernels (its
module's defaults: RMSNorm's "llama" casting, dx written over dy) where liger_kernel is
installed.
"""

import sys

import torch
import torch.nn.functional as F

import _peer

# The days whose tables use these figures: run.sh --days runs this script only for them.
DAYS = "day11 day12"

DTYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}

# (op, dtype, rows, cols): the days' default problems.
PROBLEMS = [
    ("rmsnorm", "bf16", 16384, 4096),
    ("layernorm", "bf16", 16384, 4096),
]

EPS = {"rmsnorm": 1e-6, "layernorm": 1e-5}


def forward(op, x, w, b):
    cols = x.shape[-1]
    if op == "rmsnorm":
        return F.rms_norm(x, (cols,), w, eps=EPS[op])
    return F.layer_norm(x, (cols,), w, b, eps=EPS[op])


def least_bytes(op, rows, cols, size, backward):
    params = 1 if op == "rmsnorm" else 2
    n = rows * cols
    elements = 3 * n + (1 + params) * cols if backward else 2 * n + params * cols
    return elements * size


def liger_forward(lib, op, x, w, b):
    if op == "rmsnorm":
        return lib.liger_rms_norm(x, w, EPS[op])
    return lib.liger_layer_norm(x, w, b, EPS[op])


def liger_backward(lib, op, x, w, b, dy):
    """Liger's backward of its own forward, timed like the eager one; dy is copied because
    Liger's RMSNorm writes dx over it."""
    y = liger_forward(lib, op, x, w, b)
    wrt = [x, w] + ([b] if b is not None else [])
    dy = dy.clone()
    return lambda: torch.autograd.grad(y, wrt, dy, retain_graph=True)


def figures():
    lib = _peer.liger()
    for op, dtype, rows, cols in PROBLEMS:
        gen = torch.Generator(device="cuda").manual_seed(0)
        dt = DTYPES[dtype]

        def uniform(shape, lo, hi):
            return (torch.rand(shape, device="cuda", generator=gen) * (hi - lo) + lo).to(dt)

        x = uniform((rows, cols), -1.0, 3.0)
        w = uniform((cols,), 0.5, 1.5)
        b = uniform((cols,), -0.5, 0.5) if op == "layernorm" else None
        dy = uniform((rows, cols), -1.0, 1.0)
        peer = "F.rms_norm" if op == "rmsnorm" else "F.layer_norm"
        size = x.element_size()

        key = f"{op}/{dtype}/{rows}x{cols}"
        nbytes = least_bytes(op, rows, cols, size, backward=False)
        liger_name = "RMSNorm" if op == "rmsnorm" else "LayerNorm"
        liger_kernel = (liger_name, lambda: liger_forward(lib, op, x, w, b)) if lib else None
        with torch.no_grad():
            eager = lambda: forward(op, x, w, b)  # noqa: E731
            records = list(_peer.rows(key, peer, eager, nbytes, liger_kernel=liger_kernel))
        yield from records

        # Backward: gradients of x, the weight (and bias), as the days compute them.
        xg = x.detach().requires_grad_(True)
        wg = w.detach().requires_grad_(True)
        bg = b.detach().requires_grad_(True) if b is not None else None
        y = forward(op, xg, wg, bg)
        wrt = [xg, wg] + ([bg] if bg is not None else [])
        key = f"{op}_bwd/{dtype}/{rows}x{cols}"
        nbytes = least_bytes(op, rows, cols, size, backward=True)
        backward = lambda: torch.autograd.grad(y, wrt, dy, retain_graph=True)
        yield _peer.figure(key, f"{peer} backward", backward, nbytes)
        y = None

        def compiled():
            fwd = lambda x, w, b: forward(op, x, w, b)  # noqa: E731
            return _peer.compiled_backward(key, peer, fwd, (xg, wg, bg), wrt, dy, nbytes)

        yield from _peer.tried(key, _peer.compiled_name(peer), compiled)
        if lib is not None:
            what = f"{liger_name} backward"

            def liger_row():
                run = liger_backward(lib, op, xg, wg, bg, dy)
                return _peer.figure(key, _peer.liger_name(what), run, nbytes)

            yield from _peer.tried(key, f"Liger {what}", liger_row)
        del x, w, b, dy, xg, wg, bg, y, wrt


if __name__ == "__main__":
    sys.exit(_peer.main(__doc__, figures))
