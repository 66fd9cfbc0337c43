"""PyTorch on the problems of day17 (copy, transpose, reversal), timed on the same GPU.

    python3 peers/transpose.py --out peers_transpose.json

x.clone() for the copy, x.t().contiguous() for the transpose, torch.flip for the reversal.
Writes {"torch", "device", "figures": [{key, peer, median_ms, gb_per_s}]} with the day's keys;
GB/s counts the input read once and the output written once (8 bytes per f32 element).
"""

import argparse
import json
import sys

import torch

ROWS, COLS = 16384, 16384
REVERSE_N = 1 << 26


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
        print("peers/transpose.py: no CUDA device for torch", file=sys.stderr)
        return 2
    figures = []

    def add(key, peer, fn, nbytes):
        ms = time_ms(fn)
        figures.append({"key": key, "peer": peer, "median_ms": ms, "gb_per_s": nbytes / ms / 1e6})
        print(f"{key:36s} {peer} {ms:8.4f} ms {nbytes / ms / 1e6:7.0f} GB/s", flush=True)

    gen = torch.Generator(device="cuda").manual_seed(0)
    x = torch.rand(ROWS, COLS, device="cuda", generator=gen) * 2 - 1
    shape = f"{ROWS}x{COLS}"
    add(f"copy/f32/{shape}", "x.clone()", lambda: x.clone(), 8 * x.numel())
    add(f"transpose/f32/{shape}", ".t().contiguous()", lambda: x.t().contiguous(), 8 * x.numel())
    del x
    v = torch.rand(REVERSE_N, device="cuda", generator=gen)
    add(f"reverse/f32/{REVERSE_N}", "torch.flip", lambda: torch.flip(v, [0]), 8 * v.numel())
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
