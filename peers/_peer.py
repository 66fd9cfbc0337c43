"""What every peers script shares: timing, one figure's record, and the command line that
writes the JSON run.sh merges. run.sh runs every `peers/*.py` but this one (names starting
with `_` are helpers, not peers); the scripts import it from their own folder.

A script defines `figures()`, a generator of `figure(...)` records, and ends with
`sys.exit(_peer.main(__doc__, figures))`.
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
