"""PyTorch on the problems of day15 (per-tensor INT8 quantization), timed on the same GPU.

    python3 peers/quantize.py --out peers_quantize.json

The ops a user writes for per-tensor quantization without a fused kernel: amax (or min and
max), divide, round (half to even, as the day's kernels), clamp, cast; dequantization as a
cast, subtract and multiply; and torch._int_mm (cuBLASLt INT8 tensor cores) for the INT8
matmul. torch._int_mm has no zero points, so its figure is for za = zb = 0 (the day's kernels
also subtract zero points; the correction terms would add a few cheap reductions). Writes
{"torch", "device", "figures": [{key, peer, median_ms, gb_per_s}]} with the day's keys. GB/s
counts the least traffic as the day does: x read once and q written once (5 bytes per
element), q read and y written for dequantization, A, B read and C (int32) written for the
matmul.
"""

import argparse
import json
import sys

import torch

ROWS, COLS = 16384, 4096
M = N = K = 4096


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



def quantize_sym(x):
    scale = x.abs().amax() / 127
    return torch.clamp(torch.round(x / scale), -127, 127).to(torch.int8)


def quantize_asym(x):
    lo = torch.clamp(x.amin(), max=0)
    hi = torch.clamp(x.amax(), min=0)
    scale = (hi - lo) / 255
    zp = torch.clamp(torch.round(-lo / scale), 0, 255)
    return torch.clamp(torch.round(x / scale) + zp, 0, 255).to(torch.uint8)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="where to write the JSON")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("peers/quantize.py: no CUDA device for torch", file=sys.stderr)
        return 2
    figures = []

    def add(key, peer, fn, nbytes, ops=None):
        ms = time_ms(fn)
        figures.append({"key": key, "peer": peer, "median_ms": ms, "gb_per_s": nbytes / ms / 1e6})
        extra = f" {ops / ms / 1e9:7.1f} TOPS" if ops else ""
        print(f"{key:36s} {peer} {ms:8.4f} ms {nbytes / ms / 1e6:7.0f} GB/s{extra}", flush=True)

    gen = torch.Generator(device="cuda").manual_seed(0)
    x = torch.rand(ROWS, COLS, device="cuda", generator=gen) * 8 - 3
    n = x.numel()
    shape = f"{ROWS}x{COLS}"
    add(f"quantize_sym/f32/{shape}", "torch ops", lambda: quantize_sym(x), 5 * n)
    add(f"quantize_asym/f32/{shape}", "torch ops", lambda: quantize_asym(x), 5 * n)
    q8 = quantize_sym(x)
    scale = float(x.abs().amax() / 127)
    add(f"dequantize/i8/{shape}", "torch ops", lambda: q8.to(torch.float32) * scale, 5 * n)
    qu8 = quantize_asym(x)
    add(f"dequantize/u8/{shape}", "torch ops", lambda: (qu8.to(torch.float32) - 128) * scale, 5 * n)
    del x, q8, qu8

    a = torch.randint(-128, 128, (M, K), device="cuda", dtype=torch.int8, generator=gen)
    b_t = torch.randint(-128, 128, (N, K), device="cuda", dtype=torch.int8, generator=gen)
    # B stored n x k (the day's layout) is a column-major k x n: the layout cuBLASLt's INT8
    # path wants.
    b = b_t.t()
    add(
        f"int8_matmul/i8/{M}x{N}x{K}",
        "torch._int_mm (zero points 0)",
        lambda: torch._int_mm(a, b),
        M * K + N * K + 4 * M * N,
        ops=2 * M * N * K,
    )
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
