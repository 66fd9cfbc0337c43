"""PyTorch's scaled_dot_product_attention backward on the problems of day 20, timed on the
same GPU, with the FlashAttention-2 backend and the cuDNN backend separately.

    python3 peers/attention_bwd.py --out peers_attention_bwd.json

Writes {"torch": version, "device": name, "figures": [{key, peer, median_ms, gb_per_s}]},
keys as day20's reports name its problems (attention_bwd/bf16/b4-h16-kv16-d128-q4096-k4096,
with -causal for the causal mask). Only the backward is timed: the forward runs once with
requires_grad, then each timed call is torch.autograd.grad(out, (q, k, v), dO,
retain_graph=True), the backend's own backward kernel(s) (its D = rowsum(dO * O) preprocessing
and dQ conversion included, as day 20's are). Inputs are [batch, seqlen, heads, head_dim] as
day20 stores them, handed to SDPA as transposed views. GB/s counts Q, K, V, O, dO read once,
dQ, dK, dV written once and the f32 log-sum-exp, as the day does; the days' tables turn
median_ms into TFLOP/s (2.5 times the forward's FLOPs).

FlexAttention's backward (`torch.nn.attention.flex_attention` under torch.compile, Triton
kernels) is timed the same way: its forward compiled for each shape and run once, outside the
timing, with the causal mask as a block mask; each timed call is the autograd.grad above,
which runs the backward kernels AOTAutograd compiled.
"""

import sys

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.functional import scaled_dot_product_attention as sdpa

import _flex
import _peer

# The days whose tables use these figures: run.sh --days runs this script only for them.
DAYS = "day20"

TOKENS, HIDDEN = 16384, 2048

# day20's default problems, then its --sweep (512 to 16384) for both head dims, with and
# without the causal mask: (batch, seqlen, heads, head dim, causal), TOKENS x HIDDEN in all.
PROBLEMS = [
    (TOKENS // seqlen, seqlen, HIDDEN // d, d, causal)
    for seqlen, d, causal in [(4096, 128, False), (4096, 64, False), (4096, 128, True)]
    + [(1 << p, d, causal) for causal in (False, True) for d in (128, 64) for p in range(9, 15)]
]
# Head dim 256: `--head-dim 256` alone (1 x 16384 x 16 heads) and 4 x 4096 x 16 heads.
PROBLEMS += [
    (batch, seqlen, 16, 256, causal)
    for batch, seqlen in [(1, 16384), (4, 4096)]
    for causal in (False, True)
]
BACKENDS = [("sdpa_flash", SDPBackend.FLASH_ATTENTION), ("sdpa_cudnn", SDPBackend.CUDNN_ATTENTION)]


def key_of(problem):
    batch, seqlen, heads, d, causal = problem
    return _peer.attention_key("attention_bwd", batch, heads, heads, d, seqlen, causal)


def figures():
    for key, (batch, seqlen, heads, d, causal) in _peer.distinct(PROBLEMS, key_of):
        gen = torch.Generator(device="cuda").manual_seed(0)

        def rand(lo, hi):
            x = torch.rand(batch, seqlen, heads, d, device="cuda", generator=gen)
            return (x * (hi - lo) + lo).to(torch.bfloat16).requires_grad_()

        q, k, v = rand(-2, 2), rand(-2, 2), rand(-1, 1)
        grad_out = rand(-1, 1).detach().transpose(1, 2)
        nbytes = 8 * q.numel() * 2 + batch * heads * seqlen * 4
        flops = 2.5 * 4 * batch * heads * seqlen * seqlen * d / (2 if causal else 1)
        for name, backend in BACKENDS:
            try:
                with sdpa_kernel(backend):
                    # The forward once, with the graph kept; fails here if the backend refuses.
                    out = sdpa(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=causal)
                    torch.autograd.grad(out, (q, k, v), grad_out, retain_graph=True)
                    run = lambda: torch.autograd.grad(out, (q, k, v), grad_out, retain_graph=True)
                    record = _peer.figure(key, name, run, nbytes, ops=flops)
            except RuntimeError as e:
                print(f"{key:48s} {name}: not available ({str(e).splitlines()[0]})", flush=True)
                continue
            finally:
                out = None
            yield record
        name = _peer.compiled_name("flex_attention backward")

        def make():
            return flex_backward_figure(key, q, k, v, grad_out, causal, nbytes, flops)

        yield from _peer.tried(key, name, make)
        del q, k, v, grad_out


def flex_backward_figure(key, q, k, v, grad_out, causal, nbytes, flops):
    _peer.keep_saved_tensors()
    mask = _flex.causal_block_mask(q.shape[1]) if causal else None
    out = _flex.compiled()(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), block_mask=mask)
    run = lambda: torch.autograd.grad(out, (q, k, v), grad_out, retain_graph=True)  # noqa: E731
    return _peer.compiled_row(key, "flex_attention backward", run, nbytes, ops=flops)


if __name__ == "__main__":
    sys.exit(_peer.main(__doc__, figures))
