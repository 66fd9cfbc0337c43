"""FlexAttention as the attention peers run it (attention.py, attention_bwd.py): compiled
once with torch.compile, whose cache then holds a kernel per shape, and the causal mask as a
block mask.
"""

import torch

import _peer

_compiled = None


def compiled():
    """`torch.compile(flex_attention)`, made once."""
    global _compiled
    if _compiled is None:
        from torch.nn.attention.flex_attention import flex_attention

        _compiled = _peer.compile_static(flex_attention)
    return _compiled


def causal_block_mask(seqlen):
    """The causal mask of a square problem (query i sees keys 0..=i) as FlexAttention's blocks."""
    from torch.nn.attention.flex_attention import create_block_mask

    return create_block_mask(
        lambda b, h, q_idx, kv_idx: q_idx >= kv_idx, None, None, seqlen, seqlen, device="cuda"
    )
