"""PyTorch's scaled_dot_product_attention on the problems of day 10, timed on the same GPU,
with the FlashAttention-2 backend and the cuDNN backend separately.

    python3 peers/attention.py --out peers_attention.json

Writes {"torch": version, "device": name, "figures": [{key, peer, median_ms, gb_per_s}]},
keys as day10's reports name its problems (attention/bf16/b4-h16-kv16-d128-q4096-k4096, with
-causal for the causal mask). Inputs are [batch, seqlen, heads, head_dim] as day10 stores them,
handed to SDPA as transposed views ([batch, heads, seqlen, head_dim]), which both backends take
without a copy. Times with triton.testing.do_bench (median). GB/s counts Q, K, V and O once
and the f32 log-sum-exp, as the day does; the days' tables turn median_ms into TFLOP/s.

FlexAttention (`torch.nn.attention.flex_attention`, Triton kernels that torch.compile writes)
runs the same problems from the same transposed views: compiled for each shape outside the
timing, the causal mask as a block mask (made outside the timing too, as a model makes it
once per shape), grouped-query heads with `enable_gqa`.
"""

import sys

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.functional import scaled_dot_product_attention as sdpa

import _flex
import _peer

# The days whose tables use these figures: run.sh --days runs this script only for them.
DAYS = "day10"

TOKENS, HIDDEN = 16384, 2048

# day10's default problems, then its --sweep (512 to 16384) for both head dims, with and
# without the causal mask: (batch, heads, kv heads, seqlen, head dim, causal), 16384 tokens,
# hidden 2048.
PROBLEMS = [
    (TOKENS // seqlen, HIDDEN // d, HIDDEN // d, seqlen, d, causal)
    for seqlen, d, causal in [(4096, 128, False), (4096, 64, False), (4096, 128, True)]
    + [(1 << p, d, causal) for causal in (False, True) for d in (128, 64) for p in range(9, 15)]
]
# day10's prefill problem as a server runs it: one sequence of 8192, 32 query heads sharing 8
# K/V heads (grouped-query), hd128, causal.
PROBLEMS += [(1, 32, 8, 8192, 128, True)]
# day10's `--head-dim 256` (alone, and with --causal): batch 1 x 16 heads x seqlen 16384
# (FlashAttention-3's published hd256 point).
PROBLEMS += [(1, 16, 16, 16384, 256, causal) for causal in (False, True)]
BACKENDS = [("sdpa_flash", SDPBackend.FLASH_ATTENTION), ("sdpa_cudnn", SDPBackend.CUDNN_ATTENTION)]


def key_of(problem):
    batch, heads, kv_heads, seqlen, d, causal = problem
    return _peer.attention_key("attention", batch, heads, kv_heads, d, seqlen, causal)


def figures():
    for key, (batch, heads, kv_heads, seqlen, d, causal) in _peer.distinct(PROBLEMS, key_of):
        gen = torch.Generator(device="cuda").manual_seed(0)

        def rand(h, lo, hi):
            x = torch.rand(batch, seqlen, h, d, device="cuda", generator=gen)
            return (x * (hi - lo) + lo).to(torch.bfloat16).transpose(1, 2)

        q, k, v = rand(heads, -2, 2), rand(kv_heads, -2, 2), rand(kv_heads, -1, 1)
        nbytes = 2 * (q.numel() + k.numel()) * 2 + batch * heads * seqlen * 4
        for name, backend in BACKENDS:
            record = timed(key, name, backend, q, k, v, causal, heads // kv_heads, nbytes)
            if record:
                yield record
        name = _peer.compiled_name("flex_attention")
        make = lambda: flex_figure(key, q, k, v, causal, heads != kv_heads, nbytes)  # noqa: E731
        yield from _peer.tried(key, name, make)
        del q, k, v


def flex_figure(key, q, k, v, causal, gqa, nbytes):
    flex = _flex.compiled()
    mask = _flex.causal_block_mask(q.shape[2]) if causal else None
    run = lambda: flex(q, k, v, block_mask=mask, enable_gqa=gqa)  # noqa: E731
    return _peer.compiled_row(key, "flex_attention", run, nbytes)


def timed(key, name, backend, q, k, v, causal, group, nbytes):
    """One backend's record, or None where it refuses the problem. Grouped-query heads go to
    SDPA as they are (enable_gqa, no copy of K and V); a backend that refuses that gets K and
    V repeated to every query head, outside the timing, as a user would have to."""
    tries = [({"enable_gqa": True}, k, v)] if group > 1 else []
    if group > 1:
        tries.append(({}, k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)))
    else:
        tries.append(({}, k, v))
    for extra, kk, vv in tries:
        try:
            with sdpa_kernel(backend):
                sdpa(q, kk, vv, is_causal=causal, **extra)  # fails here if the backend refuses
                run = lambda: sdpa(q, kk, vv, is_causal=causal, **extra)
                return _peer.figure(key, name, run, nbytes)
        except RuntimeError as e:
            reason = str(e).splitlines()[0]
    print(f"{key:48s} {name}: not available ({reason})", flush=True)
    return None


if __name__ == "__main__":
    sys.exit(_peer.main(__doc__, figures))
