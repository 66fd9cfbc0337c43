"""PyTorch's softmax on the problems of the softmax days (02-05), timed on the same GPU.

    python3 peers/softmax.py --out peers_softmax.json

Writes {"torch": version, "device": name, "figures": [{key, peer, median_ms, gb_per_s}]},
with keys as the days' reports name their problems (softmax/f32/32768x4096), for
`--peers FILE` and `cargo xtask report`. Times with triton.testing.do_bench (median, L2
cleared between runs) when Triton is there, else with CUDA events around each run after
writing a buffer of twice the L2 size. GB/s counts the input read once and the output
written once, as the days do.
"""

import argparse
import json
import sys

import torch

DTYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}

# The softmax targets, the dtype-day problems, and the sweep (2^26 elements, 128..1M columns).
PROBLEMS = [
    ("f32", 32768, 4096),
    ("f16", 32768, 4096),
    ("bf16", 32768, 4096),
    ("f32", 4096, 32768),
    ("f32", 1 << 20, 128),
    ("f32", 8, 1 << 20),
] + [("f32", (1 << 26) >> k, 1 << k) for k in range(7, 21)]


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


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="where to write the JSON")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("peers/softmax.py: no CUDA device for torch", file=sys.stderr)
        return 2
    figures = []
    seen = set()
    for dtype, rows, cols in PROBLEMS:
        key = f"softmax/{dtype}/{rows}x{cols}"
        if key in seen:
            continue
        seen.add(key)
        gen = torch.Generator(device="cuda").manual_seed(0)
        x = (torch.rand(rows, cols, device="cuda", generator=gen) * 8 - 4).to(DTYPES[dtype])
        ms = time_ms(lambda: torch.softmax(x, dim=-1))
        nbytes = 2 * x.numel() * x.element_size()
        figures.append(
            {"key": key, "peer": "torch.softmax", "median_ms": ms, "gb_per_s": nbytes / ms / 1e6}
        )
        print(f"{key:32s} torch.softmax {ms:8.4f} ms {nbytes / ms / 1e6:7.0f} GB/s", flush=True)
        del x
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
