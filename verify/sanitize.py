"""Every day on its small odd problems under compute-sanitizer: out-of-bounds and misaligned
accesses (memcheck), shared-memory races (racecheck), reads of memory nothing wrote
(initcheck) and misused barriers (synccheck). The problems are the `small*` ones of
verify/days.py, so the sanitizer sees the shapes that end tiles mid-way.

    python3 verify/sanitize.py --bin DIR --sanitizer PATH --out DIR [--days day05,day10] [--jobs N]

memcheck runs every small problem of a day; the other three tools, which are much slower,
run its first, except on the attention days, whose Hopper kernels hand shared memory between
warpgroups differently at each head dim: racecheck and synccheck run all their small problems. A run fails when the sanitizer reports an error (it exits with ERROR_EXIT) or
when the day itself fails (a check, a crash). Writes one log per run under DIR and a summary;
exits 0 when every run was clean, 1 otherwise, 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from days import DAYS  # noqa: E402

TOOLS = ["memcheck", "racecheck", "initcheck", "synccheck"]
# The exit code compute-sanitizer gives when it found an error, told apart from the day's own
# exit codes (0 passed, 1 a failed check, 2 refused).
ERROR_EXIT = 86
# A run that hangs fails instead of holding the whole run: the slowest small problem took 8 s
# under racecheck on the H100.
RUN_TIMEOUT_S = 600
TIMED_OUT = 124


# initcheck does not see what cuBLAS writes: on the H100 (CUDA 13.0) it reported every read of
# logits that cuBLAS had written (day 19's `naive` on its small problem: 1764 reports, 14 valid
# rows x (125 packs + the target), `chunked_cublas` 882, `chunked_day18` 0), while those
# versions' outputs matched the f64 reference. Nor what the TMA stores (cp.async.bulk.tensor):
# since day 18's `wgmma_tma_store` writes `chunked_day18`'s logits, it reports every read of
# those too (8918 reports on the same problem, outputs matching the reference). So initcheck
# runs day 19's cross-entropy alone, whose logits the host uploads; memcheck, racecheck and
# synccheck run every version.
INITCHECK_KERNELS = {"day19": "two_pass,cluster8,cluster_stream,cluster_push"}

# Days whose every small problem also runs under racecheck and synccheck: the attention
# kernels' producer and consumer warpgroups hand tiles and work items over in shared memory,
# with one Q stage at head dim 256 and two below, causal or not.
EVERY_SMALL_PROBLEM = {"day10", "day20"}
EVERY_SMALL_TOOLS = ("racecheck", "synccheck")


def with_kernels(args: tuple[str, ...], kernels: str) -> tuple[str, ...]:
    """`args` with its `--kernel` list (if any) replaced by `kernels`."""
    out, skip = [], False
    for a in args:
        if skip:
            skip = False
        elif a == "--kernel":
            skip = True
        else:
            out.append(a)
    return (*out, "--kernel", kernels)


def runs_of(day: str) -> list[tuple[str, str, tuple[str, ...]]]:
    """(tool, label, day flags) for one day: memcheck on each small problem, the other tools on
    the first."""
    small = [p for p in DAYS[day] if p.label.startswith("small")]
    runs = [("memcheck", p.label, p.args) for p in small]
    for tool in TOOLS[1:] if small else []:
        problems = small if day in EVERY_SMALL_PROBLEM and tool in EVERY_SMALL_TOOLS else small[:1]
        for problem in problems:
            args = problem.args
            if tool == "initcheck" and day in INITCHECK_KERNELS:
                args = with_kernels(args, INITCHECK_KERNELS[day])
            runs.append((tool, problem.label, args))
    return runs


def run_one(sanitizer: str, binary: str, out: str, day: str, tool: str, label: str, args) -> tuple[str, int, float]:
    name = f"{day}-{label}-{tool}"
    command = [
        sanitizer,
        "--tool", tool,
        "--error-exitcode", str(ERROR_EXIT),
        "--print-limit", "20",
        binary, *args, "--iters", "1", "--warmup", "0",
    ]
    start = time.monotonic()
    with open(os.path.join(out, name + ".log"), "w") as log:
        log.write(" ".join(command) + "\n")
        log.flush()
        try:
            rc = subprocess.call(command, stdout=log, stderr=subprocess.STDOUT, timeout=RUN_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            rc = TIMED_OUT
    return name, rc, time.monotonic() - start


def verdict(rc: int) -> str:
    if rc == 0:
        return "clean"
    if rc == ERROR_EXIT:
        return "SANITIZER ERRORS"
    if rc == TIMED_OUT:
        return f"TIMED OUT ({RUN_TIMEOUT_S} s)"
    return f"DAY FAILED (exit {rc})"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bin", required=True, help="folder with the day binaries")
    p.add_argument("--sanitizer", required=True, help="the compute-sanitizer executable")
    p.add_argument("--out", required=True, help="folder for the logs")
    p.add_argument("--days", default="", help="comma-separated days (default: every day)")
    p.add_argument("--jobs", type=int, default=8, help="runs side by side")
    args = p.parse_args(argv)
    days = [d for d in args.days.split(",") if d] or sorted(DAYS)
    unknown = [d for d in days if d not in DAYS]
    if unknown:
        print(f"error: no small problems for {', '.join(unknown)} in verify/days.py", file=sys.stderr)
        return 2
    if args.jobs < 1:
        print("error: --jobs must be at least 1", file=sys.stderr)
        return 2
    os.makedirs(args.out, exist_ok=True)
    work = []
    for day in days:
        binary = os.path.join(args.bin, day)
        if not os.path.exists(binary):
            print(f"error: {binary} does not exist", file=sys.stderr)
            return 2
        work += [(day, tool, label, flags, binary) for tool, label, flags in runs_of(day)]
    if not work:
        print("error: nothing to run", file=sys.stderr)
        return 2
    failed = 0
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        futures = [
            pool.submit(run_one, args.sanitizer, binary, args.out, day, tool, label, flags)
            for day, tool, label, flags, binary in work
        ]
        for future in futures:
            name, rc, seconds = future.result()
            failed += rc != 0
            print(f"{name:48s} {verdict(rc):24s} {seconds:6.1f} s", flush=True)
    print(f"sanitize: {len(work) - failed} of {len(work)} runs clean (logs: {args.out})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
