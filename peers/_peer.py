"""What every peers script shares: timing, one figure's record, and the command line that
writes the JSON run.sh merges. run.sh runs every `peers/*.py` but this one (names starting
with `_` are helpers, not peers); the scripts import it from their own folder.

A script defines `figures()`, a generator of `figure(...)` records, and ends with
`sys.exit(_peer.main(__doc__, figures))`. Beside each eager row a script may add the same
expression under `torch.compile` (`compiled_figure`, `compiled_backward`) and Liger's kernel
for it (`liger()`); their row names carry the versions that made them.
"""

import argparse
import json
import sys

import torch


def time_ms(fn):
    """Median milliseconds of `fn`: triton.testing.do_bench when Triton is there (L2 cleared
    between runs), else CUDA events around each of 50 runs after writing twice the L2 size."""
    try:
        from triton.testing import do_bench

        return do_bench(fn, warmup=25, rep=200, return_mode="median")
    except ImportError:
        pass
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    flush = torch.empty(2 * l2, dtype=torch.uint8, device="cuda")
    for _ in range(5):
        fn()
    times = []
    for _ in range(50):
        flush.zero_()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    times.sort()
    return times[len(times) // 2]


def figure(key, peer, fn, nbytes, ops=None):
    """Times `fn` and returns its record (`key` as the days name the problem, `nbytes` its
    least traffic as the days count it); prints one line, with TOPS when `ops` is given."""
    ms = time_ms(fn)
    gb_per_s = nbytes / ms / 1e6
    extra = f" {ops / ms / 1e9:7.1f} TOPS" if ops else ""
    print(f"{key:48s} {peer:30s} {ms:8.4f} ms {gb_per_s:7.0f} GB/s{extra}", flush=True)
    return {"key": key, "peer": peer, "median_ms": ms, "gb_per_s": gb_per_s}


def attention_key(op, batch, heads, kv_heads, d, seqlen, causal):
    """The key days 10 (`op` "attention") and 20 ("attention_bwd") name a bf16 problem by, its
    queries and keys of the same length: attention/bf16/b4-h16-kv16-d128-q4096-k4096[-causal]."""
    key = f"{op}/bf16/b{batch}-h{heads}-kv{kv_heads}-d{d}-q{seqlen}-k{seqlen}"
    return key + ("-causal" if causal else "")


def distinct(problems, key_of):
    """`(key_of(problem), problem)` for each of `problems` but those whose key an earlier one
    has: a problem listed twice (a default problem that the sweep repeats) is timed once."""
    seen = set()
    for problem in problems:
        key = key_of(problem)
        if key not in seen:
            seen.add(key)
            yield key, problem


def torch_version():
    return torch.__version__.split("+")[0]


def triton_version():
    try:
        import triton

        return triton.__version__
    except ImportError:
        return "none"


def compiled_name(what):
    """A torch.compile row's name: what was compiled and the versions that compiled it."""
    return f"torch.compile {what} (torch {torch_version()}, Triton {triton_version()})"


def _let_inductor_specialize():
    """Every problem compiles its own kernels (`dynamic=False`, as a user whose shapes do not
    change gets them); the scripts compile one expression for many shapes, more than dynamo's
    default limit of recompiles before it falls back to eager."""
    import torch._dynamo

    for name in ("recompile_limit", "cache_size_limit", "accumulated_recompile_limit",
                 "accumulated_cache_size_limit"):
        if hasattr(torch._dynamo.config, name):
            setattr(torch._dynamo.config, name, 1024)


def compile_static(fn):
    """`torch.compile(fn)` in Inductor's default mode, specialized to the shapes it sees."""
    _let_inductor_specialize()
    return torch.compile(fn, dynamic=False)


def compiled_figure(key, what, fn, nbytes, ops=None):
    """Times `torch.compile(fn)` (the same expression as the eager row, no arguments) after
    compiling and warming it outside the timing."""
    return compiled_row(key, what, compile_static(fn), nbytes, ops)


def warm_up(run):
    """Three calls of `run` before it is measured: the first compiles (torch.compile compiles
    at its first call for a shape), the others settle caches and clocks."""
    for _ in range(3):
        run()
    torch.cuda.synchronize()


def compiled_row(key, what, run, nbytes, ops=None):
    """The record of `run`, a call into compiled code, warmed up outside the timing."""
    warm_up(run)
    return figure(key, compiled_name(what), run, nbytes, ops)


def keep_saved_tensors():
    """Backward rows call the backward of one saved graph many times (retain_graph). AOTAutograd
    may donate saved tensors to the backward as scratch, which forbids a second call; donation
    saves memory, not time, so it is turned off for the compiled backward rows."""
    import torch._functorch.config

    torch._functorch.config.donated_buffer = False


def compiled_backward(key, what, forward, inputs, wrt, dy, nbytes):
    """Times the backward of `torch.compile(forward)(*inputs)`, AOTAutograd's compiled backward
    for the gradients of `wrt`, as the eager `_bwd` rows time autograd's: the forward runs once
    outside the timing and each timed run is `torch.autograd.grad` of the saved graph."""
    keep_saved_tensors()
    y = compile_static(forward)(*inputs)
    run = lambda: torch.autograd.grad(y, wrt, dy, retain_graph=True)  # noqa: E731
    return compiled_row(key, f"{what} backward", run, nbytes)


def rows(key, name, fn, nbytes, ops=None, liger_kernel=None):
    """The records of one problem: eager `fn` as `name`, the same `fn` under torch.compile,
    and Liger's kernel where given (`liger_kernel`: (its name, a function to time)). A peer
    that refuses the problem leaves its row out with one line saying why."""
    yield figure(key, name, fn, nbytes, ops)
    yield from tried(key, compiled_name(name), lambda: compiled_figure(key, name, fn, nbytes, ops))
    if liger_kernel is not None:
        what, liger_fn = liger_kernel
        make = lambda: figure(key, liger_name(what), liger_fn, nbytes, ops)  # noqa: E731
        yield from tried(key, f"Liger {what}", make)


def tried(key, name, make):
    """`[make()]`, or `[]` with one line saying why when the peer refuses the problem (a
    compile that fails, a kernel that does not take the shape): the other rows still run."""
    try:
        return [make()]
    except Exception as e:  # noqa: BLE001 - any failure of a peer is reported, not fatal
        reason = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
        print(f"{key:48s} {name}: not available ({type(e).__name__}: {reason})", flush=True)
        return []


def liger():
    """Liger Kernel's functional API (`liger_kernel.transformers.functional`), or None with one
    SKIPPED line when the package is missing (run.sh installs the wheel the bundle carries)."""
    try:
        import liger_kernel.transformers.functional as functional
    except Exception as e:  # noqa: BLE001 - a broken install skips Liger's rows, not the script
        reason = f"{type(e).__name__}: {e}"
        print(f"SKIPPED Liger rows: liger_kernel does not import ({reason})", flush=True)
        return None
    return functional


def liger_name(what):
    """A Liger row's name: the kernel and the versions it ran with."""
    from importlib.metadata import version

    return f"Liger {what} ({version('liger-kernel')}, Triton {triton_version()})"


def main(doc, figures):
    """`script --out FILE`: writes {"torch", "device", "figures": [...]} from `figures()`."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--out", required=True, help="where to write the JSON")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print(f"{sys.argv[0]}: no CUDA device for torch", file=sys.stderr)
        return 2
    records = list(figures())
    with open(args.out, "w") as f:
        json.dump(
            {
                "torch": torch.__version__,
                "device": torch.cuda.get_device_name(0),
                "figures": records,
            },
            f,
            indent=1,
        )
    return 0
