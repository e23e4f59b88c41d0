#!/usr/bin/env bash
# By hand, not CI: what log.trace costs a step. For each model and rank
# count, ROUNDS alternating pairs of runs of STEPS steps, one without a
# trace and one tracing every step (log.trace = steps:1-STEPS: recording
# on for the whole epoch, so the mean step time includes every span
# recorded); per run the mean step time (epoch_s / steps: the slowest
# rank's wall time of the steps) and, traced, the median "step" span of
# trace.json, its event count and size. Then per (model, N) the medians and
# the ratio traced / untraced (the cost of recording; the window's clock
# alignment at its start is inside epoch_s too, its writing after the run is
# not: its time is printed from the log).
#   tests/bench/bench_trace.sh [MODELS="mlp cnn"] [NPS="2"] [ROUNDS=5] [STEPS=200]
# Prints the CPU model, its bf16 flags and OPENBLAS_* first.
set -euo pipefail
MODELS=${1:-"mlp cnn"} NPS=${2:-"2"} ROUNDS=${3:-5} STEPS=${4:-200}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BIN=${CT_BINARY:-$ROOT/build/ctrain-dist}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
W=$(mktemp -d /tmp/ct-bench-trace-XXXXXX)
trap 'rm -rf "$W"' EXIT
declare -A CFG=([mlp]=fmnist-mlp [cnn]=fmnist-cnn [resnet]=fmnist-resnet [vit]=fmnist-vit)
echo "cpu: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs, bf16 flags: $(grep -o 'avx512_bf16\|amx_bf16' /proc/cpuinfo | sort -u | tr '\n' ' ')"
echo "OPENBLAS env: $(env | grep '^OPENBLAS_' | tr '\n' ' ')"
echo "load at start: $(uptime)"
# The recorder alone, in a loop: ns per span recorded (two clock reads and
# the append, as an instrumented site pays) and per site when off (the
# relaxed load). Robust to the machine's load, unlike the runs below.
cat >"$W/span.c" <<'C'
#include <stdio.h>
#include "core/clock.h"
#include "core/trace.h"
int main(void)
{
    enum { N = 2000000 };
    ct_trace_init((size_t)N * sizeof(struct ct_trace_event), 0);
    double best_on = 1e9, best_off = 1e9;
    volatile int sink = 0;
    for (int rep = 0; rep < 5; rep++) {
        ct_trace_reset();
        ct_trace_set_on(1);
        double t0 = ct_now_s();
        for (int i = 0; i < N; i++) {
            const int tr = ct_trace_on();
            const double a = tr ? ct_now_s() : 0.0;
            if (tr)
                ct_trace_span(CT_TRACE_MAIN, "module", "layers.0", a, ct_now_s());
        }
        double on = (ct_now_s() - t0) / N * 1e9;
        ct_trace_set_on(0);
        t0 = ct_now_s();
        for (int i = 0; i < N; i++)
            sink += ct_trace_on();
        double off = (ct_now_s() - t0) / N * 1e9;
        best_on = on < best_on ? on : best_on;
        best_off = off < best_off ? off : best_off;
    }
    printf("%.1f %.2f\n", best_on, best_off);
    return sink;
}
C
gcc -std=c11 -O2 -D_POSIX_C_SOURCE=200809L -I"$ROOT/src" "$W/span.c" "$(dirname "$BIN")/libctrain.a" -o "$W/span" -lm
read -r NS_ON NS_OFF < <("$W/span")
echo "recorder: $NS_ON ns per span recorded, $NS_OFF ns per site when off"
echo "model np variant round step_ms span_median_ms events trace_mb"
for model in $MODELS; do
  for np in $NPS; do
    for ((k = 0; k < ROUNDS; k++)); do
      for v in off on; do
        d=$W/$model-$np-$v-$k
        win=off
        [ $v = off ] || win=steps:1-$STEPS
        (cd "$ROOT" && mpiexec --bind-to none -np "$np" "$BIN" --config "configs/${CFG[$model]}.ini" --run-dir "$d" \
          --set train.max_steps="$STEPS" --set checkpoint.every_epochs=0 --set checkpoint.every_steps=0 \
          --set log.every_steps=0 --set log.trace=$win >"$d.log" 2>&1) ||
          { echo "run failed: $d"; tail -5 "$d.log"; exit 1; }
        python3 - "$d" "$model" "$np" "$v" "$k" <<'PY' | tee -a "$W/rows"
import json, os, statistics, sys
d = sys.argv[1]
rows = [json.loads(l) for l in open(d + "/metrics.jsonl") if l.strip()]
steps = rows[-1]["step"]
ep = sum(r["epoch_s"] for r in rows)
span, n, mb = float("nan"), 0, 0.0
if os.path.exists(d + "/trace.json"):
    ev = json.load(open(d + "/trace.json"))["traceEvents"]
    n = sum(e["ph"] == "X" for e in ev)
    span = statistics.median(e["dur"] for e in ev if e.get("cat") == "step") / 1e3
    mb = os.path.getsize(d + "/trace.json") / 2**20
print(f"{sys.argv[2]} {sys.argv[3]} {sys.argv[4]} {sys.argv[5]} {1e3 * ep / steps:.4f} {span:.4f} {n} {mb:.2f} {steps}")
PY
      done
    done
  done
done
echo "load at end: $(uptime)"
grep -h "trace: steps" "$W"/*.log | head -2
python3 - "$W/rows" "$NS_ON" <<'PY'
import statistics, sys
ns_on = float(sys.argv[2])
from collections import defaultdict
by = defaultdict(list)
for l in open(sys.argv[1]):
    f = l.split()
    by[(f[0], int(f[1]), f[2])].append(f)
print("\n| model | N | step ms off | step ms on | ratio of medians | median per-round ratio | traced step span median ms | events | trace MiB | spans/step/rank | recording us/step (spans x ns) | recording / step span |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|")
for (model, np, v) in sorted(by):
    if v != "off" or (model, np, "on") not in by:
        continue
    a, b = by[(model, np, "off")], by[(model, np, "on")]
    med = lambda rows, i: statistics.median(float(r[i]) for r in rows)
    per = statistics.median(float(y[4]) / float(x[4]) for x, y in zip(a, b))
    steps = float(b[0][8])
    sps = med(b, 6) / np / steps
    rec_us = sps * ns_on / 1e3
    print(f"| {model} | {np} | {med(a, 4):.3f} | {med(b, 4):.3f} | {med(b, 4) / med(a, 4):.4f} | {per:.4f} | "
          f"{med(b, 5):.3f} | {int(med(b, 6))} | {med(b, 7):.2f} | {sps:.1f} | {rec_us:.2f} | "
          f"{rec_us / 1e3 / med(b, 5):.4%} |")
PY
