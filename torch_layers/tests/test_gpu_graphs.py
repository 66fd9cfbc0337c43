"""The layers captured in a CUDA graph and replayed.

Each layer's forward and backward is captured alone with ``torch.cuda.graph``, after eager calls
on a side stream (PyTorch's recipe: they make whatever the extension keeps between calls, its
kernels and the attention's scratch, before the capture), then replayed on new values copied into
the captured inputs and compared with an eager call on the same values. The same kernels run on
the same inputs, so the results are the same bits, but for the attention backward's dQ in its
default mode: its blocks add their parts in f32 in whatever order they finish, so the two f32
sums differ in their last bits, and their bf16 roundings may land one bf16 step apart. Those
cases allow each element one step (2^-7 of its value, a bf16 mantissa's last bit at most) plus
twice the f32 sums' own difference, which an element whose parts cancel can show: a few f32
steps of the largest part, allowed as 2^-18 of the largest element (an allowance of that
size, not a proven bound). The deterministic mode, which
adds in a fixed order, must give the same bits.

The loss is captured in PyTorch's default capture mode, which refuses any call that would
allocate or synchronize: its scratch (a chunk of logits, the per-token losses, cuBLAS's
workspace) comes from PyTorch's allocator, which gives a capture memory of the graph's own.

Then the captures that depend on what the extension keeps between calls: an attention captured,
then more problems than its cache of offsets keeps, then replayed; a capture that is an attention
problem's first call, or a layer's first call on a device (each refused with a ValueError); and
a whole training step of a small model, forward and backward, in one graph.

Not here, because it cannot be captured yet: a varlen attention whose sequence starts are a CUDA
tensor, which the layer copies to the host.
"""

import functools
import os
import subprocess
import sys

import pytest
import torch

import day_kernels as dk

# One bf16 step of a value x is at most 2^-7 |x|; the f32 sums' difference, at most 2^-19 of the
# largest element, counts twice (once in each rounding).
BF16_STEP = 2.0**-7
SUM_ORDER = 2.0**-18


def _values(seed, *shape, dtype=torch.bfloat16):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    return torch.randn(*shape, device="cuda", generator=gen).to(dtype)


def _norm_inputs(seed, params):
    rows, cols = 4096, 1024
    return [_values(seed, rows, cols)] + [_values(seed + 10 + i, cols) for i in range(params)]


STARTS = [0, 100, 612, 1000]

# The loss's problem: 4 chunks of 128 tokens, a vocabulary that is a multiple of no tile.
LOSS_TOKENS, LOSS_HIDDEN, LOSS_VOCAB, LOSS_CHUNK = 512, 256, 1000, 128


@functools.cache
def _labels():
    """The same tensor from call to call, as a captured input must be."""
    gen = torch.Generator(device="cuda").manual_seed(7)
    return torch.randint(0, LOSS_VOCAB, (LOSS_TOKENS,), device="cuda", generator=gen)


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
    "attention_causal_deterministic": (
        lambda s: [_values(s + i, 4, 512, 8, 64) for i in range(3)],
        lambda q, k, v: dk.flash_attention(q, k, v, causal=True, deterministic=True),
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
    "fused_linear_cross_entropy": (
        lambda s: [_values(s, LOSS_TOKENS, LOSS_HIDDEN), _values(s + 10, LOSS_VOCAB, LOSS_HIDDEN)],
        lambda h, w: dk.fused_linear_cross_entropy(h, w, _labels(), chunk_size=LOSS_CHUNK),
    ),
}


def _forward_and_backward(layer, inputs):
    """The layer's outputs and the gradients of a weighted sum of them, detached."""
    outs = layer(*inputs)
    outs = outs if isinstance(outs, tuple) else (outs,)
    loss = sum((out.float() * (i + 1)).sum() for i, out in enumerate(outs))
    grads = torch.autograd.grad(loss, inputs)
    return [out.detach() for out in outs] + list(grads)


# The cases whose dQ is added in whatever order the blocks finish.
ORDER_FREE = {"attention", "attention_causal", "attention_varlen_causal"}


def _apart(got, want, name):
    """How many elements differ: at all, or (an order-free case) by more than one bf16 step and
    the sums' order."""
    if name not in ORDER_FREE:
        return int((got != want).sum())
    got, want = got.float(), want.float()
    bound = BF16_STEP * want.abs() + SUM_ORDER * want.abs().max()
    return int(((got - want).abs() > bound).sum())


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
        apart = [_apart(got, want, name) for got, want in zip(captured, eager)]
        assert not any(apart), f"{name}, replay {seed}: elements apart per output {apart}"


def _capture(fn):
    """``fn`` captured with ``torch.cuda.graph`` after PyTorch's warm-up (three eager calls on a
    side stream); returns the graph and what the captured call returned."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = fn()
    return graph, captured


def test_a_captured_attention_outlives_the_cache_of_problems():
    # The cache keeps 8 problems; a captured one must survive 9 new ones, whose offsets would
    # otherwise take its memory: the same batch of 4, so the same sizes of offsets, of other
    # lengths. Its replay must still compute what an eager call does.
    make, layer = CASES["attention_causal_deterministic"]
    inputs = [t.requires_grad_() for t in make(0)]
    graph, captured = _capture(lambda: _forward_and_backward(layer, inputs))
    for seqlen in [64 * i for i in range(1, 12) if 64 * i != 512]:  # 10 new problems
        q, k, v = (_values(20 + i, 4, seqlen, 8, 64) for i in range(3))
        dk.flash_attention(q, k, v, causal=True)
    with torch.no_grad():
        for held, fresh in zip(inputs, make(1)):
            held.copy_(fresh)
    graph.replay()
    eager = _forward_and_backward(layer, inputs)
    torch.cuda.synchronize()
    apart = [int((got != want).sum()) for got, want in zip(captured, eager)]
    assert not any(apart), f"elements apart per output {apart}"


def test_a_capture_must_not_be_an_attention_problems_first_call():
    # A shape no other test runs; a shorter one first, so the kernels are loaded already.
    q, k, v = (_values(30 + i, 5, 77, 8, 64) for i in range(3))
    dk.flash_attention(q[:, :64].contiguous(), k[:, :64].contiguous(), v[:, :64].contiguous())
    graph = torch.cuda.CUDAGraph()
    with pytest.raises(ValueError, match="new inside a CUDA graph capture"):
        with torch.cuda.graph(graph):
            dk.flash_attention(q, k, v)


# Run in a process of its own, where no layer has loaded its kernels yet.
FIRST_CALL_IN_A_CAPTURE = """
import torch, day_kernels as dk
x = torch.randn(64, 128, device="cuda", dtype=torch.bfloat16)
w = torch.ones(128, device="cuda", dtype=torch.bfloat16)
torch.cuda.synchronize()
graph = torch.cuda.CUDAGraph()
try:
    with torch.cuda.graph(graph):
        dk.rms_norm(x, w)
except ValueError as e:
    print("refused:", e)
"""


def test_a_capture_must_not_be_a_layers_first_call_on_a_device():
    out = subprocess.run([sys.executable, "-c", FIRST_CALL_IN_A_CAPTURE], capture_output=True,
                         text=True, env=os.environ, timeout=300)
    assert "refused:" in out.stdout, out.stdout + out.stderr
    assert "first call on this device is inside a CUDA graph capture" in out.stdout


def test_a_whole_training_step_replays_what_an_eager_step_computes():
    # Forward, backward and every layer of the small model in one graph, as Inductor's
    # reduce-overhead captures a step. Replayed on new tokens, it must give the eager step's
    # loss and gradients: the same kernels, but for the attention's dQ, added in whatever order
    # its blocks finish, whose last bits then spread through the gradients before it.
    from tiny_model import TinyModel

    torch.manual_seed(3)
    model = TinyModel(vocab=512, width=256).to(device="cuda", dtype=torch.bfloat16)
    gen = torch.Generator(device="cuda").manual_seed(3)
    batches = [torch.randint(0, 512, (2, 129), device="cuda", generator=gen) for _ in range(3)]
    tokens, labels = batches[0][:, :-1].clone(), batches[0][:, 1:].clone()

    def step():
        loss = model(tokens, labels)
        loss.backward()
        return loss.detach()

    # The gradients' tensors exist before the capture, so the graph adds into them in place.
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    graph, loss = _capture(step)
    for batch in batches[1:]:
        tokens.copy_(batch[:, :-1])
        labels.copy_(batch[:, 1:])
        for p in model.parameters():
            p.grad.zero_()
        graph.replay()
        torch.cuda.synchronize()
        got = loss.clone(), {n: p.grad.clone() for n, p in model.named_parameters()}
        for p in model.parameters():
            p.grad.zero_()
        want = step(), {n: p.grad.clone() for n, p in model.named_parameters()}
        assert torch.isfinite(got[0]) and abs(got[0].item() - want[0].item()) <= 1e-3 * abs(want[0].item())
        for name, w in want[1].items():
            g = got[1][name].float()
            rel = ((g - w.float()).norm() / w.float().norm().clamp_min(1e-30)).item()
            assert rel <= 1e-2, f"{name}'s gradient is {rel:.3g} from the eager step's (relative L2)"
