#!/usr/bin/env bash
# Fuzz smoke test (CI): build the libFuzzer harnesses, replay every
# regression input and seed, then fuzz each harness for SECONDS (default 60),
# two at a time. Fails on any finding (crash, leak, sanitizer report,
# out-of-memory, timeout) and prints the artifact and the report.
#
#   tests/fuzz/run.sh [SECONDS]
#
# Environment: CT_FUZZ_BUILD (build directory, default build-fuzz: configured
# here with CC=clang -DCT_FUZZ=ON when it is not yet), CT_FUZZ_JOBS (harnesses
# at once, default 2), CT_FUZZ_HARNESSES (default "ckpt idx config record json npy tokens").
# The committed corpora (tests/fuzz/corpus/) are copied, never grown: what a
# run finds new stays in its temporary directory.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
secs=${1:-60}
build=${CT_FUZZ_BUILD:-$root/build-fuzz}
jobs=${CT_FUZZ_JOBS:-2}
harnesses=(${CT_FUZZ_HARNESSES:-ckpt idx config record json npy tokens bpe weights})
case $secs in ''|*[!0-9]*) echo "run.sh: SECONDS must be a whole number, got '$secs'" >&2; exit 2 ;; esac

t0=$(date +%s)
if [ ! -f "$build/CMakeCache.txt" ]; then
  CC=${CC:-clang} cmake -S "$root" -B "$build" -DCT_WERROR=ON -DCT_BUILD_TESTS=OFF -DCT_FUZZ=ON
fi
cmake --build "$build" -j"$(nproc)" --target ct_fuzz
t1=$(date +%s)
echo "fuzz: built in $((t1 - t0)) s"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# libFuzzer's own defaults, spelled out: leaks are findings, 2 GiB of RSS
# (and of one malloc) is the limit; one input may take 10 s (the harnesses
# take microseconds to milliseconds).
opts=(-timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=2048 -detect_leaks=1)
fail=0

# 1. Regression inputs (every finding so far) and the seeds: each must run clean.
for h in "${harnesses[@]}"; do
  exe=$build/tests/fuzz/fuzz_$h
  inputs=("$here/corpus/$h"/*)
  [ -d "$here/regress/$h" ] && inputs+=("$here/regress/$h"/*)
  if ! "$exe" "${opts[@]}" "${inputs[@]}" >"$work/replay-$h.log" 2>&1; then
    echo "fuzz: $h: a regression input or seed fails:"
    grep -E "^Running:" "$work/replay-$h.log" | tail -1
    grep -E -A40 "ERROR: |runtime error|^fuzz_[a-z]+:" "$work/replay-$h.log" | head -60
    fail=1
  else
    echo "fuzz: $h: ${#inputs[@]} seeds and regression inputs replay clean"
  fi
done
[ "$fail" -eq 0 ] || exit 1

# 2. Fuzz, `jobs` harnesses at a time.
run_one() {
  local h=$1
  mkdir -p "$work/$h/corpus" "$work/$h/artifacts"
  cp "$here/corpus/$h"/* "$work/$h/corpus/"
  local dict=()
  [ -f "$here/$h.dict" ] && dict=(-dict="$here/$h.dict")
  "$build/tests/fuzz/fuzz_$h" "${opts[@]}" "${dict[@]}" -max_total_time="$secs" -print_final_stats=1 \
    -artifact_prefix="$work/$h/artifacts/" "$work/$h/corpus" >"$work/$h/log" 2>&1
}
pids=()
names=()
for h in "${harnesses[@]}"; do
  run_one "$h" &
  pids+=($!)
  names+=("$h")
  if [ "${#pids[@]}" -ge "$jobs" ]; then
    wait "${pids[0]}" || echo "$? ${names[0]}" >>"$work/failed"
    pids=("${pids[@]:1}")
    names=("${names[@]:1}")
  fi
done
for i in "${!pids[@]}"; do
  wait "${pids[$i]}" || echo "$? ${names[$i]}" >>"$work/failed"
done

for h in "${harnesses[@]}"; do
  last=$(grep -E '^#[0-9]+' "$work/$h/log" | tail -1 || true)
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/$h/log")
  echo "fuzz: $h: ${execs:-?} execs in ${secs} s; ${last:-no status line}"
  if ls "$work/$h/artifacts"/* >/dev/null 2>&1 || grep -q "^[0-9]* $h\$" "$work/failed" 2>/dev/null; then
    echo "fuzz: $h: FINDING (add the input under tests/fuzz/regress/$h/ once fixed):"
    for a in "$work/$h/artifacts"/*; do
      [ -e "$a" ] || continue
      echo "  artifact $(basename "$a") ($(stat -c %s "$a") bytes), base64: $(head -c 4096 "$a" | base64 -w0)"
    done
    grep -E -A40 "ERROR: |runtime error|SUMMARY" "$work/$h/log" | head -80
    fail=1
  fi
done
echo "fuzz: done in $(( $(date +%s) - t0 )) s"
exit "$fail"
