"""The layers under torch.compile (Inductor) and autocast on the GPU, and the operators'
``torch.library.opcheck`` on CUDA tensors.

A small model of every layer (embedding, RMSNorm, grouped-query causal attention of head dim
64, LayerNorm, a SwiGLU MLP, the fused loss) runs eager and compiled with ``fullgraph=True``,
forward and backward. The compiled model calls the same kernels but Inductor fuses and rounds
the ops between them its own way, so the loss is compared within 1% and each parameter's
gradient by its relative L2 error (5%): a gradient wired to the wrong input is off by its
whole size. ``mode="reduce-overhead"`` captures every operator, attention included, in its CUDA
graphs.
"""

import pytest
import torch

import day_kernels as dk
from tiny_model import TinyModel, step

OPS = dk.ops
LOSS_RTOL = 1e-2
GRAD_REL_L2 = 5e-2


def _model(dtype=torch.bfloat16, ours=True, seed=0):
    torch.manual_seed(seed)
    return TinyModel(ours, vocab=512, width=256).to(device="cuda", dtype=dtype)


def _batch(seed=0, batch=2, seqlen=128, vocab=512):
    g = torch.Generator(device="cuda").manual_seed(seed)
    tokens = torch.randint(0, vocab, (batch, seqlen + 1), device="cuda", generator=g)
    return tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()


def _assert_close(got, want, what):
    (loss, grads), (want_loss, want_grads) = got, want
    assert torch.isfinite(loss), what
    assert abs(loss.item() - want_loss.item()) <= LOSS_RTOL * abs(want_loss.item()), (
        f"{what}: loss {loss.item():.6g} against {want_loss.item():.6g}"
    )
    for name, w in want_grads.items():
        g = grads[name]
        assert g.dtype == w.dtype and g.shape == w.shape, f"{what}: {name}"
        rel = ((g.float() - w.float()).norm() / w.float().norm().clamp_min(1e-30)).item()
        assert rel <= GRAD_REL_L2, f"{what}: {name}'s gradient is {rel:.3g} from the reference (relative L2)"


def test_compiled_whole_with_inductor_matches_eager():
    model = _model()
    tokens, labels = _batch()
    want = step(model, model, tokens, labels)
    compiled = torch.compile(model, fullgraph=True)
    for i in range(2):
        _assert_close(step(model, compiled, tokens, labels), want, f"call {i}")


def test_reduce_overhead_matches_eager_call_after_call():
    # The first call warms up, the second records the CUDA graphs, the third replays them.
    model = _model(seed=1)
    tokens, labels = _batch(seed=1)
    want = step(model, model, tokens, labels)
    compiled = torch.compile(model, fullgraph=True, mode="reduce-overhead")
    for i in range(3):
        _assert_close(step(model, compiled, tokens, labels, mark_step=True), want, f"call {i}")


def test_under_autocast_ours_follow_pytorchs_layers_eager_and_compiled():
    ours, theirs = _model(torch.float32, seed=2), _model(torch.float32, ours=False, seed=2)
    theirs.load_state_dict(ours.state_dict())
    tokens, labels = _batch(seed=2)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        want = step(theirs, theirs, tokens, labels)
        got = step(ours, ours, tokens, labels)
        assert all(g.dtype == torch.float32 for g in got[1].values())
        _assert_close(got, want, "eager, ours against PyTorch's")
        compiled = torch.compile(ours, fullgraph=True)
        _assert_close(step(ours, compiled, tokens, labels), got, "compiled against eager")


def test_under_autocast_the_layers_return_autocasts_dtype_and_the_norms_xs():
    x = torch.randn(64, 256, device="cuda", requires_grad=True)
    w = torch.ones(256, device="cuda", requires_grad=True)
    q = torch.randn(1, 64, 2, 64, device="cuda", requires_grad=True)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        outs = [dk.rms_norm(x, w), dk.layer_norm(x, w, torch.zeros_like(w)), dk.swiglu(x, x),
                dk.flash_attention(q, q, q, causal=True)]
        loss = dk.fused_linear_cross_entropy(x, torch.randn(100, 256, device="cuda"),
                                             torch.randint(0, 100, (64,), device="cuda"))
    # The norms keep x's dtype (float32 here), as PyTorch's do under autocast.
    assert [o.dtype for o in outs] == [torch.float32] * 2 + [torch.bfloat16] * 2
    assert loss.dtype == torch.float32
    (sum(o.float().sum() for o in outs) + loss).backward()
    assert x.grad.dtype == w.grad.dtype == q.grad.dtype == torch.float32


def _cuda(*shape, dtype=torch.bfloat16):
    return torch.randn(*shape, device="cuda").to(dtype)


def _norm_and_swiglu_samples(dtype):
    x, dy, w, b = (_cuda(*shape, dtype=dtype) for shape in ((3, 5, 256), (3, 5, 256), (256,), (256,)))
    return [
        ("rms_norm_forward", (x, w, 1e-6)),
        ("rms_norm_backward", (dy, x, w, 1e-6)),
        ("layer_norm_forward", (x, w, b, 1e-5)),
        ("layer_norm_backward", (dy, x, w, 1e-5)),
        ("swiglu_forward", (x, dy)),
        ("swiglu_backward", (w.expand(3, 5, 256).contiguous(), x, dy)),
    ]


def _attention_samples(head_dim, packed):
    q, k, v = _cuda(2, 100, 4, head_dim), _cuda(2, 130, 2, head_dim), _cuda(2, 130, 2, head_dim)
    if packed:
        args = (q.flatten(0, 1), k.flatten(0, 1), v.flatten(0, 1), [0, 37, 200], [0, 100, 260], False)
    else:
        args = (q, k, v, None, None, True)
    o, lse = OPS.flash_attention_forward(*args)
    # The deterministic backward: opcheck compares its runs to each other.
    return [
        ("flash_attention_forward", args),
        ("flash_attention_backward", (torch.randn_like(o), *args[:3], o, lse, *args[3:], True)),
    ]


def _loss_samples():
    h, w = _cuda(300, 128), _cuda(1000, 128) / 4
    labels = torch.randint(0, 1000, (300,), device="cuda")
    labels[::7] = -100
    return [
        ("fused_linear_cross_entropy", (h, w, labels, -100, 0.1, 1e-4, None)),
        ("fused_linear_cross_entropy", (h, w, labels, -100, 0.0, 0.0, 64)),
    ]


SAMPLES = {
    "norms_and_swiglu_float32": lambda: _norm_and_swiglu_samples(torch.float32),
    "norms_and_swiglu_bfloat16": lambda: _norm_and_swiglu_samples(torch.bfloat16),
    "attention_batched_d64": lambda: _attention_samples(64, packed=False),
    "attention_packed_d64": lambda: _attention_samples(64, packed=True),
    "attention_batched_d128": lambda: _attention_samples(128, packed=False),
    "attention_packed_d128": lambda: _attention_samples(128, packed=True),
    "loss": _loss_samples,
}


@pytest.mark.parametrize("case", list(SAMPLES))
def test_opcheck_on_cuda_tensors(case):
    torch.manual_seed(0)
    for name, args in SAMPLES[case]():
        torch.library.opcheck(getattr(OPS, name).default, args)


# What a CUDA tensor the kernels cannot take meets: the layers leave the checks to their
# operators, whose cheap guard fails and whose full checks say what is wrong, before anything
# is launched.


def _strided(*shape):
    return torch.randn(*reversed(shape), device="cuda").t()


@pytest.mark.parametrize(
    "call, error, what",
    [
        (lambda: dk.rms_norm(_strided(64, 256), _cuda(256, dtype=torch.float32)), ValueError,
         "x is not contiguous"),
        (lambda: dk.rms_norm(_cuda(64, 256), _cuda(255)), ValueError, r"weight has shape \(255,\)"),
        (lambda: dk.layer_norm(_cuda(64, 256), _cuda(256), _cuda(256, dtype=torch.float16)), TypeError,
         "the tensors must share one dtype"),
        (lambda: dk.swiglu(_strided(64, 256), _cuda(64, 256, dtype=torch.float32)), ValueError,
         "gate is not contiguous"),
        (lambda: dk.swiglu(_cuda(64, 256), _cuda(64, 255)), ValueError, "must have one shape"),
        (lambda: dk.flash_attention(_cuda(2, 128, 4, 64), _cuda(2, 128, 3, 64), _cuda(2, 128, 3, 64)),
         ValueError, "4 heads are not a multiple of k's 3"),
        (lambda: OPS.rms_norm_backward(_cuda(64, 128), _cuda(64, 256), _cuda(256), 1e-6), ValueError,
         "dy has shape"),
        (lambda: OPS.swiglu_backward(_cuda(64, 256, dtype=torch.float16), _cuda(64, 256), _cuda(64, 256)),
         TypeError, "dout is float16"),
    ],
)
def test_a_cuda_tensor_the_kernels_cannot_take_gets_the_checks_message(call, error, what):
    with pytest.raises(error, match=what):
        call()
    torch.cuda.synchronize()
