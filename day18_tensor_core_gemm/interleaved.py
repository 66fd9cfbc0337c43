#!/usr/bin/env python3
"""Repeated runs of day 18's versions beside cuBLAS, with the SM clock logged beside each.

    python3 day18_tensor_core_gemm/interleaved.py --bin target/release/day18 \
        --size 4096 --kernel wgmma_auto,wgmma_cluster --runs 5

Between processes cuBLAS and our kernels move by a few percent at 4096 and 8192 (the clocks of
a power-limited H100 move with its temperature and load), more than the versions differ, so
one run proves little. Each run here is one process that times cuBLAS and the named versions
one after another on the same inputs (day 18's own table, `--iters` timed runs each, L2
flushed between them), while `nvidia-smi` samples the SM clock, the instantaneous power and
whether the power cap is holding the clock down, every 20 ms. The runs follow each other, so
each version is timed once in every run. Printed per run: each version's median ms, TFLOP/s
and ratio to cuBLAS in that run, and the SM clock while the GPU was under load (the samples
above a quarter of the power limit: the CPU's checks between versions leave the GPU idle, at
its idle clock) with the share of those samples the power cap was active in. Then per version
the median over the runs of its TFLOP/s and of its ratio to cuBLAS.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile


QUERY = "clocks.sm,power.draw.instant,power.limit,clocks_event_reasons.sw_power_cap"


def sample_clocks(path):
    """Starts nvidia-smi writing `clock MHz, power W, power limit W, power cap` every 20 ms."""
    query = QUERY
    return subprocess.Popen(
        ["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader,nounits", "-lms", "20"],
        stdout=open(path, "w"),
        stderr=subprocess.DEVNULL,
    )


def loaded_samples(path):
    """(SM clock MHz, whether the power cap was active) of the samples taken under load."""
    samples = []
    for line in open(path):
        fields = [x.strip() for x in line.split(",")]
        try:
            clock, power, limit = (float(x) for x in fields[:3])
        except (ValueError, IndexError):
            continue
        if power > limit / 4:
            samples.append((clock, fields[3] == "Active" if len(fields) > 3 else False))
    return samples


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--bin", required=True, help="day 18's binary")
    p.add_argument("--size", type=int, required=True, help="m = n = k")
    p.add_argument("--kernel", required=True, help="our versions, comma-separated")
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--iters", type=int, default=200,
                   help="timed runs per version (enough for several clock samples)")
    p.add_argument("--fp8", action="store_true", help="the FP8 problem (against cuBLASLt)")
    p.add_argument("--json", help="write every run's figures here too")
    args = p.parse_args()

    ceiling = "cublaslt" if args.fp8 else "cublas"
    versions = args.kernel.split(",")
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for run in range(args.runs):
            report_path = os.path.join(tmp, f"run{run}.json")
            clock_path = os.path.join(tmp, f"clock{run}.csv")
            # The library's row is selected as `cublas` either way (cuBLASLt's for FP8).
            command = [args.bin, "--size", str(args.size), "--iters", str(args.iters),
                       "--kernel", ",".join(["cublas"] + versions), "--json", report_path]
            if args.fp8:
                command.append("--fp8")
            sampler = sample_clocks(clock_path)
            done = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                  text=True)
            sampler.terminate()
            sampler.wait()
            if done.returncode != 0:
                sys.exit(f"error: {' '.join(command)} failed:\n{done.stderr}")
            (report,) = json.load(open(report_path))
            rows = {r["version"]: r for r in report["rows"]}
            samples = loaded_samples(clock_path)
            clocks = [c for c, _ in samples]
            runs.append({
                "tflops": {v: rows[v]["tflops"] for v in [ceiling] + versions},
                "median_ms": {v: rows[v]["timing"]["median_ms"] for v in [ceiling] + versions},
                "sm_clock_mhz": {
                    "median": statistics.median(clocks) if clocks else None,
                    "min": min(clocks) if clocks else None,
                    "samples": len(clocks),
                    "power_capped": sum(capped for _, capped in samples) / max(len(samples), 1),
                },
            })
            r = runs[-1]
            clock = r["sm_clock_mhz"]
            line = " ".join(
                f"{v} {r['median_ms'][v]:.4f} ms {r['tflops'][v]:.1f} TFLOP/s"
                + ("" if v == ceiling else f" ({r['tflops'][v] / r['tflops'][ceiling]:.3f}x)")
                for v in [ceiling] + versions
            )
            print(f"run {run + 1}: {line} | SM clock under load: median {clock['median']} MHz, "
                  f"min {clock['min']} MHz ({clock['samples']} samples, power cap active in "
                  f"{100 * clock['power_capped']:.0f}%)", flush=True)

    print(f"median of {args.runs} runs, {args.size}^3{' FP8' if args.fp8 else ''}:")
    for v in [ceiling] + versions:
        tflops = statistics.median(r["tflops"][v] for r in runs)
        ratio = statistics.median(r["tflops"][v] / r["tflops"][ceiling] for r in runs)
        print(f"  {v}: {tflops:.1f} TFLOP/s, {ratio:.3f}x {ceiling}")
    if args.json:
        json.dump({"size": args.size, "fp8": args.fp8, "runs": runs}, open(args.json, "w"),
                  indent=1)


if __name__ == "__main__":
    main()
