"""Day 19: the fused linear + cross-entropy (`logits = H W^T`, the mean loss over tokens whose
target is not -100, with label smoothing and z-loss; the output is dH then dW, bf16), and
cross-entropy alone on given bf16 logits (the output is dlogits). The formulas are
day19_fused_linear_cross_entropy/src/reference.rs's, which are torch's (plus the z-loss term
`z * lse^2` per token)."""

import math

from compare import UNIT_ROUNDOFF, Expectation, Part, bound_from
from problem import Problem, flags

IGNORE_INDEX = -100
BF16 = UNIT_ROUNDOFF["bf16"]
FUSED = ("naive", "chunked_cublas", "chunked_day18")
CE_ONLY = ("two_pass", "cluster8", "cluster_stream", "cluster_push")


def problem(label, which, tokens, hidden, vocab, chunk=None, label_smoothing=0.0, z_loss=0.0, ignore_fraction=0.0):
    """`which`: "fused" (the three fused versions) or "ce" (cross-entropy alone); the day runs
    both kinds by default, so `--kernel` picks one kind per run."""
    versions = FUSED if which == "fused" else CE_ONLY
    args = flags(
        tokens=tokens, hidden=hidden, vocab=vocab, chunk=chunk, label_smoothing=label_smoothing,
        z_loss=z_loss, ignore_fraction=ignore_fraction, kernel=versions,
    )
    params = {
        "tokens": tokens, "hidden": hidden, "vocab": vocab, "label_smoothing": label_smoothing,
        "z_loss": z_loss, "chunks": math.ceil(tokens / min(chunk or tokens, tokens)),
    }
    return Problem(label, args, check_fused if which == "fused" else check_ce, params)


def loss_of(tc, lf, targets, label_smoothing, z_loss):
    """The mean loss of f32 logits `lf` (torch's cross-entropy, plus the z-loss), and N."""
    valid = targets != IGNORE_INDEX
    n = valid.sum().clamp(min=1).double()
    ce = tc.F.cross_entropy(
        lf, targets, ignore_index=IGNORE_INDEX, label_smoothing=label_smoothing, reduction="sum"
    )
    lse = tc.torch.logsumexp(lf, dim=-1)
    loss = (ce + z_loss * (lse * lse * valid).sum()) / n
    return loss, n, lse


def check_fused(saved, tc, tokens, hidden, vocab, label_smoothing, z_loss, chunks) -> Expectation:
    torch = tc.torch
    h = tc.tensor(saved.input("h", (tokens, hidden)), "bf16").requires_grad_(True)
    w = tc.tensor(saved.input("w", (vocab, hidden)), "bf16").requires_grad_(True)
    targets = tc.integers(saved.input("targets", (tokens,)))
    # As the kernels do: a bf16 GEMM (f32 sums, one rounding), the loss in f32, dlogits
    # rounded to bf16 (the backward of .float()), two bf16 GEMMs for dH and dW.
    logits = h @ w.T
    lf = logits.float()
    loss, n, lse = loss_of(tc, lf, targets, label_smoothing, z_loss)
    loss.backward()
    with torch.no_grad():
        z = lf
        p = torch.softmax(z, dim=-1)
        valid = (targets != IGNORE_INDEX).float()[:, None]
        hot = torch.nn.functional.one_hot(targets.clamp(min=0), vocab).float() * (1 - label_smoothing)
        dz = (p * (1 + 2 * z_loss * lse[:, None]) - hot - label_smoothing / vocab) * valid / n.float()
        # The size of each gradient element's terms (day 19's reference.rs).
        m = dz.abs() + p * (1 + 2 * z_loss * lse[:, None]).abs() * z.abs() * valid / n.float()
        dh_terms = tc.numpy(m @ w.float().abs())
        dw_terms = tc.numpy(m.T @ h.float().abs())
    # day19's tolerance: bf16 output (2 half ulps) relative to the element, and (4 + chunks)
    # half ulps of the terms for dz stored in bf16, logits rounded to the other neighbour and
    # dW summed in bf16 over chunks; 1e-7 for exact zeros.
    slack = (4 + chunks) * BF16
    parts, start = [], 0
    for name, grad, terms in (("dH", h.grad, dh_terms), ("dW", w.grad, dw_terms)):
        want = tc.numpy(grad)
        bound = bound_from(want, 1e-7, 2 * BF16, slack * terms)
        parts.append(Part(name, start, start + want.size, want, bound, f"1e-7 + 2^-7 |g| + {slack:.1e} terms"))
        start += want.size
    return Expectation(parts)


def check_ce(saved, tc, tokens, hidden, vocab, label_smoothing, z_loss, chunks) -> Expectation:
    # The day saves the logits but not the targets of this problem; `targets` is the name to
    # save them under.
    if not saved.has("targets"):
        return Expectation(gaps=["cross-entropy alone: its targets are not saved"])
    lf = tc.tensor(saved.input("logits", (tokens, vocab)), "bf16").float().requires_grad_(True)
    targets = tc.integers(saved.input("targets", (tokens,)))
    loss, n, _ = loss_of(tc, lf, targets, label_smoothing, z_loss)
    loss.backward()
    want = tc.numpy(lf.grad.to(tc.torch.bfloat16))
    # day19's dlogits tolerance: bf16 output (1.5 half ulps), and 3e-5 / N where the target's
    # (p_y - 1) / N cancels.
    atol = 3e-5 / float(n) + 1e-30
    bound = bound_from(want, atol, 1.5 * BF16)
    return Expectation([Part("dlogits", 0, want.size, want, bound, f"{atol:.1e} + {1.5 * BF16:.1e} |g|")])
