"""fused_linear_cross_entropy on the GPU: the loss and the gradients of h and weight against
PyTorch's F.cross_entropy in float64 from the same bfloat16 inputs.

The reference is day 19's (``day19::reference``), written with torch: the
logits ``h W^T`` in float64, rounded to bfloat16 as the kernels store them (straight through:
the gradients are those of the rounded logits' loss), ``F.cross_entropy`` with the same
ignore index and label smoothing, the z-loss ``lse_square_scale * lse^2`` per token, and
autograd for dH and dW. The tolerances are day 19's (its ``tolerance`` module):

- the loss within ``2e-3 + 2e-3 |loss|`` (per counted token, for a sum);
- each gradient element within ``1e-7 + 2^-7 |ref|`` plus ``(4 + chunks) 2^-8`` times the
  sum of its terms' magnitudes (``sum_v m_tv |W_vc|`` for dH, ``sum_t m_tv |H_tc|`` for dW,
  ``m = |dz| + p (1 + 2 zc lse) |z| / N``: dz stored in bf16, a logit rounded to its other
  bf16 neighbour, dW accumulated in bf16 once per chunk); relative L2 error under 1e-2.

Two additions, for what the layer adds to day 19's loop: the backward multiplies each
gradient by the incoming one (and N for a sum) and rounds it to bfloat16 again, half an ulp
more (``3 * 2^-8 |ref|`` rather than ``2^-7``); and dW's bf16 accumulation over many chunks
errs like a random walk, each chunk's sum rounded by up to half an ulp of a partial sum (at
most its terms): dW's relative L2 error may reach ``2^-8 sqrt(3 (4 + chunks))`` times the
terms' norm over dW's (three standard deviations of that walk), where that is over 1e-2.
1.5e-2 was seen on the H100 at 64 chunks of hidden 64, where the terms' norm is a few times
dW's.
"""

import math

import pytest
import torch
import torch.nn.functional as F

from day_kernels import fused_linear_cross_entropy
from day_kernels.loss import default_chunk_size

HALF_ULP = 2.0**-8
IGNORE = -100


def inputs(tokens, hidden, vocab, ignored=0.0, seed=0):
    """Day 19's inputs: h uniform in [-1, 1), W in +-6/sqrt(hidden) (logits of standard
    deviation about 2), labels uniform in [0, vocab), a fraction ``ignored`` of them -100."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    h = (torch.rand(tokens, hidden, device="cuda", generator=g) * 2 - 1).bfloat16()
    scale = 6 / math.sqrt(hidden)
    w = ((torch.rand(vocab, hidden, device="cuda", generator=g) * 2 - 1) * scale).bfloat16()
    labels = torch.randint(0, vocab, (tokens,), device="cuda", generator=g)
    labels[torch.rand(tokens, device="cuda", generator=g) < ignored] = IGNORE
    return h, w, labels


def ours(h, w, labels, upstream=None, **options):
    """The layer's loss and gradients, on copies of h and W that require them."""
    hh, ww = h.clone().requires_grad_(), w.clone().requires_grad_()
    loss = fused_linear_cross_entropy(hh, ww, labels, **options)
    (loss if upstream is None else loss * upstream).backward()
    return loss.detach(), hh.grad, ww.grad


def reference(h, w, labels, reduction="mean", label_smoothing=0.0, lse_square_scale=0.0):
    """Loss, dH, dW in float64, each gradient's terms' magnitudes, and N (labels counted)."""
    vocab = w.shape[0]
    h64 = h.double().requires_grad_()
    w64 = w.double().requires_grad_()
    z = h64 @ w64.T
    zr = z + (z.detach().bfloat16().double() - z.detach())
    zr.retain_grad()
    valid = labels != IGNORE
    n = int(valid.sum())
    ce = F.cross_entropy(zr, labels, ignore_index=IGNORE, label_smoothing=label_smoothing, reduction="none")
    lse = torch.logsumexp(zr, dim=-1)
    total = (ce + lse_square_scale * lse.square() * valid).sum()
    scale = 1.0 / max(n, 1) if reduction == "mean" else 1.0
    loss = total * scale
    loss.backward()
    with torch.no_grad():
        p = torch.softmax(zr, dim=-1)
        m = zr.grad.abs() + p * (1 + 2 * lse_square_scale * lse)[:, None] * zr.abs() * scale
        m = m * valid[:, None]
        dh_terms = m @ w64.abs()
        dw_terms = m.T @ h64.abs()
    return loss.item(), h64.grad, w64.grad, dh_terms, dw_terms, n


def check_grad(name, got, want, terms, chunks, floor, max_rel_l2):
    got = got.double()
    err = (got - want).abs()
    bound = 1e-7 * floor + 3 * HALF_ULP * want.abs() + (4 + chunks) * HALF_ULP * terms
    bad = err > bound
    worst = (err - bound).flatten().argmax()
    assert not bad.any(), (
        f"{name}: {int(bad.sum())} of {bad.numel()} elements out of tolerance; worst at flat "
        f"index {int(worst)}: got {got.flatten()[worst].item():.6g}, want "
        f"{want.flatten()[worst].item():.6g}, bound {bound.flatten()[worst].item():.3g}"
    )
    rel_l2 = ((got - want).norm() / want.norm().clamp_min(1e-30)).item()
    assert rel_l2 <= max_rel_l2, f"{name}: relative L2 error {rel_l2:.3g} over {max_rel_l2:.3g}"


def run_and_check(tokens, hidden, vocab, ignored, reduction, smoothing, z_loss, chunk, seed=0):
    h, w, labels = inputs(tokens, hidden, vocab, ignored, seed)
    options = dict(reduction=reduction, label_smoothing=smoothing, lse_square_scale=z_loss, chunk_size=chunk)
    loss, dh, dw = ours(h, w, labels, **options)
    assert loss.dtype == torch.float32 and loss.shape == ()
    assert dh.shape == h.shape and dw.shape == w.shape
    want, want_dh, want_dw, dh_terms, dw_terms, n = reference(h, w, labels, reduction, smoothing, z_loss)
    assert n > 0, "every case counts at least one token"
    per = n if reduction == "sum" else 1  # the loss and gradients of a sum are N times the mean's
    assert abs(loss.item() - want) <= 2e-3 * per + 2e-3 * abs(want), (
        f"loss {loss.item():.7g}, reference {want:.7g}"
    )
    chunks = math.ceil(tokens / (chunk or default_chunk_size(tokens, hidden, vocab)))
    check_grad("dH", dh, want_dh, dh_terms, chunks, per, 1e-2)
    walk = HALF_ULP * math.sqrt(3 * (4 + chunks)) * (dw_terms.norm() / want_dw.norm()).item()
    check_grad("dW", dw, want_dw, dw_terms, chunks, per, max(1e-2, walk))


CASES = [
    # (tokens, hidden, vocab, ignored fraction, reduction, label_smoothing, lse_square_scale,
    #  chunk_size)
    (1, 64, 1000, 0.0, "mean", 0.0, 0.0, None),
    (37, 512, 1000, 0.25, "sum", 0.0, 0.0, None),
    (37, 4096, 32003, 0.0, "mean", 0.0, 0.0, None),
    # The default chunk is 512 here: two chunks, the last of 488.
    (1000, 4096, 32003, 0.1, "sum", 0.0, 0.0, None),
    # A vocabulary of whole 16-byte rows, under 32768: day 19's two_pass row kernel.
    (1000, 512, 32000, 0.1, "mean", 0.1, 1e-4, None),
    # Llama 3's vocabulary in 11 chunks, the last of 40: day 19's cluster_push row kernel.
    (1000, 64, 128256, 0.0, "mean", 0.0, 0.0, 96),
    # Ragged small chunks with every option on.
    (100, 512, 4099, 0.25, "sum", 0.2, 1e-3, 7),
    # 256 chunks: more than any GPU's SMs.
    (8192, 64, 32003, 0.1, "mean", 0.0, 0.0, 32),
    # Many tokens at the default chunk (128: 64 chunks).
    (8192, 64, 32000, 0.0, "sum", 0.0, 0.0, None),
]


@pytest.mark.parametrize("tokens,hidden,vocab,ignored,reduction,smoothing,z_loss,chunk", CASES)
def test_against_torch_in_float64(tokens, hidden, vocab, ignored, reduction, smoothing, z_loss, chunk):
    run_and_check(tokens, hidden, vocab, ignored, reduction, smoothing, z_loss, chunk)


def test_h_of_any_leading_shape_with_labels_of_that_shape():
    h, w, labels = inputs(2 * 50, 64, 1000, 0.1, seed=1)
    flat = ours(h, w, labels)
    shaped = ours(h.view(2, 50, 64), w, labels.view(2, 50))
    assert shaped[1].shape == (2, 50, 64)
    assert torch.equal(flat[0], shaped[0])
    assert torch.equal(flat[1], shaped[1].view(100, 64)) and torch.equal(flat[2], shaped[2])


@pytest.mark.parametrize("upstream", [3.0, 1 / 3])
def test_the_incoming_gradient_scales_the_gradients_rounded_once(upstream):
    # The kernels' gradients times the factor in float32, rounded to bfloat16 once: 1/3 is
    # not rounded to bfloat16 first.
    h, w, labels = inputs(64, 128, 1000, 0.1, seed=2)
    _, dh, dw = ours(h, w, labels)
    _, dh3, dw3 = ours(h, w, labels, upstream=upstream)
    factor = torch.tensor(upstream, dtype=torch.float32)
    assert torch.equal(dh3, (dh.float() * factor.cuda()).bfloat16())
    assert torch.equal(dw3, (dw.float() * factor.cuda()).bfloat16())


def test_a_frozen_weight_gets_no_gradient():
    h, w, labels = inputs(37, 64, 1000, seed=3)
    _, dh, _ = ours(h, w, labels)
    hh = h.clone().requires_grad_()
    fused_linear_cross_entropy(hh, w, labels).backward()
    assert w.grad is None
    assert torch.equal(hh.grad, dh)


def test_every_label_ignored_gives_zero_not_nan():
    # torch's mean over no tokens is NaN; day 19's is 0 with zero gradients.
    h, w, labels = inputs(37, 64, 1000, ignored=1.0, seed=4)
    for reduction in ("mean", "sum"):
        loss, dh, dw = ours(h, w, labels, reduction=reduction)
        assert loss.item() == 0.0
        assert not dh.any() and not dw.any()


def test_labels_outside_the_vocabulary_count_as_ignored():
    h, w, labels = inputs(64, 64, 1000, seed=5)
    ignored = labels.clone()
    odd = labels.clone()
    for i, label in [(3, -1), (7, 1000), (11, 2**31 + 5), (12, 2**32 + 5), (20, -(2**40))]:
        ignored[i] = IGNORE
        odd[i] = label  # 2**32 + 5 would be 5 cast to int32 without the clamp
    for reduction in ("mean", "sum"):
        want = ours(h, w, ignored, reduction=reduction)
        got = ours(h, w, odd, reduction=reduction)
        assert all(torch.equal(a, b) for a, b in zip(got, want))


def test_the_same_bits_every_run():
    h, w, labels = inputs(1000, 256, 32003, 0.1, seed=6)
    first = ours(h, w, labels)
    for _ in range(3):
        assert all(torch.equal(a, b) for a, b in zip(ours(h, w, labels), first))


def test_runs_on_the_current_stream():
    # Inputs made on a side stream and used there at once: the kernels and cuBLAS must be
    # ordered after them on that stream (the side stream does not wait for the default one).
    h, w, labels = inputs(1000, 512, 32000, 0.1, seed=7)
    want = ours(h, w, labels)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        h2 = torch.empty_like(h)
        torch.cuda._sleep(50_000_000)  # keep the stream busy, so a launch elsewhere would race
        h2.copy_(h)
        got = ours(h2, w, labels)
    torch.cuda.current_stream().wait_stream(side)
    assert all(torch.equal(a, b) for a, b in zip(got, want))


def test_a_second_backward_through_one_call_is_refused():
    h, w, labels = inputs(16, 64, 1000, seed=8)
    hh = h.clone().requires_grad_()
    loss = fused_linear_cross_entropy(hh, w.clone().requires_grad_(), labels)
    loss.backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="the backward already ran for this call"):
        loss.backward()


def test_no_grad_returns_the_loss_alone():
    h, w, labels = inputs(37, 64, 1000, seed=9)
    want = ours(h, w, labels)[0]
    with torch.no_grad():
        loss = fused_linear_cross_entropy(h, w, labels)
    assert not loss.requires_grad and torch.equal(loss, want)


def test_a_mismatched_device_is_a_value_error():
    h, w, labels = inputs(16, 64, 1000, seed=10)
    with pytest.raises(ValueError, match="labels is on cpu"):
        fused_linear_cross_entropy(h, w, labels.cpu())
