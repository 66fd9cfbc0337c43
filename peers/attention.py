"""PyTorch's scaled_dot_product_attention on the problems of day 10, timed on the same GPU,
with the FlashAttention-2 backend and the cuDNN backend separately.

    python3 peers/attention.py --out peers_attention.json

Writes {"torch": version, "device": name, "figures": [{key, peer, median_ms, gb_per_s}]},
keys as day10's reports name its problems (attention/bf16/b4-h16-kv16-d128-q4096-k4096, with
-causal for the causal mask). Inputs are [batch, seqlen, heads, head_dim] as day10 stores them,
handed to SDPA as transposed views ([batch, heads, seqlen, head_dim]), which both backends take
without a copy. Times with triton.testing.do_bench (median). GB/s counts Q, K, V and O once
and the f32 log-sum-exp, as the day does; the days' tables turn median_ms into TFLOP/s.
"""

import sys

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.functional import scaled_dot_product_attention as sdpa

import _peer

# The days whose tables use these figures: run.sh --days runs this script only for them.
DAYS = "day10"

TOKENS, HIDDEN = 16384, 2048

# day10's default problems, then its --sweep (512 to 16384) for both head dims, with and
# without the causal mask: (batch, heads, seqlen, head dim, causal), 16384 tokens, hidden 2048.
PROBLEMS = [
    (TOKENS // seqlen, HIDDEN // d, seqlen, d, causal)
    for seqlen, d, causal in [(4096, 128, False), (4096, 64, False), (4096, 128, True)]
    + [(1 << p, d, causal) for causal in (False, True) for d in (128, 64) for p in range(9, 15)]
]
# day10's `--head-dim 256` (alone, and with --causal): batch 1 x 16 heads x seqlen 16384, the
# issue's hd256 target (FlashAttention-3's published hd256 point).
PROBLEMS += [(1, 16, 16384, 256, causal) for causal in (False, True)]
BACKENDS = [("sdpa_flash", SDPBackend.FLASH_ATTENTION), ("sdpa_cudnn", SDPBackend.CUDNN_ATTENTION)]


def figures():
    seen = set()
    for batch, heads, seqlen, d, causal in PROBLEMS:
        key = f"attention/bf16/b{batch}-h{heads}-kv{heads}-d{d}-q{seqlen}-k{seqlen}"
        key += "-causal" if causal else ""
        if key in seen:
            continue
        seen.add(key)
        gen = torch.Generator(device="cuda").manual_seed(0)

        def rand(lo, hi):
            x = torch.rand(batch, seqlen, heads, d, device="cuda", generator=gen)
            return (x * (hi - lo) + lo).to(torch.bfloat16).transpose(1, 2)

        q, k, v = rand(-2, 2), rand(-2, 2), rand(-1, 1)
        nbytes = 4 * q.numel() * 2 + batch * heads * seqlen * 4
        for name, backend in BACKENDS:
            try:
                with sdpa_kernel(backend):
                    sdpa(q, k, v, is_causal=causal)  # fails here if the backend refuses
                    run = lambda: sdpa(q, k, v, is_causal=causal)
                    record = _peer.figure(key, name, run, nbytes)
            except RuntimeError as e:
                print(f"{key:48s} {name}: not available ({str(e).splitlines()[0]})", flush=True)
                continue
            yield record
        del q, k, v


if __name__ == "__main__":
    sys.exit(_peer.main(__doc__, figures))
