#!/usr/bin/env python3
"""Verifies every day's outputs against PyTorch on the GPU.

    python3 verify/verify.py --bin DIR_WITH_DAY_BINARIES --out DIR [--days day05,day10] [--keep]

For each day of verify/days.py and each of its problems, runs `BIN/dayNN <problem flags>
--save TMP --iters 1 --warmup 0 --json TMP/report.json`, loads the saved inputs, the f64
reference and every `out_<version>.npy`, computes the same result with PyTorch on the GPU,
and compares: kernel vs torch, torch vs reference, kernel vs reference, each against the
problem's tolerance (verify/README.md says which and why). Prints one line per (day,
problem, version) and a summary, and writes DIR/verify.json.

Exit codes: 0 every verified output passed; 1 a mismatch, a day binary that failed, or a day
with nothing verified; 2 bad arguments, or no torch / no CUDA device (one `error:` line).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
import traceback

# No __pycache__ beside the sources: the repository ignores only /target.
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from compare import compare_part  # noqa: E402
from days import DAYS  # noqa: E402
from problem import Saved, VerifyError, open_torch  # noqa: E402

# The flags every run gets: where to save, one checked run, nothing to warm up.
RUN_FLAGS = ("--iters", "1", "--warmup", "0")
# A medium problem takes seconds; a run past this has hung.
RUN_TIMEOUT_S = 600

PASS, MISMATCH, GAP, FAILED, REFUSED = "PASS", "MISMATCH", "not verifiable yet", "FAILED", "refused"


class UsageError(Exception):
    pass


def parse_args(argv):
    p = argparse.ArgumentParser(description="Verify every day's outputs against PyTorch on the GPU.")
    p.add_argument("--bin", required=True, help="folder with the day binaries (day00, day01, ...)")
    p.add_argument("--out", required=True, help="folder for verify.json, the logs and the saved arrays")
    p.add_argument("--days", default="", help="comma-separated days (default: every day of verify/days.py)")
    p.add_argument("--keep", action="store_true", help="keep the saved .npy arrays of every run")
    p.add_argument("--dry-run", action="store_true", help="print the command lines only (no GPU, no torch)")
    return p.parse_args(argv)


def select_days(spec: str) -> list[str]:
    if not spec:
        return list(DAYS)
    days = [d.strip() for d in spec.split(",") if d.strip()]
    unknown = [d for d in days if d not in DAYS]
    if unknown or not days:
        raise UsageError(
            f"no day {', '.join(unknown) or '(empty)'} in verify/days.py; choose from: {', '.join(DAYS)}"
        )
    return days


def command(bin_dir: str, day: str, problem, save_dir: str) -> list[str]:
    return [
        os.path.join(bin_dir, day),
        *problem.args,
        "--save", save_dir,
        *RUN_FLAGS,
        "--json", os.path.join(save_dir, "report.json"),
    ]


def record(day, problem, version, verdict, detail="", parts=None) -> dict:
    return {
        "day": day,
        "problem": problem.label,
        "args": " ".join(problem.args),
        "version": version,
        "verdict": verdict,
        "detail": detail,
        "parts": parts or [],
    }


def refused_versions(save_dir: str) -> list[tuple[str, str]]:
    """The versions the day refused on the saved problem (its --json report), for the log."""
    try:
        with open(os.path.join(save_dir, "report.json")) as f:
            reports = json.load(f)
    except (OSError, ValueError):
        return []
    return [(r["version"], r["why"]) for rep in reports for r in rep.get("refused", [])]


def last_error_line(log: str) -> str:
    lines = [line for line in log.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("error:")]
    return (errors or lines or ["(no output)"])[-1]


def verify_saved(day, problem, saved: Saved, tc) -> list[dict]:
    """Every saved version of one problem against torch (and the reference)."""
    expectation = problem.expect(saved, tc)
    records = [record(day, problem, "-", GAP, gap) for gap in expectation.gaps]
    if not expectation.parts:
        return records
    size = max(part.stop for part in expectation.parts)
    reference = saved.reference()
    if reference is not None and reference.size != size:
        raise VerifyError(f"reference.npy has {reference.size} values, the output {size}")
    if not saved.versions:
        raise VerifyError("no out_<version>.npy was saved: nothing to compare")
    for version in saved.versions:
        out = saved.output(version, size)
        results = [compare_part(part, out, reference) for part in expectation.parts]
        failures = [r.failure() for r in results if not r.passed]
        verdict = PASS if not failures else MISMATCH
        records.append(
            record(day, problem, version, verdict, "; ".join(failures), [r.as_dict() for r in results])
        )
    return records


def run_problem(args, day, problem, tc) -> list[dict]:
    save_dir = os.path.join(args.out, "saved", day, problem.label)
    shutil.rmtree(save_dir, ignore_errors=True)
    os.makedirs(save_dir)
    cmd = command(args.bin, day, problem, save_dir)
    log_path = os.path.join(args.out, "logs", f"{day}-{problem.label}.log")
    start = time.time()
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
        log, rc = done.stdout + done.stderr, done.returncode
    except subprocess.TimeoutExpired:
        log, rc = f"timed out after {RUN_TIMEOUT_S} s", None
    with open(log_path, "w") as f:
        f.write(" ".join(cmd) + "\n" + log)
    records = []
    if rc != 0:
        records.append(
            record(day, problem, "-", FAILED, f"{day} exited {rc}: {last_error_line(log)} (log: {log_path})")
        )
    for version, why in refused_versions(save_dir):
        records.append(record(day, problem, version, REFUSED, why))
    if rc in (0, 1):  # 1: a check failed, and what it saved is still worth comparing
        try:
            records += verify_saved(day, problem, Saved(save_dir), tc)
        except VerifyError as e:
            records.append(record(day, problem, "-", FAILED, str(e)))
        except Exception:  # a torch error: reported, and the other problems still run
            records.append(record(day, problem, "-", FAILED, traceback.format_exc(limit=3)))
    if not args.keep:
        shutil.rmtree(save_dir, ignore_errors=True)
    for r in records:
        r["seconds"] = round(time.time() - start, 1)
    return records


def day_verdicts(records: list[dict], days: list[str]) -> list[dict]:
    """A day that compared nothing (every problem failed or is not verifiable yet) fails."""
    out = []
    for day in days:
        compared = [r for r in records if r["day"] == day and r["verdict"] in (PASS, MISMATCH)]
        if not compared:
            out.append({"day": day, "problem": "-", "args": "", "version": "-", "verdict": FAILED,
                        "detail": "nothing was verified for this day", "parts": []})
    return out


def fmt(v) -> str:
    return "-" if v is None else f"{v:.2e}"


def worst(parts: list[dict], key: str) -> dict | None:
    """The part with the largest error-to-bound ratio in comparison `key`."""
    diffs = [(p["part"], p[key]) for p in parts if p[key] is not None]
    if not diffs:
        return None
    name, d = max(diffs, key=lambda nd: float("inf") if nd[1]["worst_ratio"] is None else nd[1]["worst_ratio"])
    return {"part": name, **d}


def line(r: dict) -> str:
    head = f"{r['day']}  {r['problem']:<26} {r['version']:<22} {r['verdict']:<9}"
    if not r["parts"]:
        return f"{head} {r['detail']}"
    cols = []
    for key, name in (("vs_torch", "vs torch"), ("torch_vs_reference", "torch vs ref"), ("vs_reference", "vs ref")):
        w = worst(r["parts"], key)
        if w is None:
            cols.append(f"{name}: no reference saved")
            continue
        ratio = "inf" if w["worst_ratio"] is None else f"{w['worst_ratio']:.2f}"
        cols.append(f"{name}: abs {fmt(w['max_abs'])} rel {fmt(w['max_rel'])} ({ratio} of tol)")
    tol = "; ".join(f"{p['part']}: {p['tolerance']}" for p in r["parts"])
    detail = f" [{r['detail']}]" if r["detail"] else ""
    return f"{head} {' | '.join(cols)} | tol {tol}{detail}"


def summary(records: list[dict]) -> tuple[str, bool]:
    counts = {v: sum(r["verdict"] == v for r in records) for v in (PASS, MISMATCH, GAP, FAILED, REFUSED)}
    ok = counts[MISMATCH] == 0 and counts[FAILED] == 0 and counts[PASS] > 0
    text = ", ".join(f"{n} {v}" for v, n in counts.items())
    return f"summary: {text} -> {'OK' if ok else 'FAILED'}", ok


def main(argv=None) -> int:
    try:
        args = parse_args(argv)
        days = select_days(args.days)
        if not os.path.isdir(args.bin):
            raise UsageError(f"--bin {args.bin} is not a folder")
        missing = [d for d in days if not os.access(os.path.join(args.bin, d), os.X_OK)]
        if missing:
            raise UsageError(f"no executable {', '.join(missing)} in {args.bin}")
        if args.dry_run:
            for day in days:
                for problem in DAYS[day]:
                    print(" ".join(command(args.bin, day, problem, os.path.join(args.out, "saved", day, problem.label))))
            return 0
        # VERIFY_TORCH_DEVICE=cpu runs the comparisons on the CPU: for testing this script on
        # a machine without a GPU, never for a verification.
        tc = open_torch(os.environ.get("VERIFY_TORCH_DEVICE", "cuda"))
    except (UsageError, VerifyError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    os.makedirs(os.path.join(args.out, "logs"), exist_ok=True)
    device = tc.torch.cuda.get_device_name(0) if tc.device == "cuda" else tc.device
    where = {"torch": tc.torch.__version__, "device": device, "bin": args.bin}
    print(f"verifying {', '.join(days)} against torch {where['torch']} on {where['device']}", flush=True)
    records = []
    for day in days:
        for problem in DAYS[day]:
            for r in run_problem(args, day, problem, tc):
                print(line(r), flush=True)
                records.append(r)
    for r in day_verdicts(records, days):
        print(line(r))
        records.append(r)
    text, ok = summary(records)
    print(text)
    with open(os.path.join(args.out, "verify.json"), "w") as f:
        json.dump({**where, "records": records, "summary": text, "passed": ok}, f, indent=1)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
