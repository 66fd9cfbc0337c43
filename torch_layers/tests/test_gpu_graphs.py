"""The layers captured in a CUDA graph and replayed.

Each layer's forward and backward is captured alone with ``torch.cuda.graph``, after eager calls
on a side stream (PyTorch's recipe: they make whatever the extension keeps between calls, its
kernels and the attention's scratch, before the capture), then replayed on new values copied into
the captured inputs and compared with an eager call on the same values. The same kernels run on
the same inputs, so the results agree exactly, but for the attention backward's dQ, which its
blocks add in whatever order they finish (within 1e-5 relative L2).

Not here, because they cannot be captured yet: the loss, whose cuBLAS handle and plan are made
per stream on first use, inside the capture when the graph has a stream of its own (PyTorch's
default capture mode refuses what that does); and a varlen attention whose sequence starts are a
CUDA tensor, which the layer copies to the host.
"""

import pytest
import torch

import day_kernels as dk

REL_L2 = 1e-5


def _values(seed, *shape, dtype=torch.bfloat16):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    return torch.randn(*shape, device="cuda", generator=gen).to(dtype)


def _norm_inputs(seed, params):
    rows, cols = 4096, 1024
    return [_values(seed, rows, cols)] + [_values(seed + 10 + i, cols) for i in range(params)]


STARTS = [0, 100, 612, 1000]

# name: (inputs for a seed, the layer on them)
CASES = {
    "rms_norm": (lambda s: _norm_inputs(s, 1), lambda x, w: dk.rms_norm(x, w)),
    "layer_norm": (lambda s: _norm_inputs(s, 2), lambda x, w, b: dk.layer_norm(x, w, b)),
    "swiglu": (
        lambda s: [_values(s, 4096, 1024), _values(s + 10, 4096, 1024)],
        lambda gate, up: dk.swiglu(gate, up),
    ),
    "attention": (
        lambda s: [_values(s + i, 4, 512, 8, 64) for i in range(3)],
        lambda q, k, v: dk.flash_attention(q, k, v),
    ),
    "attention_causal": (
        lambda s: [_values(s + i, 4, 512, 8, 64) for i in range(3)],
        lambda q, k, v: dk.flash_attention(q, k, v, causal=True),
    ),
    "attention_varlen_causal": (
        lambda s: [_values(s + i, STARTS[-1], 8, 64) for i in range(3)],
        lambda q, k, v: dk.flash_attention(
            q, k, v, causal=True, cu_seqlens_q=STARTS, cu_seqlens_k=STARTS
        ),
    ),
}


def _forward_and_backward(layer, inputs):
    """The layer's outputs and the gradients of a weighted sum of them, detached."""
    outs = layer(*inputs)
    outs = outs if isinstance(outs, tuple) else (outs,)
    loss = sum((out.float() * (i + 1)).sum() for i, out in enumerate(outs))
    grads = torch.autograd.grad(loss, inputs)
    return [out.detach() for out in outs] + list(grads)


def _rel_l2(got, want):
    return ((got.float() - want.float()).norm() / want.float().norm().clamp_min(1e-30)).item()


@pytest.mark.parametrize("name", list(CASES))
def test_a_captured_layer_replays_what_an_eager_call_computes(name):
    make, layer = CASES[name]
    inputs = [t.requires_grad_() for t in make(0)]
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            _forward_and_backward(layer, inputs)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = _forward_and_backward(layer, inputs)
    for seed in (1, 2):
        with torch.no_grad():
            for held, fresh in zip(inputs, make(seed)):
                held.copy_(fresh)
        graph.replay()
        eager = _forward_and_backward(layer, inputs)
        torch.cuda.synchronize()
        errors = [_rel_l2(got, want) for got, want in zip(captured, eager)]
        assert max(errors) <= REL_L2, f"{name}, replay {seed}: relative L2 errors {errors}"
