"""PyTorch on the problems of day 16 (reductions and scans), timed on the same GPU.

    python3 peers/reduce.py --out peers_reduce.json

Writes {"torch": version, "device": name, "figures": [{key, peer, median_ms, gb_per_s}]},
with keys as day16's report names its problems (sum/f32/268435456), for `--peers FILE` and
`cargo xtask report`. Times with triton.testing.do_bench (median, L2 cleared between runs)
when Triton is there, else with CUDA events around each run after writing a buffer of twice
the L2 size. GB/s counts each input read once and each output written once, as the day does.
"""

import argparse
import json
import sys

import torch

N = 1 << 28
SEGMENT_LEN = 4096


def time_ms(fn):
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


def floats(gen, n):
    # The day's inputs: uniform in [-0.5, 1.5).
    return torch.rand(n, device="cuda", generator=gen) * 2 - 0.5


def problems(gen):
    """(key, peer, fn, bytes) for each problem; the inputs live as long as the closures."""
    x = floats(gen, N)
    yield f"sum/f32/{N}", "torch.sum", lambda: torch.sum(x), 4 * N + 4
    ints = torch.randint(1, 17, (N,), device="cuda", dtype=torch.int32, generator=gen)
    yield f"count/i32/{N}", "(x == v).sum()", lambda: (ints == 7).sum(), 4 * N + 4
    del ints
    y = floats(gen, N)
    yield f"dot/f32/{N}", "torch.dot", lambda: torch.dot(x, y), 8 * N + 4
    del y
    segments = N // SEGMENT_LEN
    rows = x.view(segments, SEGMENT_LEN)
    yield (
        f"segment_sum/f32/{segments}x{SEGMENT_LEN}",
        "x.view(s, len).sum(1)",
        lambda: rows.sum(dim=1),
        4 * N + 4 * segments,
    )
    yield f"scan/f32/{N}", "torch.cumsum", lambda: torch.cumsum(x, 0), 8 * N
    del x, rows
    small = torch.randint(-2, 5, (N,), device="cuda", dtype=torch.int32, generator=gen)
    # dtype=int32 keeps the output i32 (torch would widen it to i64 otherwise).
    yield (
        f"scan/i32/{N}",
        "torch.cumsum",
        lambda: torch.cumsum(small, 0, dtype=torch.int32),
        8 * N,
    )


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="where to write the JSON")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("peers/reduce.py: no CUDA device for torch", file=sys.stderr)
        return 2
    figures = []
    gen = torch.Generator(device="cuda").manual_seed(0)
    for key, peer, fn, nbytes in problems(gen):
        ms = time_ms(fn)
        figures.append({"key": key, "peer": peer, "median_ms": ms, "gb_per_s": nbytes / ms / 1e6})
        print(f"{key:32s} {peer:24s} {ms:8.4f} ms {nbytes / ms / 1e6:7.0f} GB/s", flush=True)
    with open(args.out, "w") as f:
        json.dump(
            {
                "torch": torch.__version__,
                "device": torch.cuda.get_device_name(0),
                "figures": figures,
            },
            f,
            indent=1,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
