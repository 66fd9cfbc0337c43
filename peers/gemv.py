"""PyTorch's GEMV on the problems of day 14, timed on the same GPU.

    python3 peers/gemv.py --out peers_gemv.json

Writes {"torch": version, "device": name, "figures": [{key, peer, median_ms, gb_per_s}]},
with keys as day14 names its problems (gemv/f32/8192x8192), for `--peers FILE` and
`cargo xtask report`. Times torch.mv(A, x) (cuBLAS SGEMV underneath) with
triton.testing.do_bench (median, L2 cleared between runs) when Triton is there, else with CUDA
events around each run after writing a buffer of twice the L2 size. TF32 is off (it does not
apply to GEMV, but the figure must be plain f32 whatever the default). GB/s counts the least
traffic as day14 does: A, x and y once each, 4 * (m n + n + m) bytes.
"""

import argparse
import json
import sys

import torch

# Square, tall-skinny and short-wide: day14's default problems, 256 MiB of A each.
PROBLEMS = [(8192, 8192), (1 << 20, 64), (64, 1 << 20)]


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
        print("peers/gemv.py: no CUDA device for torch", file=sys.stderr)
        return 2
    torch.backends.cuda.matmul.allow_tf32 = False
    figures = []
    for m, n in PROBLEMS:
        key = f"gemv/f32/{m}x{n}"
        gen = torch.Generator(device="cuda").manual_seed(0)
        a = torch.rand(m, n, device="cuda", generator=gen) * 2 - 1
        x = torch.rand(n, device="cuda", generator=gen) * 2 - 1
        ms = time_ms(lambda: torch.mv(a, x))
        nbytes = 4 * (m * n + n + m)
        figures.append(
            {"key": key, "peer": "torch.mv", "median_ms": ms, "gb_per_s": nbytes / ms / 1e6}
        )
        print(f"{key:32s} torch.mv {ms:8.4f} ms {nbytes / ms / 1e6:7.0f} GB/s", flush=True)
        del a, x
        torch.cuda.empty_cache()
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
