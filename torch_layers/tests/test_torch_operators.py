"""The layers as PyTorch operators, checked on the CPU (torch, no GPU needed).

For these tests alone, every operator gets a CPU reference (plain torch ops, float32 math)
under the CPU dispatch key, in place of the kernels: what the operators promise can then be
checked without a GPU. ``torch.library.opcheck`` runs on each (the schema against what the
implementation does, the fake implementation against the real outputs, the operator traced
by AOTAutograd with dynamic shapes); each layer's outputs and gradients go through those
references against PyTorch's own layers (so the autograd functions' wiring is what is
tested); a small model of every layer compiles with ``fullgraph=True`` and matches eager; and
autocast hands each layer its dtype. The references leave with the module, so the other
tests see CUDA-only operators again. The kernels themselves are tested on the GPU
(``test_gpu_*.py``; ``test_gpu_compile.py`` compiles with Inductor).
"""

import math

import pytest
import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

import day_kernels as dk
from day_kernels._tensors import autocast, upstream
from tiny_model import TinyModel, step

OPS = dk.ops


# CPU references of the operators: the kernels' math in float32, outputs in the kernels'
# layouts and dtypes.


def _rows(x):
    return x.reshape(-1, x.shape[-1]).float()


def rms_norm_forward(x, weight, eps):
    xf = x.float()
    rstd = torch.rsqrt(xf.square().mean(-1, keepdim=True) + eps)
    return (xf * rstd * weight.float()).to(x.dtype)


def rms_norm_backward(dy, x, weight, eps):
    xf, dyf = _rows(x), _rows(dy)
    rstd = torch.rsqrt(xf.square().mean(-1, keepdim=True) + eps)
    xhat = xf * rstd
    g = dyf * weight.float()
    dx = rstd * (g - xhat * (g * xhat).mean(-1, keepdim=True))
    return dx.reshape(x.shape).to(x.dtype), (dyf * xhat).sum(0).to(x.dtype)


def layer_norm_forward(x, weight, bias, eps):
    xf = x.float()
    mean = xf.mean(-1, keepdim=True)
    rstd = torch.rsqrt((xf - mean).square().mean(-1, keepdim=True) + eps)
    return ((xf - mean) * rstd * weight.float() + bias.float()).to(x.dtype)


def layer_norm_backward(dy, x, weight, eps):
    xf, dyf = _rows(x), _rows(dy)
    mean = xf.mean(-1, keepdim=True)
    rstd = torch.rsqrt((xf - mean).square().mean(-1, keepdim=True) + eps)
    xhat = (xf - mean) * rstd
    g = dyf * weight.float()
    dx = rstd * (g - g.mean(-1, keepdim=True) - xhat * (g * xhat).mean(-1, keepdim=True))
    return dx.reshape(x.shape).to(x.dtype), torch.stack([(dyf * xhat).sum(0), dyf.sum(0)]).to(x.dtype)


def swiglu_forward(gate, up):
    return (F.silu(gate.float()) * up.float()).to(gate.dtype)


def swiglu_backward(dout, gate, up):
    g, u, d = gate.float(), up.float(), dout.float()
    s = torch.sigmoid(g)
    return torch.stack([d * u * s * (1 + g * (1 - s)), d * g * s]).to(gate.dtype)


def _packed(q, k, cu_seqlens_q, cu_seqlens_k):
    """q and k as packed [total, heads, d], with the sequences' starts."""
    if cu_seqlens_q is None:
        (batch, lq), lk = q.shape[:2], k.shape[1]
        return (q.flatten(0, 1), k.flatten(0, 1), [i * lq for i in range(batch + 1)],
                [i * lk for i in range(batch + 1)])
    return q, k, cu_seqlens_q, cu_seqlens_k


def _sequences(q, k, v, cu_seqlens_q, cu_seqlens_k, causal):
    """Per sequence: its query rows, and q, k, v (k and v repeated over each kv head's group)
    as float32 [heads, len, d], with the scores' mask (bottom-right when causal)."""
    qp, kp, cq, ck = _packed(q, k, cu_seqlens_q, cu_seqlens_k)
    vp = v.flatten(0, 1) if cu_seqlens_q is None else v
    group = qp.shape[1] // kp.shape[1]
    for qs, qe, ks, ke in zip(cq, cq[1:], ck, ck[1:]):
        qi = qp[qs:qe].float().transpose(0, 1)
        ki = kp[ks:ke].float().transpose(0, 1).repeat_interleave(group, 0)
        vi = vp[ks:ke].float().transpose(0, 1).repeat_interleave(group, 0)
        i = torch.arange(qe - qs)[:, None]
        j = torch.arange(ke - ks)[None, :]
        masked = (j > i + (ke - ks) - (qe - qs)) if causal else torch.zeros(1, 1, dtype=torch.bool)
        yield slice(qs, qe), slice(ks, ke), qi, ki, vi, masked


def flash_attention_forward(q, k, v, cu_seqlens_q, cu_seqlens_k, causal):
    scale = 1 / math.sqrt(q.shape[-1])
    rows = q.shape[0] * q.shape[1] if cu_seqlens_q is None else q.shape[0]
    o = torch.zeros(rows, q.shape[-2], q.shape[-1])
    lse = torch.zeros(rows, q.shape[-2])
    for rq, _, qi, ki, vi, masked in _sequences(q, k, v, cu_seqlens_q, cu_seqlens_k, causal):
        s = (scale * qi @ ki.transpose(1, 2)).masked_fill(masked, -math.inf)
        lse_i = torch.logsumexp(s, -1)
        p = torch.exp(s - lse_i[..., None]).nan_to_num(0.0)  # a row that sees no key
        o[rq] = (p @ vi).transpose(0, 1)
        lse[rq] = lse_i.transpose(0, 1)
    return o.to(q.dtype).view(q.shape), lse


def flash_attention_backward(dout, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, causal, deterministic):
    """The backward from the saved O and L, as day 20's kernels take them."""
    scale = 1 / math.sqrt(q.shape[-1])
    kv_heads = k.shape[-2]
    dq, dk, dv = (torch.zeros(t.shape).flatten(0, -3) for t in (q, k, v))
    do_p, o_p = dout.flatten(0, -3), out.flatten(0, -3)
    for rq, rk, qi, ki, vi, masked in _sequences(q, k, v, cu_seqlens_q, cu_seqlens_k, causal):
        s = (scale * qi @ ki.transpose(1, 2)).masked_fill(masked, -math.inf)
        p = torch.exp(s - lse[rq].transpose(0, 1)[..., None]).nan_to_num(0.0)
        doi = do_p[rq].float().transpose(0, 1)
        delta = (doi * o_p[rq].float().transpose(0, 1)).sum(-1, keepdim=True)
        ds = p * (doi @ vi.transpose(1, 2) - delta)

        def per_kv(x):  # the query heads of each kv head's group summed
            return x.reshape(kv_heads, -1, *x.shape[1:]).sum(1).transpose(0, 1)

        dq[rq] = (scale * ds @ ki).transpose(0, 1)
        dk[rk] = per_kv(scale * ds.transpose(1, 2) @ qi)
        dv[rk] = per_kv(p.transpose(1, 2) @ doi)
    return torch.cat([dq.flatten(), dk.flatten(), dv.flatten()]).to(q.dtype)


def fused_linear_cross_entropy(h, weight, labels, ignore_index, label_smoothing, lse_square_scale, chunk_size):
    """Day 19's mean loss and the gradients of that mean, ``[dH | dW]``."""
    z = h.float() @ weight.float().T
    vocab = weight.shape[0]
    valid = (labels != ignore_index) & (labels >= 0) & (labels < vocab)
    count = valid.sum().clamp_min(1)
    lse = torch.logsumexp(z, -1)
    target = F.one_hot(labels.clamp(0, vocab - 1), vocab).float()
    per_token = (lse - (1 - label_smoothing) * (z * target).sum(-1) - label_smoothing * z.mean(-1)
                 + lse_square_scale * lse.square())
    dz = (torch.softmax(z, -1) * (1 + 2 * lse_square_scale * lse)[:, None] - label_smoothing / vocab
          - (1 - label_smoothing) * target)
    dz = dz * valid[:, None] / count
    loss = (per_token * valid).sum() / count
    return loss, torch.cat([dz @ weight.float(), dz.T @ h.float()]).to(h.dtype)


REFERENCES = {
    "rms_norm_forward": rms_norm_forward,
    "rms_norm_backward": rms_norm_backward,
    "layer_norm_forward": layer_norm_forward,
    "layer_norm_backward": layer_norm_backward,
    "swiglu_forward": swiglu_forward,
    "swiglu_backward": swiglu_backward,
    "flash_attention_forward": flash_attention_forward,
    "flash_attention_backward": flash_attention_backward,
    "fused_linear_cross_entropy": fused_linear_cross_entropy,
}


@pytest.fixture(scope="module", autouse=True)
def cpu_references():
    with torch.library._scoped_library("day_kernels", "IMPL") as lib:
        for name, fn in REFERENCES.items():
            lib.impl(name, fn, "CPU")
        yield
    torch._dynamo.reset()


def test_every_operator_has_a_cpu_reference_here():
    defined = {name for name in dir(OPS) if isinstance(getattr(OPS, name), torch._ops.OpOverloadPacket)}
    assert defined == set(REFERENCES)


# opcheck: every operator, with arguments of each case it takes.


def _randn(*shape, dtype=torch.float32):
    return torch.randn(*shape).to(dtype)


def _attention_samples():
    bf16, f16 = torch.bfloat16, torch.float16
    q, k, v = _randn(2, 5, 4, 16, dtype=bf16), _randn(2, 7, 2, 16, dtype=bf16), _randn(2, 7, 2, 16, dtype=bf16)
    yield (q, k, v, None, None, True), (_randn(2, 5, 4, 16, dtype=bf16),)
    q, k, v = _randn(9, 4, 16, dtype=f16), _randn(11, 4, 16, dtype=f16), _randn(11, 4, 16, dtype=f16)
    yield (q, k, v, [0, 4, 9], [0, 5, 11], False), (_randn(9, 4, 16, dtype=f16),)


def _samples():
    for dtype in (torch.float32, torch.bfloat16):
        x, dy = _randn(3, 4, 32, dtype=dtype), _randn(3, 4, 32, dtype=dtype)
        w, b = _randn(32, dtype=dtype), _randn(32, dtype=dtype)
        yield "rms_norm_forward", (x, w, 1e-6)
        yield "rms_norm_backward", (dy, x, w, 1e-6)
        yield "layer_norm_forward", (x, w, b, 1e-5)
        yield "layer_norm_backward", (dy, x, w, 1e-5)
        yield "swiglu_forward", (x, dy)
        yield "swiglu_backward", (w.expand(3, 4, 32).contiguous(), x, dy)
    for args, (dout,) in _attention_samples():
        yield "flash_attention_forward", args
        o, lse = flash_attention_forward(*args)
        yield "flash_attention_backward", (dout, *args[:3], o, lse, *args[3:], False)
    h, w = _randn(10, 32, dtype=torch.bfloat16), _randn(50, 32, dtype=torch.bfloat16)
    labels = torch.tensor([3, -100, 49, 0, 7, 7, 60, -1, 12, 2])
    yield "fused_linear_cross_entropy", (h, w, labels, -100, 0.1, 1e-4, None)
    yield "fused_linear_cross_entropy", (h, w, labels, 7, 0.0, 0.0, 4)


@pytest.mark.parametrize("name, args", list(_samples()), ids=lambda a: a if isinstance(a, str) else "")
def test_opcheck(name, args):
    torch.library.opcheck(getattr(OPS, name).default, args)


# The layers' outputs and gradients through the references, against PyTorch's own layers.


def _leaves(*tensors):
    return [t.detach().clone().requires_grad_() for t in tensors]


def _compare(ours, theirs, inputs, atol, rtol, upstream=None):
    """The two functions' outputs, and the gradients of each input, within tolerance."""
    a, b = _leaves(*inputs), _leaves(*inputs)
    out_a, out_b = ours(*a), theirs(*b)
    torch.testing.assert_close(out_a.float(), out_b.float(), atol=atol, rtol=rtol)
    grad = torch.randn_like(out_b) if upstream is None else upstream(out_b)
    out_a.backward(grad.to(out_a.dtype))
    out_b.backward(grad)
    for i, (x, y) in enumerate(zip(a, b)):
        assert x.grad is not None and x.grad.dtype == x.dtype, f"input {i}"
        torch.testing.assert_close(x.grad.float(), y.grad.float(), atol=atol, rtol=rtol, msg=f"input {i}")


def test_rms_norm_against_torch():
    x, w = torch.randn(3, 5, 64), torch.randn(64)
    _compare(lambda x, w: dk.rms_norm(x, w, eps=1e-5), lambda x, w: F.rms_norm(x, (64,), w, 1e-5), (x, w),
             1e-5, 1e-5)


def test_layer_norm_against_torch():
    x, w, b = torch.randn(3, 5, 64) * 3 + 1, torch.randn(64), torch.randn(64)
    _compare(dk.layer_norm, lambda x, w, b: F.layer_norm(x, (64,), w, b), (x, w, b), 1e-5, 1e-5)


def test_swiglu_against_torch_with_a_broadcast_upstream_gradient():
    gate, up = torch.randn(4, 7, 96), torch.randn(4, 7, 96)
    _compare(dk.swiglu, lambda g, u: F.silu(g) * u, (gate, up), 1e-6, 1e-5,
             upstream=lambda o: torch.ones(()).expand_as(o))


def _sdpa(q, k, v, causal, scale=None):
    """PyTorch's attention in float32 on [batch, seqlen, heads, d] (grouped-query heads)."""
    o = F.scaled_dot_product_attention(
        *(t.float().transpose(1, 2) for t in (q, k, v)), is_causal=causal, scale=scale, enable_gqa=True
    )
    return o.transpose(1, 2)


BF16 = dict(atol=2e-2, rtol=2e-2)


@pytest.mark.parametrize("causal", [False, True])
def test_flash_attention_batched_with_grouped_heads_against_sdpa(causal):
    q, k, v = torch.randn(2, 33, 4, 32), torch.randn(2, 33, 2, 32), torch.randn(2, 33, 2, 32)
    inputs = [t.bfloat16() for t in (q, k, v)]
    _compare(lambda q, k, v: dk.flash_attention(q, k, v, causal=causal),
             lambda q, k, v: _sdpa(q, k, v, causal), inputs, **BF16)


def test_flash_attention_with_a_scale_of_ones_own_against_sdpa():
    inputs = [torch.randn(1, 20, 2, 32).bfloat16() for _ in range(3)]
    _compare(lambda q, k, v: dk.flash_attention(q, k, v, scale=0.3),
             lambda q, k, v: _sdpa(q, k, v, False, scale=0.3), inputs, **BF16)


@pytest.mark.parametrize("as_tensor", [False, True])
def test_flash_attention_packed_against_sdpa_per_sequence(as_tensor):
    lengths = [5, 17, 1, 9]
    cu = [0, 5, 22, 23, 32]
    inputs = [torch.randn(32, 4, 32).bfloat16() for _ in range(3)]
    starts = torch.tensor(cu, dtype=torch.int32) if as_tensor else cu

    def theirs(q, k, v):
        return torch.cat([_sdpa(q[a:b][None], k[a:b][None], v[a:b][None], True)[0] for a, b in zip(cu, cu[1:])])

    assert len(lengths) == len(cu) - 1
    _compare(lambda q, k, v: dk.flash_attention(q, k, v, causal=True, cu_seqlens_q=starts, cu_seqlens_k=starts),
             theirs, inputs, **BF16)


def _torch_loss(h, w, labels, reduction="mean", label_smoothing=0.0):
    return F.cross_entropy(h.float() @ w.float().T, labels, ignore_index=-100, reduction=reduction,
                           label_smoothing=label_smoothing)


@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_fused_linear_cross_entropy_against_torch_with_an_upstream_factor(reduction):
    h, w = torch.randn(2, 12, 32).bfloat16(), (torch.randn(100, 32) / 4).bfloat16()
    labels = torch.randint(0, 100, (2, 12))
    labels[0, 3] = labels[1, 7] = -100
    _compare(lambda h, w: dk.fused_linear_cross_entropy(h, w, labels, reduction=reduction, label_smoothing=0.1),
             lambda h, w: _torch_loss(h.flatten(0, 1), w, labels.flatten(), reduction, 0.1),
             (h, w), atol=1e-2, rtol=1e-2, upstream=lambda o: torch.tensor(1 / 3))


def test_fused_linear_cross_entropy_refuses_a_second_backward_through_one_call():
    h, w = _leaves(torch.randn(8, 32).bfloat16(), torch.randn(50, 32).bfloat16())
    loss = dk.fused_linear_cross_entropy(h, w, torch.randint(0, 50, (8,)))
    loss.backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="the backward already ran for this call"):
        loss.backward()


def test_a_frozen_weight_gets_no_gradient():
    h = _leaves(torch.randn(8, 32).bfloat16())[0]
    w = torch.randn(50, 32).bfloat16()
    dk.fused_linear_cross_entropy(h, w, torch.randint(0, 50, (8,))).backward()
    assert w.grad is None and h.grad is not None


# torch.compile: a small model of every layer, traced whole.


def _compiled_matches_eager(model, args, autocast_dtype=None):
    """The compiled model's loss and gradients against eager's: the same operators run in
    both, so they match to the last bit but where autocast's casts are placed differently in
    the traced graph (bfloat16's rounding then)."""
    compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
    enabled = autocast_dtype is not None
    with torch.autocast("cpu", dtype=autocast_dtype or torch.bfloat16, enabled=enabled):
        want = step(model, model, *args)
        for _ in range(2):  # the second call runs the compiled graph without tracing
            got = step(model, compiled, *args)
    tol = {} if autocast_dtype is None else dict(atol=1e-3, rtol=1.6e-2)
    torch.testing.assert_close(got[0], want[0], **tol)
    for name in want[1]:
        torch.testing.assert_close(got[1][name], want[1][name], msg=name, **tol)
    return want


def test_a_bfloat16_model_compiles_whole_and_matches_eager():
    torch.manual_seed(0)
    model = TinyModel().bfloat16()
    tokens = torch.randint(0, 64, (2, 16))
    _compiled_matches_eager(model, (tokens, tokens.roll(-1, 1)))


def test_a_float32_model_under_autocast_compiles_whole_and_matches_eager():
    torch.manual_seed(1)
    model = TinyModel()
    tokens = torch.randint(0, 64, (2, 16))
    loss, grads = _compiled_matches_eager(model, (tokens, tokens.roll(-1, 1)), torch.bfloat16)
    assert loss.dtype == torch.float32
    assert all(g.dtype == torch.float32 for g in grads.values())


def test_the_traced_graphs_call_the_operators_forward_and_backward():
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd

    graphs = []

    def record(gm, example_inputs):
        graphs.append({str(n.target) for n in gm.graph.nodes if n.op == "call_function"})
        return make_boxed_func(gm)

    torch.manual_seed(3)
    model = TinyModel().bfloat16()
    tokens = torch.randint(0, 64, (2, 16))
    compiled = torch.compile(model, fullgraph=True, backend=aot_autograd(fw_compiler=record, bw_compiler=record))
    compiled(tokens, tokens.roll(-1, 1)).backward()
    forward, backward = graphs
    assert {"day_kernels.rms_norm_forward.default", "day_kernels.flash_attention_forward.default",
            "day_kernels.layer_norm_forward.default", "day_kernels.swiglu_forward.default",
            "day_kernels.fused_linear_cross_entropy.default"} <= forward
    assert {"day_kernels.rms_norm_backward.default", "day_kernels.flash_attention_backward.default",
            "day_kernels.layer_norm_backward.default", "day_kernels.swiglu_backward.default"} <= backward


def test_packed_sequences_compile_with_their_starts_as_a_list():
    torch.manual_seed(2)
    model = TinyModel().bfloat16()
    tokens = torch.randint(0, 64, (24,))
    for cu in ([0, 10, 24], [0, 3, 20, 24], [0, 7, 24]):
        _compiled_matches_eager(model, (tokens, tokens.roll(-1, 0), cu))


def test_a_bad_argument_is_refused_while_tracing(monkeypatch):
    # As on the GPU, where the layer leaves its checks to the operator: the refusal comes from
    # the fake implementation, which the trace runs.
    monkeypatch.setattr(dk.norm, "on_cuda", lambda *tensors: True)
    fn = torch.compile(lambda x, w: dk.rms_norm(x, w), fullgraph=True, backend="aot_eager")
    with pytest.raises(Exception, match=r"weight has shape \(63,\); it must be \(64,\)"):
        fn(torch.randn(4, 64), torch.randn(63))


def test_a_changing_eps_compiles_whole():
    # A float argument that changes between calls becomes symbolic: the checks compare it.
    fn = torch.compile(lambda x, w, eps: dk.rms_norm(x, w, eps), fullgraph=True, backend="aot_eager")
    x, w = torch.randn(4, 64), torch.randn(64)
    for eps in (1e-6, 1e-5, 1e-4):
        torch.testing.assert_close(fn(x, w, eps), F.rms_norm(x, (64,), w, eps), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(
    "layer, home, args",
    [
        ("rms_norm", "norm", lambda m: (m(64, 4).t(), m(64))),
        ("layer_norm", "norm", lambda m: (m(64, 4).t(), m(64), m(64))),
        ("swiglu", "activation", lambda m: (m(64, 4).t(), m(4, 64))),
    ],
)
def test_the_operators_refuse_a_strided_tensor_the_layers_pass_them(monkeypatch, layer, home, args):
    # The path a CUDA tensor takes: the layer makes no checks of its own, and the operator's
    # (here its fake implementation, on the meta device) refuses the tensor.
    monkeypatch.setattr(getattr(dk, home), "on_cuda", lambda *tensors: True)

    def meta(*shape):
        return torch.empty(*shape, device="meta")

    with pytest.raises(ValueError, match="is not contiguous"):
        getattr(dk, layer)(*args(meta))


@pytest.mark.parametrize("layer", ["flash_attention", "fused_linear_cross_entropy"])
def test_no_layer_is_differentiable_twice(layer):
    # The kernels have no backward of their own: asking for one is an error, not zeros.
    if layer == "flash_attention":
        q, k, v = _leaves(*(torch.randn(1, 8, 2, 32).bfloat16() for _ in range(3)))
        out, inputs = dk.flash_attention(q, k, v).float().square().sum(), (q,)
    else:
        h, w = _leaves(torch.randn(8, 32).bfloat16(), torch.randn(50, 32).bfloat16())
        out, inputs = dk.fused_linear_cross_entropy(h, w, torch.randint(0, 50, (8,))), (h,)
    (g,) = torch.autograd.grad(out, inputs, create_graph=True)
    with pytest.raises(RuntimeError):
        torch.autograd.grad(g.float().sum(), inputs)


# What a layer asks of PyTorch besides its kernels. Each call dispatched from Python costs the
# host 5-10 us on the GPU host, and a step calls the layers dozens of times (README, "Where the
# step goes"): a layer dispatches its operators and the views that take their outputs apart,
# nothing else. Autograd's own calls (`aten.detach`, as it stores a gradient) are left out. A
# dispatch mode does not see `.to` or `.contiguous` on a tensor they would not change (they
# return it before dispatching); that those are not called at all is asked below.


class _Dispatched(TorchDispatchMode):
    """The ops dispatched while it is on, by name (an operator's own inner calls are not seen)."""

    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = str(func.overloadpacket)
        if name != "aten.detach":
            self.ops.append(name)
        return func(*args, **(kwargs or {}))


_LABELS = torch.randint(0, 50, (8,))
_CALLS = {
    "rms_norm": (
        lambda x, w: dk.rms_norm(x, w), ((4, 64), (64,)),
        ["day_kernels.rms_norm_forward"], ["day_kernels.rms_norm_backward"],
    ),
    "layer_norm": (
        lambda x, w, b: dk.layer_norm(x, w, b), ((4, 64), (64,), (64,)),
        ["day_kernels.layer_norm_forward"], ["day_kernels.layer_norm_backward", "aten.unbind"],
    ),
    "swiglu": (
        lambda g, u: dk.swiglu(g, u), ((4, 64), (4, 64)),
        ["day_kernels.swiglu_forward"], ["day_kernels.swiglu_backward", "aten.unbind"],
    ),
    "flash_attention": (
        lambda q, k, v: dk.flash_attention(q, k, v, causal=True), ((1, 8, 2, 32),) * 3,
        ["day_kernels.flash_attention_forward"],
        ["day_kernels.flash_attention_backward", "aten.split_with_sizes"] + ["aten.view"] * 3,
    ),
    # Once a step: the views of h and the labels, the gradients scaled in place, and dH viewed
    # back through the view of h.
    "fused_linear_cross_entropy": (
        lambda h, w: dk.fused_linear_cross_entropy(h, w, _LABELS), ((8, 32), (50, 32)),
        ["aten.view", "aten.view", "day_kernels.fused_linear_cross_entropy"],
        ["aten.view", "aten.slice", "aten.mul_", "aten.slice", "aten.mul_", "aten.view"],
    ),
}


@pytest.mark.parametrize("layer", _CALLS)
def test_a_layer_calls_its_operators_and_views_only(layer):
    fn, shapes, forward, backward = _CALLS[layer]
    inputs = _leaves(*(torch.randn(*s).bfloat16() for s in shapes))
    upstream = torch.ones_like(fn(*inputs))
    with _Dispatched() as calls:
        out = fn(*inputs)
        made = len(calls.ops)
        out.backward(upstream)
    assert calls.ops[:made] == forward
    assert calls.ops[made:] == backward


class _Called(TorchFunctionMode):
    """The names of the torch functions and tensor methods called while it is on."""

    def __init__(self):
        super().__init__()
        self.names = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.names.append(getattr(func, "__name__", str(func)))
        return func(*args, **(kwargs or {}))


def test_a_gradient_or_a_cast_that_would_change_nothing_is_not_called():
    # Under autocast, with inputs already of its dtype, the layers' forward calls no `.to`;
    # an upstream gradient already of x's dtype and contiguous gets no `.to` or `.contiguous`
    # (the backward's own calls run in autograd's engine, out of the mode's sight, so
    # `upstream` is asked directly).
    x, w, g, u = (torch.randn(*s).bfloat16() for s in ((4, 64), (64,), (4, 64), (4, 64)))
    with torch.autocast("cpu", dtype=torch.bfloat16), _Called() as called:
        dk.rms_norm(x, w)
        dk.swiglu(g, u)
        assert upstream(x, x) is x
    assert called.names and "to" not in called.names and "contiguous" not in called.names
    # Where they would change something, they are made.
    dy = torch.randn(64, 4).bfloat16().t()
    assert upstream(dy, x).is_contiguous() and upstream(dy.float(), x).dtype is torch.bfloat16
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert autocast(x.float())[0].dtype is torch.bfloat16


# The operators' fake implementations: shapes without running anything, and the checks.


def test_the_layers_run_on_the_meta_device():
    q = torch.empty(2, 128, 8, 64, dtype=torch.bfloat16, device="meta", requires_grad=True)
    o = dk.flash_attention(q, q, q, causal=True)
    assert o.shape == q.shape and o.device.type == "meta"
    x = torch.empty(5, 256, device="meta")
    assert dk.rms_norm(x, torch.empty(256, device="meta")).shape == x.shape


@pytest.mark.parametrize(
    "call, error, what",
    [
        (lambda m: OPS.rms_norm_forward(m(4, 64), m(63), 1e-6), ValueError, r"weight has shape \(63,\)"),
        (lambda m: OPS.rms_norm_backward(m(4, 64).half(), m(4, 64), m(64), 1e-6), TypeError,
         "dy is float16; it must be float32, as x is"),
        (lambda m: OPS.swiglu_forward(m(4, 64).double(), m(4, 64).double()), TypeError, "gate is float64"),
        (lambda m: OPS.flash_attention_forward(m(9, 4, 64).bfloat16(), *[m(9, 4, 64).bfloat16()] * 2,
                                               [0, 4, 8], [0, 4, 9], False),
         ValueError, "cu_seqlens_q ends at 8 but the tensor holds 9 tokens"),
        (lambda m: OPS.fused_linear_cross_entropy(m(8, 64).bfloat16(), m(100, 64).bfloat16(),
                                                  m(8).long(), -100, 1.5, 0.0, None),
         ValueError, r"label_smoothing must be in \[0, 1\]"),
    ],
)
def test_the_fake_implementations_refuse_what_the_kernels_would(call, error, what):
    def meta(*shape):
        return torch.empty(*shape, device="meta")

    with pytest.raises(error, match=what):
        call(meta)


# Autocast: each layer takes autocast's dtype, but a norm keeps x's; the loss computes in bfloat16
# whatever it is.


def test_under_autocast_each_layer_takes_its_dtype_and_gradients_keep_theirs():
    x, w, b = _leaves(torch.randn(4, 64), torch.ones(64), torch.zeros(64))
    q, k, v = _leaves(*(torch.randn(1, 8, 2, 32) for _ in range(3)))
    xb = _leaves(torch.randn(4, 64).bfloat16())[0]
    with torch.autocast("cpu", dtype=torch.bfloat16):
        outs = [dk.swiglu(x, x), dk.flash_attention(q, k, v)]
        # The norms keep x's dtype (a float32 x stays float32, as with PyTorch's); the
        # weights follow x.
        norms = [dk.rms_norm(x, w), dk.layer_norm(x, w, b), dk.rms_norm(xb, w), dk.layer_norm(xb, w, b)]
    assert [o.dtype for o in outs] == [torch.bfloat16] * 2
    assert [o.dtype for o in norms] == [torch.float32] * 2 + [torch.bfloat16] * 2
    sum(o.float().sum() for o in outs + norms).backward()
    assert all(t.grad.dtype == torch.float32 for t in (x, w, b, q, k, v))
    assert xb.grad.dtype == torch.bfloat16


def test_the_loss_computes_in_bfloat16_under_any_autocast():
    h, w = _leaves(torch.randn(8, 32), torch.randn(50, 32))
    labels = torch.randint(0, 50, (8,))
    with torch.autocast("cpu", dtype=torch.float16):
        loss = dk.fused_linear_cross_entropy(h, w, labels)
    loss.backward()
    want = _torch_loss(h.detach().bfloat16(), w.detach().bfloat16(), labels)
    torch.testing.assert_close(loss, want, atol=1e-2, rtol=1e-2)
    assert h.grad.dtype == w.grad.dtype == torch.float32


def test_without_autocast_a_float32_loss_is_still_refused():
    with pytest.raises(TypeError, match="h is float32; it must be bfloat16"):
        dk.fused_linear_cross_entropy(torch.randn(8, 32), torch.randn(50, 32), torch.zeros(8, dtype=torch.int64))


def test_autocast_leaves_float64_to_the_checks():
    with torch.autocast("cpu", dtype=torch.bfloat16):
        with pytest.raises(TypeError, match="x is float64; it must be bfloat16 or float16 or float32"):
            dk.rms_norm(torch.randn(4, 64, dtype=torch.float64), torch.ones(64, dtype=torch.float64))
