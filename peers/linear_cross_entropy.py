"""Eager PyTorch and Liger Kernel on day 19's problems: linear + cross-entropy forward and
backward, and cross-entropy alone on given logits.

    python3 peers/linear_cross_entropy.py --out peers_lce.json

Writes {"torch": version, "device": name, "figures": [{key, peer, median_ms, gb_per_s,
extra_gib}]} with the day's keys (linear_cross_entropy/bf16/8192x4096x128256,
cross_entropy/bf16/8192x128256). Times with triton.testing.do_bench (median, L2 cleared).

One timed run is the forward and the backward: the gradients are set to None first, so each
run allocates them as training does. `extra_gib` is torch.cuda.max_memory_allocated during one
such run minus what was allocated before it (the inputs): scratch and outputs (dH, dW or
dlogits) together, the figure day 19's README quotes. The day prints the same sum as "with the
outputs". Eager torch upcasts the logits to f32 before the loss, as Hugging Face models do.
Liger is optional: without liger_kernel one line says so and its figures are skipped. Both
problems also get the eager expression under `torch.compile` (compiled outside the timing;
the backward is the one AOTAutograd compiles for it).

Bytes as the day counts them: fused, H and W read, dH and dW written, targets read, loss
written; cross-entropy alone, the logits read and the gradient written once.
"""

import sys

import torch
import torch.nn.functional as F

import _peer

# The days whose tables use these figures: run.sh --days runs this script only for them.
DAYS = "day19"

TOKENS, HIDDEN, VOCAB = 8192, 4096, 128256
IGNORE_INDEX = -100


def extra_gib(fn):
    """Peak memory of one run of `fn` above what is allocated before it, in GiB."""
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    fn()
    torch.cuda.synchronize()
    return (torch.cuda.max_memory_allocated() - base) / 2**30


def record(key, peer, fn, nbytes, ops=None):
    gib = extra_gib(fn)
    rec = _peer.figure(key, peer, fn, nbytes, ops)
    rec["extra_gib"] = gib
    print(f"{'':48s} {peer:30s} extra memory {gib:.2f} GiB", flush=True)
    return rec


def liger():
    try:
        from liger_kernel.transformers.cross_entropy import LigerCrossEntropyLoss
        from liger_kernel.transformers.fused_linear_cross_entropy import (
            LigerFusedLinearCrossEntropyLoss,
        )
    except Exception as e:  # noqa: BLE001 - a broken install skips Liger's rows, not the script
        reason = f"{type(e).__name__}: {e}"
        print(f"SKIPPED Liger rows: liger_kernel does not import ({reason})", flush=True)
        return None
    return LigerCrossEntropyLoss, LigerFusedLinearCrossEntropyLoss


def compiled_record(key, what, loss, args, clear, nbytes, ops=None):
    """`loss(*args).backward()` with `loss` under torch.compile, compiled and warmed before the
    memory and time are measured; `clear` drops the previous run's gradients."""
    compiled = _peer.compile_static(loss)

    def run():
        clear()
        compiled(*args).backward()

    _peer.warm_up(run)
    clear()
    return record(key, _peer.compiled_name(what), run, nbytes, ops)


def figures():
    gen = torch.Generator(device="cuda").manual_seed(0)
    dt = torch.bfloat16
    lib = liger()

    # The day's inputs: H in [-1, 1), W in +-6/sqrt(Hd) (logits of standard deviation ~2).
    scale = 6.0 / HIDDEN**0.5
    h = ((torch.rand((TOKENS, HIDDEN), device="cuda", generator=gen) * 2 - 1)).to(dt)
    w = ((torch.rand((VOCAB, HIDDEN), device="cuda", generator=gen) * 2 - 1) * scale).to(dt)
    t = torch.randint(0, VOCAB, (TOKENS,), device="cuda", generator=gen)
    h.requires_grad_(True)
    w.requires_grad_(True)
    key = f"linear_cross_entropy/bf16/{TOKENS}x{HIDDEN}x{VOCAB}"
    nbytes = 2 * 2 * (TOKENS + VOCAB) * HIDDEN + 4 * TOKENS + 4
    ops = 3 * 2 * TOKENS * HIDDEN * VOCAB

    def eager():
        h.grad, w.grad = None, None
        loss = F.cross_entropy(F.linear(h, w).float(), t, ignore_index=IGNORE_INDEX)
        loss.backward()

    yield record(key, "torch eager (F.linear + F.cross_entropy)", eager, nbytes, ops)

    def clear_hw():
        h.grad, w.grad = None, None

    def linear_loss(h, w, t):
        return F.cross_entropy(F.linear(h, w).float(), t, ignore_index=IGNORE_INDEX)

    what = "(F.linear + F.cross_entropy)"
    def make():
        return compiled_record(key, what, linear_loss, (h, w, t), clear_hw, nbytes, ops)

    yield from _peer.tried(key, _peer.compiled_name(what), make)

    if lib is not None:
        fused = lib[1](ignore_index=IGNORE_INDEX)

        def liger_fused():
            h.grad, w.grad = None, None
            fused(w, h, t).backward()

        # The previous peer's gradients would otherwise count as already allocated.
        h.grad, w.grad = None, None
        def liger_row():
            name = _peer.liger_name("FusedLinearCrossEntropy")
            return record(key, name, liger_fused, nbytes, ops)

        yield from _peer.tried(key, "Liger FusedLinearCrossEntropy", liger_row)
    del h, w
    torch.cuda.empty_cache()

    # Cross-entropy alone on given bf16 logits.
    logits = (torch.rand((TOKENS, VOCAB), device="cuda", generator=gen) * 8 - 4).to(dt)
    logits.requires_grad_(True)
    key = f"cross_entropy/bf16/{TOKENS}x{VOCAB}"
    nbytes = 2 * 2 * TOKENS * VOCAB + 4 * TOKENS + 4

    def torch_ce():
        logits.grad = None
        F.cross_entropy(logits, t, ignore_index=IGNORE_INDEX).backward()

    yield record(key, "torch F.cross_entropy", torch_ce, nbytes)

    def clear_logits():
        logits.grad = None

    def loss(logits, t):
        return F.cross_entropy(logits, t, ignore_index=IGNORE_INDEX)

    def make():
        return compiled_record(key, "F.cross_entropy", loss, (logits, t), clear_logits, nbytes)

    yield from _peer.tried(key, _peer.compiled_name("F.cross_entropy"), make)
    logits.grad = None

    if lib is not None:
        ce = lib[0](ignore_index=IGNORE_INDEX)

        def liger_ce():
            logits.grad = None
            # Liger writes the gradient over its input in the forward; a fresh leaf view each
            # run keeps autograd from complaining about the in-place change.
            x = logits.detach().requires_grad_(True)
            ce(x, t).backward()

        logits.grad = None
        make = lambda: record(key, _peer.liger_name("CrossEntropy"), liger_ce, nbytes)  # noqa: E731
        yield from _peer.tried(key, "Liger CrossEntropy", make)


if __name__ == "__main__":
    sys.exit(_peer.main(__doc__, figures))
