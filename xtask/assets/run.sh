#!/usr/bin/env bash
# Runs the whole workspace on a GPU host: every test executable with REQUIRE_GPU=1 and
# REQUIRE_NVRTC=1, then every day's default benchmark, and writes DIR/results.json for
# `cargo xtask report`. The host needs the NVIDIA driver and NVRTC (CUDA 13), not Rust.
#
#   run.sh --out DIR [--days day06,day09] [--parts tests,bench,sweeps,verify,torch,train] [--jobs N]
#          [--peers-from FILE] [--bench] [--sanitize] [--sources CHECKOUT]
#
# --days runs only those days' test executables, benchmarks, sweeps, checks and peers (each
# peer script names its days); results.json then holds only them. --parts runs only some of the default
# parts (the peers run with bench or sweeps). --jobs runs that many test executables (and
# sanitizer runs) side by side (8 by default: they spend most of their time compiling kernels
# on the CPU). --peers-from takes the peers' figures from the peers.json of an earlier run on
# the same host instead of running peers/*.py again (a run split over several calls times the
# peers once). --bench also runs every day's criterion bench (what `cargo bench -p dayNN`
# runs), keeping criterion's history beside the bundle so a later run compares with it.
# The torch part installs the PyTorch extension's wheel (torch_layers/wheels) into a scratch
# folder and runs its tests (torch_layers/tests, pytest) with REQUIRE_GPU=1 into DIR/torch.log;
# the train part (not a default one) trains torch_layers/examples/train_gpt.py's small GPT on PyTorch's
# layers and on ours into DIR/train_gpt/ (results.json, loss.png) and DIR/train.log, then, where the
# host has 2 GPUs or more, on ours over 2 GPUs with DistributedDataParallel (train_gpt_ddp.py, its
# curve compared with the one-GPU run's) into DIR/train_gpt_ddp/ and DIR/train_ddp.log. Both
# are "ok" when they ran: their verdicts are in their results.json, not in the exit code.
# --sanitize also runs every day on small odd problems under compute-sanitizer's memcheck,
# racecheck, initcheck and synccheck (verify/sanitize.py), where the host has it.
#
# First the peers (peers/*.py, when python3 has torch and a GPU; the wheels in peers/wheels/
# installed for them into a scratch folder) into DIR/peers.json, which every day then gets as
# --peers. Writes DIR/tests.log, DIR/peers.log, DIR/bench.log,
# DIR/results.json and DIR/plots/dayNN.svg (the sweeps); the verify part (verify/verify.py:
# each day's outputs recomputed with PyTorch) writes DIR/verify.log and DIR/verify/; --bench
# DIR/criterion.log; --sanitize DIR/sanitize.log and DIR/sanitize/. results.json records every
# test executable (passed or not, the SKIPPED lines it printed, its wall seconds and each
# test's own seconds) and the exit code and seconds of every benchmark, sweep, verification,
# bench and sanitizer run, so `cargo xtask report` can refuse a run in which anything failed.
# The bundle's compiled kernels (kernel-cache/ in the archive) go into the kernel cache first;
# a kernel compiled here that the bundle should have held fails the run (the end says why).
# --sources CHECKOUT (or DAYS_OF_GPU_KERNEL_SOURCES=CHECKOUT in the environment) compiles every
# kernel from that checkout's files instead of the bundle's own copies: a kernel edited since
# the bundle was built is tried without building anything. The selected days' kernels are then
# compiled first, once, on every core (bin/kernels), and the tests and benchmarks load them;
# results.json names the edited files, and `cargo xtask report` refuses it.
# Exits 1 if any of them failed, 2 on bad arguments.
set -u
# Empty arrays ("${peers_args[@]}") are fine under `set -u` from bash 4.4 on only.
if [ "${BASH_VERSINFO[0]}" -lt 4 ] || { [ "${BASH_VERSINFO[0]}" -eq 4 ] && [ "${BASH_VERSINFO[1]}" -lt 4 ]; }; then
  echo "run.sh needs bash 4.4 or newer (this is $BASH_VERSION)" >&2
  exit 2
fi
here=$(cd "$(dirname "$0")" && pwd)

usage() { echo "usage: $0 --out DIR [--days dayNN,dayMM] [--parts tests,bench,sweeps,verify,torch,train] [--jobs N] [--peers-from FILE] [--bench] [--sanitize] [--sources CHECKOUT]" >&2; }
out=""
days=""
parts_wanted=",tests,bench,sweeps,verify,torch,"
criterion=0
sanitize=0
jobs=8
peers_from=""
while [ $# -gt 0 ]; do
  case "$1" in
    --out) [ $# -ge 2 ] || { usage; exit 2; }; out=$2; shift 2 ;;
    --peers-from) [ $# -ge 2 ] || { usage; exit 2; }; peers_from=$2; shift 2 ;;
    --days) [ $# -ge 2 ] || { usage; exit 2; }; days=",$2,"; shift 2 ;;
    --parts) [ $# -ge 2 ] || { usage; exit 2; }; parts_wanted=",$2,"; shift 2 ;;
    --jobs) [ $# -ge 2 ] && [ "$2" -ge 1 ] 2>/dev/null || { usage; exit 2; }; jobs=$2; shift 2 ;;
    --bench) criterion=1; shift ;;
    --sanitize) sanitize=1; shift ;;
    --sources) [ $# -ge 2 ] || { usage; exit 2; }
      [ -d "$2/common/cuda" ] || { echo "--sources $2: not the root of a checkout (no common/cuda/)" >&2; exit 2; }
      DAYS_OF_GPU_KERNEL_SOURCES=$(cd "$2" && pwd); export DAYS_OF_GPU_KERNEL_SOURCES; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "unknown argument: $1" >&2; usage; exit 2 ;;
  esac
done
[ -n "$out" ] || { usage; exit 2; }
mkdir -p "$out" || exit 2
out=$(cd "$out" && pwd)
# A results.json left by an earlier run into this folder must not outlive a run that stops
# early: the new one is written at the very end, through a temporary name.
rm -f "$out/results.json"

# NVRTC: use the loader's, or find a CUDA 13 install or the PyPI wheel.
if ! ldconfig -p 2>/dev/null | grep -q 'libnvrtc\.so\.13'; then
  for dir in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib \
             $(python3 -c 'import nvidia, os; print(os.path.join(nvidia.__path__[0], "cu13", "lib"))' 2>/dev/null); do
    if [ -e "$dir/libnvrtc.so.13" ]; then
      export LD_LIBRARY_PATH="$dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
      break
    fi
  done
fi

# shellcheck source=/dev/null
. "$here/BUILD_INFO"
export REQUIRE_GPU=1 REQUIRE_NVRTC=1
# Compiled kernels are kept beside the bundle (unless the caller names a folder), so the
# tests fill the cache once and the benchmarks, sweeps and later calls compile nothing.
export DAYS_OF_GPU_KERNEL_CACHE="${DAYS_OF_GPU_KERNEL_CACHE:-$here/kernel-cache}"
# `off` and `0` turn the cache off, as common::gpu::kernel_cache reads them.
cache_off=0
case "$DAYS_OF_GPU_KERNEL_CACHE" in off|0) cache_off=1 ;; esac
failed=0
summary=""
note() { summary="$summary$(printf '%-6s %-28s %s' "$1" "$2" "$3")"$'\n'; }

# Whether a test executable or binary named NAME (day06, day06-lib, ...) is selected.
selected() { [ -z "$days" ] || case "$days" in *",${1%%-*},"*) true ;; *) false ;; esac; }
# Whether the part NAME (tests, bench, sweeps, verify) is to run.
part() { case "$parts_wanted" in *",$1,"*) true ;; *) false ;; esac; }
# A string as a JSON string literal (backslashes and quotes escaped, tabs as spaces).
json_string() { printf '"%s"' "$(printf '%s' "$1" | tr '\t' ' ' | sed 's/\\/\\\\/g; s/"/\\"/g')"; }
runs_json=""
run_seconds=""
# Records the exit code of one benchmark, sweep, verification, bench or sanitizer run in
# results.json, with its wall seconds since the last `started` (none for a check that is not
# a run of its own: `record_run NAME KIND EXIT untimed`).
started() { run_start=$(date +%s.%N); }
started
record_run() {
  if [ "${4:-}" = untimed ]; then
    runs_json="$runs_json${runs_json:+,}{\"name\":\"$1\",\"kind\":\"$2\",\"exit\":$3}"
    return
  fi
  local secs
  secs=$(awk -v s="$run_start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }')
  runs_json="$runs_json${runs_json:+,}{\"name\":\"$1\",\"kind\":\"$2\",\"exit\":$3,\"seconds\":$secs}"
  run_seconds="$run_seconds$(printf '%7.1f  %s %s' "$secs" "$2" "$1")"$'\n'
}

parts=$(mktemp -d)
trap 'rm -rf "$parts"' EXIT

# The executables travel packed (xtask/src/bundle.rs says why): unpack them beside the logs'
# scratch folder, with tar and xz, or with python3 where xz is missing.
exe="$parts/executables"
mkdir -p "$exe"
tar -xJf "$here/executables.tar.xz" -C "$exe" 2>/dev/null \
  || python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' \
       "$here/executables.tar.xz" "$exe" \
  || { echo "cannot unpack $here/executables.tar.xz (needs tar with xz, or python3)" >&2; exit 2; }
# Every --days item must name a day of this bundle and every --parts item a part: a typo
# would otherwise run nothing and pass.
day_items=0
for d in $(printf '%s' "$days" | tr ',' ' '); do
  [ -e "$exe/bin/$d" ] || { echo "--days: no day \`$d\` in this bundle" >&2; exit 2; }
  day_items=$((day_items + 1))
done
[ -z "$days" ] || [ "$day_items" -gt 0 ] || { echo "--days: empty list" >&2; exit 2; }
for p in $(printf '%s' "$parts_wanted" | tr ',' ' '); do
  case "$p" in tests|bench|sweeps|verify|torch|train|none) ;; *) echo "--parts: no part \`$p\` (tests, bench, sweeps, verify, torch, train, none)" >&2; exit 2 ;; esac
done

# The kernels come compiled (xtask/src/bundle.rs): copied into the cache the days read, so
# nothing is compiled here. Every compile through the cache appends a line to the log
# (common::gpu::nvrtc::LOG_ENV), which the end of the run counts.
bundled_nvrtc=""
bundled_kernels=0
if [ -f "$exe/kernel-cache/MANIFEST" ] && [ "$cache_off" = 0 ]; then
  mkdir -p "$DAYS_OF_GPU_KERNEL_CACHE" \
    || { echo "cannot create the kernel cache $DAYS_OF_GPU_KERNEL_CACHE" >&2; exit 2; }
  # Entries are named by their key: one already there is the same file.
  for f in "$exe"/kernel-cache/*.cubin; do
    [ -e "$DAYS_OF_GPU_KERNEL_CACHE/${f##*/}" ] || cp "$f" "$DAYS_OF_GPU_KERNEL_CACHE"/ \
      || { echo "cannot copy the bundled kernels into $DAYS_OF_GPU_KERNEL_CACHE" >&2; exit 2; }
  done
  bundled_nvrtc=$(cut -f4 "$exe/kernel-cache/MANIFEST" | sort -u | head -n 1)
  bundled_kernels=$(grep -c . "$exe/kernel-cache/MANIFEST")
  echo "== kernels: $bundled_kernels compiled files from the bundle ($bundled_nvrtc, sm_90 and sm_90a) in $DAYS_OF_GPU_KERNEL_CACHE"
fi
export DAYS_OF_GPU_KERNEL_LOG="$parts/kernels.log"
: > "$DAYS_OF_GPU_KERNEL_LOG"
# Kernel sources from a checkout (common::gpu::kernel_source): compile the selected days'
# kernels now, on every core and once, rather than in each test executable at the same time.
sources="${DAYS_OF_GPU_KERNEL_SOURCES:-}"
if [ -n "$sources" ]; then
  echo "== kernels: sources from $sources, not the bundle's copies"
  if [ -x "$exe/bin/kernels" ]; then
    kernel_days=""
    for d in $("$exe/bin/kernels" --list-days); do
      selected "$d" && kernel_days="$kernel_days${kernel_days:+,}$d"
    done
    if [ -n "$kernel_days" ]; then
      started
      "$exe/bin/kernels" --days "$kernel_days" > "$out/kernels.log" 2>&1
      rc=$?
      record_run kernels compile "$rc"
      if [ "$rc" = 0 ]; then
        note kernels compile "ok ($(tail -n 1 "$out/kernels.log"))"
      else
        tail -n 20 "$out/kernels.log"
        note kernels compile "FAILED (exit $rc: see kernels.log)"; failed=1
      fi
    fi
  fi
fi
tests_json=""
if part tests; then
  echo "== tests, $jobs side by side (log: $out/tests.log)"
  : > "$out/tests.log"
  # Each executable writes its own log and exit code; they are gathered in name order below.
  for t in "$exe"/tests/*; do selected "$(basename "$t")" && printf '%s\0' "$t"; done \
    | xargs -0 -r -P "$jobs" -I{} sh -c 't="$1"; n=$(basename "$t"); s=$(date +%s.%N)
        RUSTC_BOOTSTRAP=1 "$t" -Z unstable-options --report-time > "$2/test-$n.log" 2>&1; echo $? > "$2/test-$n.rc"
        echo "$s $(date +%s.%N)" > "$2/test-$n.time"' _ {} "$parts"
  for t in "$exe"/tests/*; do
    name=$(basename "$t")
    selected "$name" || continue
    log="$parts/test-$name.log"
    rc=$(cat "$parts/test-$name.rc" 2>/dev/null || echo missing)
    if [ "$rc" = 0 ]; then status=ok; else status=FAILED; failed=1; fi
    { echo "---- $name (exit $rc)"; cat "$log" 2>/dev/null; } >> "$out/tests.log"
    counts=$(grep -E '^test result:' "$log" 2>/dev/null | tail -n 1 | sed -E 's/.*ok\. |.*FAILED\. //; s/; [0-9]+ ignored.*//')
    [ -n "$counts" ] || counts="no test summary: crashed?"
    skips=$(grep -c '^SKIPPED' "$log" 2>/dev/null)
    [ "${skips:-0}" = 0 ] || counts="$counts; $skips SKIPPED lines"
    note test "$name" "$status ($counts)"
    skipped_json=""
    while IFS= read -r line; do
      skipped_json="$skipped_json${skipped_json:+,}$(json_string "$line")"
    done < <(grep '^SKIPPED' "$log" 2>/dev/null)
    # Wall time of the executable, and each test's own time from libtest's --report-time
    # lines (`test NAME ... ok <1.234s>`).
    wall=$(awk '{ printf "%.1f", $2 - $1 }' "$parts/test-$name.time" 2>/dev/null)
    cases_json=""
    while IFS=$'\t' read -r secs result case; do
      cases_json="$cases_json${cases_json:+,}{\"name\":$(json_string "$case"),\"seconds\":$secs,\"passed\":$([ "$result" = ok ] && echo true || echo false)}"
      printf '%s\t%s\t%s\n' "$secs" "$name" "$case" >> "$parts/test-times.tsv"
    done < <(sed -nE 's/^test (.+) \.\.\. (ok|FAILED) <([0-9.]+)s>$/\3\t\2\t\1/p' "$log" 2>/dev/null)
    printf '%s\t%s\n' "${wall:-0}" "$name" >> "$parts/test-walls.tsv"
    tests_json="$tests_json${tests_json:+,}{\"name\":\"$name\",\"passed\":$([ $status = ok ] && echo true || echo false),\"wall_seconds\":${wall:-null},\"skipped\":[$skipped_json],\"cases\":[$cases_json]}"
  done
  # Where the time went: the slowest executables (their tests run side by side inside each)
  # and the slowest single tests.
  echo "slowest test executables (wall seconds):"
  sort -t$'\t' -k1,1 -rn "$parts/test-walls.tsv" 2>/dev/null | head -n 10 | awk -F'\t' '{ printf "  %7.1f  %s\n", $1, $2 }'
  echo "slowest tests (seconds, libtest's own timing):"
  sort -t$'\t' -k1,1 -rn "$parts/test-times.tsv" 2>/dev/null | head -n 10 | awk -F'\t' '{ printf "  %7.1f  %s  %s\n", $1, $2, $3 }'

fi
printf '%s' "$summary"

peers_args=()
if [ -n "$peers_from" ]; then
  cp "$peers_from" "$out/peers.json" || { echo "cannot read $peers_from" >&2; exit 2; }
  echo "== peers: from $peers_from"
  peers_args=(--peers "$out/peers.json")
elif ! part bench && ! part sweeps; then
  echo "== peers: not needed (no benchmarks or sweeps in this run)"
elif [ -d "$here/peers" ] && python3 -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  echo "== peers (log: $out/peers.log)"
  : > "$out/peers.log"
  peers_start=$(date +%s)
  # Peers the host's Python lacks (Liger) travel as wheels in peers/wheels/, installed for
  # this run only; without them those rows print one SKIPPED line each and the rest run.
  peers_site="$parts/peers-site"
  if compgen -G "$here/peers/wheels/*.whl" > /dev/null; then
    if python3 -m pip install --quiet --no-index --no-deps --no-compile --target "$peers_site" \
         "$here"/peers/wheels/*.whl >> "$out/peers.log" 2>&1; then
      note peer wheels "ok ($(cd "$here/peers/wheels" && echo *.whl))"
    else
      note peer wheels "SKIPPED (pip could not install peers/wheels: see peers.log)"
    fi
  fi
  # Names starting with `_` are helpers the scripts import (peers/_peer.py), not peers.
  for p in "$here"/peers/[!_]*.py; do
    name=$(basename "$p" .py)
    # With --days, only the peers of those days (each script's `DAYS = "dayNN ..."`).
    peer_days=$(sed -n 's/^DAYS = "\(.*\)"$/\1/p' "$p")
    if [ -n "$days" ] && [ -n "$peer_days" ]; then
      wanted=0
      for d in $peer_days; do selected "$d" && wanted=1; done
      [ "$wanted" = 1 ] || continue
    fi
    peer_start=$(date +%s)
    if PYTHONPATH="$peers_site${PYTHONPATH:+:$PYTHONPATH}" python3 "$p" --out "$parts/peers_$name.json" >> "$out/peers.log" 2>&1; then
      note peer "$name" "ok ($(( $(date +%s) - peer_start )) s, torch.compile's compiles included)"
    else
      note peer "$name" "FAILED (see peers.log; tables go without it)"
    fi
  done
  # No script may have run (--days of days without peers): then there is no peers.json.
  if compgen -G "$parts/peers_*.json" > /dev/null && python3 - "$out/peers.json" "$parts"/peers_*.json <<'PY'
import json, sys
figures = []
for path in sys.argv[2:]:
    figures += json.load(open(path))["figures"]
json.dump({"figures": figures}, open(sys.argv[1], "w"), indent=1)
PY
  then peers_args=(--peers "$out/peers.json"); fi
  run_seconds="$run_seconds$(printf '%7d    peers' "$(( $(date +%s) - peers_start ))")"$'\n'
else
  echo "== peers: skipped (no python3 with torch and a CUDA device)"
fi

touch "$out/bench.log"
mkdir -p "$out/plots"
part bench && echo "== benchmarks (log: $out/bench.log)"
for b in "$exe"/bin/day*; do
  part bench || break
  name=$(basename "$b")
  selected "$name" || continue
  echo "---- $name" | tee -a "$out/bench.log"
  # Days that draw a roofline of their default problem draw it here.
  extra=()
  help=$("$b" --help 2>&1) || { record_run "$name" bench 127 untimed; note bench "$name" "FAILED (--help did not run)"; failed=1; continue; }
  if printf '%s' "$help" | grep -q -- '--roofline'; then
    extra=(--roofline "$out/plots/$name-roofline.svg")
  fi
  started
  "$b" --json "$parts/$name.json" "${peers_args[@]}" "${extra[@]}" 2>&1 | tee -a "$out/bench.log"
  rc=${PIPESTATUS[0]}
  record_run "$name" bench "$rc"
  if [ "$rc" = 0 ]; then note bench "$name" ok; else note bench "$name" "FAILED (exit $rc)"; failed=1; fi
done

part sweeps && echo "== sweeps (plots: $out/plots/)"
for b in "$exe"/bin/day*; do
  part sweeps || break
  name=$(basename "$b")
  selected "$name" || continue
  help=$("$b" --help 2>&1) || { record_run "$name" sweep 127 untimed; note sweep "$name" "FAILED (--help did not run)"; failed=1; continue; }
  printf '%s' "$help" | grep -q -- '--sweep' || continue
  echo "---- $name --sweep" | tee -a "$out/bench.log"
  started
  "$b" --sweep --iters 20 --warmup 3 --plot "$out/plots/$name.svg" "${peers_args[@]}" 2>&1 | tee -a "$out/bench.log"
  rc=${PIPESTATUS[0]}
  record_run "$name" sweep "$rc"
  if [ "$rc" = 0 ]; then note sweep "$name" ok; else note sweep "$name" "FAILED (exit $rc)"; failed=1; fi
done

# The PyTorch extension (torch_layers/): its wheel, installed for this run only.
if part torch || part train; then
  site="$parts/site"
  if ! python3 -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
    echo "== torch: skipped (no python3 with torch and a CUDA device)"
    part torch && note torch pytest "SKIPPED (no torch with CUDA)"
    part train && note train train_gpt "SKIPPED (no torch with CUDA)"
  elif ! python3 -m pip install --quiet --no-index --no-deps --no-compile --target "$site" \
         "$here"/torch_layers/wheels/*.whl > "$out/torch.log" 2>&1; then
    echo "== torch: the wheel did not install (log: $out/torch.log)"
    note torch wheel "FAILED (pip install)"; failed=1
  else
    if part torch; then
      echo "== torch: the extension's tests (log: $out/torch.log)"
      started
      (cd "$parts" && PYTHONPATH="$site" python3 -m pytest -q -rs -p no:cacheprovider \
         "$here/torch_layers/tests") 2>&1 | tee -a "$out/torch.log"
      rc=${PIPESTATUS[0]}
      record_run all torch "$rc"
      if [ "$rc" = 0 ]; then note torch pytest ok; else note torch pytest "FAILED (exit $rc)"; failed=1; fi
    fi
    if part train; then
      echo "== train: a small GPT on PyTorch's layers and on ours (log: $out/train.log)"
      started
      # Its corpus is the repository's own text: the bundle sits in the checkout's target/.
      PYTHONPATH="$site" PYTHONUNBUFFERED=1 python3 "$here/torch_layers/examples/train_gpt.py" \
        --corpus-root "$here/../.." --out "$out/train_gpt" 2>&1 | tee "$out/train.log"
      rc=${PIPESTATUS[0]}
      record_run all train "$rc"
      if [ "$rc" = 0 ]; then note train train_gpt ok; else note train train_gpt "FAILED (exit $rc)"; failed=1; fi
      gpus=$(python3 -c 'import torch; print(torch.cuda.device_count())' 2>/dev/null || echo 0)
      if [ "$gpus" -lt 2 ]; then
        note train train_gpt_ddp "SKIPPED ($gpus GPU; data parallel training needs 2)"
      elif [ "$rc" != 0 ]; then
        note train train_gpt_ddp "SKIPPED (train_gpt failed: no one-GPU run to compare with)"
      else
        echo "== train: the same GPT on 2 GPUs with DistributedDataParallel (log: $out/train_ddp.log)"
        started
        PYTHONPATH="$site" PYTHONUNBUFFERED=1 python3 -m torch.distributed.run --standalone \
          --nproc-per-node 2 "$here/torch_layers/examples/train_gpt_ddp.py" \
          --corpus-root "$here/../.." --against "$out/train_gpt/results.json" \
          --out "$out/train_gpt_ddp" 2>&1 | tee "$out/train_ddp.log"
        rc=${PIPESTATUS[0]}
        record_run all train_ddp "$rc"
        if [ "$rc" = 0 ]; then note train train_gpt_ddp ok; else note train train_gpt_ddp "FAILED (exit $rc)"; failed=1; fi
      fi
    fi
  fi
fi

# The --days selection as verify.py and sanitize.py take it (day05,day10), or nothing.
days_args=()
[ -z "$days" ] || { d=${days#,}; days_args=(--days "${d%,}"); }

if part verify; then
  if [ ! -f "$here/verify/verify.py" ]; then
    note verify all "SKIPPED (no verify/ in the bundle)"
  elif python3 -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
    echo "== verify: every day's outputs recomputed with PyTorch (log: $out/verify.log)"
    started
    python3 "$here/verify/verify.py" --bin "$exe/bin" --out "$out/verify" "${days_args[@]}" 2>&1 \
      | tee "$out/verify.log"
    rc=${PIPESTATUS[0]}
    record_run all verify "$rc"
    if [ "$rc" = 0 ]; then note verify all ok; else note verify all "FAILED (exit $rc)"; failed=1; fi
  else
    echo "== verify: skipped (no python3 with torch and a CUDA device)"
    note verify all "SKIPPED (no torch with CUDA)"
  fi
fi

if [ "$criterion" = 1 ]; then
  # Criterion keeps each bench's history in CRITERION_HOME: beside the bundle, so a second
  # run on this host prints its change against the first.
  export CRITERION_HOME="$here/criterion"
  echo "== criterion benches (log: $out/criterion.log)"
  : > "$out/criterion.log"
  benches_run=0
  for b in "$exe"/benches/*; do
    [ -e "$b" ] || continue
    name=$(basename "$b")
    selected "$name" || continue
    benches_run=$((benches_run + 1))
    echo "---- $name" | tee -a "$out/criterion.log"
    started
    "$b" --bench 2>&1 | tee -a "$out/criterion.log"
    rc=${PIPESTATUS[0]}
    record_run "$name" criterion "$rc"
    if [ "$rc" = 0 ]; then note bench "$name" ok; else note bench "$name" "FAILED (exit $rc)"; failed=1; fi
  done
  if [ "$benches_run" = 0 ]; then
    note bench all "FAILED (--bench, but no bench of the selected days in the bundle)"
    record_run all criterion 2 untimed
    failed=1
  fi
fi

if [ "$sanitize" = 1 ]; then
  sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)
  if [ -z "$sanitizer" ]; then
    echo "== sanitize: skipped (no compute-sanitizer on this host)"
    note sanitize all "SKIPPED (no compute-sanitizer)"
  else
    echo "== sanitize: small problems under $sanitizer (log: $out/sanitize.log)"
    started
    python3 "$here/verify/sanitize.py" --bin "$exe/bin" --sanitizer "$sanitizer" \
      --out "$out/sanitize" --jobs "$jobs" "${days_args[@]}" 2>&1 | tee "$out/sanitize.log"
    rc=${PIPESTATUS[0]}
    record_run all sanitize "$rc"
    if [ "$rc" = 0 ]; then note sanitize all ok; else note sanitize all "FAILED (exit $rc)"; failed=1; fi
  fi
fi

# What the kernel cache did: how many kernel files the run loaded and how many it compiled.
# With a bundled cache made by this host's NVRTC, a compile for Hopper (sm_90, sm_90a) is a
# kernel the bundle should have held (a build missing from a day's kernel_builds(), or
# options that differ from them): the run fails and names it.
loaded=$(grep -c '^loaded' "$DAYS_OF_GPU_KERNEL_LOG")
compiled=$(grep -c '^compiled' "$DAYS_OF_GPU_KERNEL_LOG")
if [ "$cache_off" = 1 ]; then
  echo "== kernels: the kernel cache is off (DAYS_OF_GPU_KERNEL_CACHE=$DAYS_OF_GPU_KERNEL_CACHE): every kernel was compiled here"
else
  echo "== kernels: $loaded loaded from the cache, $compiled compiled in this run"
fi
if [ -n "$bundled_nvrtc" ]; then
  # Kernels of edited sources (--sources) are expected to compile here; the rest are not.
  missed=$(awk -F'\t' -v v="$bundled_nvrtc" '$1 == "compiled" && $4 == v && $5 !~ /^edited/ && ($2 == "sm_90" || $2 == "sm_90a") { print $3 " for " $2 }' \
    "$DAYS_OF_GPU_KERNEL_LOG" | sort | uniq -c)
  other=$(awk -F'\t' -v v="$bundled_nvrtc" '$1 == "compiled" && $4 != v { print $4 }' "$DAYS_OF_GPU_KERNEL_LOG" | sort -u | tr '\n' ' ')
  if [ -n "$missed" ]; then
    echo "compiled here although the bundle is for this GPU and NVRTC (missing from a day's kernel_builds()?):"
    printf '%s\n' "$missed"
    note kernels cache "FAILED ($compiled compiled: kernels the bundle did not hold)"
    record_run kernel-cache kernels 1 untimed
    failed=1
  elif [ -n "$other" ]; then
    note kernels cache "ok, but this host's NVRTC ($other) is not the bundle's ($bundled_nvrtc): $compiled compiled here"
    record_run kernel-cache kernels 0 untimed
  else
    note kernels cache "ok ($loaded loaded, $compiled compiled)"
    record_run kernel-cache kernels 0 untimed
  fi
fi

# The files of --sources that differ from the bundle's copies, in anything the run compiled or
# loaded: results.json names them, so no report passes them off as the commit's kernels.
edited_json=""
if [ -n "$sources" ]; then
  edited=$(awk -F'\t' '$5 ~ /^edited: / { sub(/^edited: /, "", $5); print $5 }' "$DAYS_OF_GPU_KERNEL_LOG" \
    | tr ',' '\n' | sort -u)
  for f in $edited; do edited_json="$edited_json${edited_json:+,}$(json_string "$f")"; done
  note kernels sources "from $sources; edited since the bundle: $(printf '%s' "${edited:-none}" | tr '\n' ' ')"
fi

{
  printf '{"commit":"%s","dirty":%s,"built_at":"%s","run_at":"%s","edited_kernel_sources":[%s],"tests":[%s],"runs":[%s],"days":[' \
    "$COMMIT" "$DIRTY" "$BUILT_AT" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$edited_json" "$tests_json" "$runs_json"
  first=1
  for f in "$parts"/day*.json; do
    [ -e "$f" ] || continue
    [ $first = 1 ] || printf ','
    first=0
    cat "$f"
  done
  printf ']}\n'
} > "$out/results.json.tmp" && mv "$out/results.json.tmp" "$out/results.json"

[ -z "$run_seconds" ] || { echo "== wall seconds of the other parts"; printf '%s' "$run_seconds"; }
echo "== summary (commit $COMMIT$([ "$DIRTY" = true ] && echo ', with uncommitted changes')$([ -n "$sources" ] && echo ", kernel sources from $sources"))"
printf '%s' "$summary"
echo "results: $out/results.json"
exit $failed
