#!/usr/bin/env bash
# By hand, not CI: dist.shard_optimizer (ZeRO-1) against the allreduce path,
# side by side. For each model (mlp: SGD with momentum; vit and gpt: AdamW)
# and each rank count, ROUNDS alternating pairs of runs of STEPS steps (the
# machine is shared: a change of load hits both variants alike); per run
# the step time (epoch_s / steps, the slowest rank's wall time), the phases
# (exposed communication and optimizer of the slowest rank, per step),
# optim_state_bytes and peak_rss_mib per rank. Then per (model, N) the
# medians and the step-time ratio sharded / allreduce.
#   tests/bench/bench_shard.sh [MODELS="mlp vit gpt"] [NPS="1 2 4"] [ROUNDS=5] [STEPS=150]
# The gpt needs data/moby-dick (launch/get-data.sh moby-dick). Prints the CPU
# model, its bf16 flags and OPENBLAS_* first.
# MODELS may also name gpt-wide: the moby gpt at width 512, depth 6 (19 M
# parameters, 151 MB of AdamW state), global batch 4, evaluated on a 4 KiB
# validation shard: a model whose optimizer state is a large part of a
# rank's memory, for the peak-RSS column (use STEPS ~ 10).
set -euo pipefail
MODELS=${1:-"mlp vit gpt"} NPS=${2:-"1 2 4"} ROUNDS=${3:-5} STEPS=${4:-150}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BIN=${CT_BINARY:-$ROOT/build/ctrain-dist}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
W=$(mktemp -d /tmp/ct-bench-shard-XXXXXX)
trap 'rm -rf "$W"' EXIT
declare -A CFG=([mlp]=fmnist-mlp [vit]=fmnist-vit [gpt]=moby-gpt [gpt-wide]=moby-gpt
                [cnn]=fmnist-cnn [resnet]=fmnist-resnet)
declare -A SET=([gpt-wide]="model.width=512 model.depth=6 model.heads=8 train.global_batch=4
                 data.dir=$W/moby-small schedule.warmup_steps=2")
if [[ " $MODELS " == *" gpt-wide "* ]]; then
  mkdir -p "$W/moby-small"
  ln -s "$ROOT/data/moby-dick/train.bin" "$W/moby-small/train.bin"
  head -c 4096 "$ROOT/data/moby-dick/val.txt" >"$W/val.txt"
  "$BIN" data tokenize --bytes "$W/val.txt" -o "$W/moby-small/val.bin" >/dev/null
fi
echo "cpu: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs, bf16 flags: $(grep -o 'avx512_bf16\|amx_bf16' /proc/cpuinfo | sort -u | tr '\n' ' ')"
echo "OPENBLAS env: $(env | grep '^OPENBLAS_' | tr '\n' ' ')"
echo "load at start: $(uptime)"
echo "model np variant round step_ms exposed_ms optim_ms optim_state_bytes peak_rss_mib"
for model in $MODELS; do
  for np in $NPS; do
    for ((k = 0; k < ROUNDS; k++)); do
      for v in allreduce sharded; do
        d=$W/$model-$np-$v-$k
        set_shard=false
        [ $v = allreduce ] || set_shard=true
        extra=()
        for kv in ${SET[$model]:-}; do extra+=(--set "$kv"); done
        (cd "$ROOT" && mpiexec -np "$np" "$BIN" --config "configs/${CFG[$model]}.ini" --run-dir "$d" \
          --set train.max_steps="$STEPS" --set checkpoint.every_epochs=0 --set checkpoint.every_steps=0 \
          --set log.every_steps=0 --set dist.shard_optimizer=$set_shard "${extra[@]}" >"$d.log" 2>&1) ||
          { echo "run failed: $d"; tail -5 "$d.log"; exit 1; }
        python3 - "$d/metrics.jsonl" "$model" "$np" "$v" "$k" <<'PY' | tee -a "$W/rows"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
steps = rows[-1]["step"]
ep = sum(r["epoch_s"] for r in rows)
ex = sum(r["exposed_comm_s_max"] for r in rows)
op = sum(r["optim_s_max"] for r in rows)
last = rows[-1]
print(f"{sys.argv[2]} {sys.argv[3]} {sys.argv[4]} {sys.argv[5]} {1e3 * ep / steps:.3f} "
      f"{1e3 * ex / steps:.3f} {1e3 * op / steps:.3f} {last.get('optim_state_bytes')} {last['peak_rss_mib']}")
PY
      done
    done
  done
done
echo "load at end: $(uptime)"
python3 - "$W/rows" <<'PY'
import statistics, sys
from collections import defaultdict
by = defaultdict(list)
for l in open(sys.argv[1]):
    f = l.split()
    by[(f[0], int(f[1]), f[2])].append([float(x) for x in f[4:]])
print("\nmodel np | step_ms allreduce sharded ratio | exposed_ms a s | optim_ms a s | optim_state_bytes a s | peak_rss_mib a s")
for (model, np, v) in sorted(by):
    if v != "allreduce" or (model, np, "sharded") not in by:
        continue
    a, s = by[(model, np, "allreduce")], by[(model, np, "sharded")]
    med = lambda rows, i: statistics.median(r[i] for r in rows)
    # The ratio of medians, and the median of the per-round ratios.
    pr = statistics.median(y[0] / x[0] for x, y in zip(a, s))
    print(f"{model} {np} | {med(a, 0):.3f} {med(s, 0):.3f} {med(s, 0) / med(a, 0):.3f} (per-round {pr:.3f}) | "
          f"{med(a, 1):.3f} {med(s, 1):.3f} | {med(a, 2):.3f} {med(s, 2):.3f} | "
          f"{med(a, 3):.0f} {med(s, 3):.0f} | {med(a, 4):.1f} {med(s, 4):.1f}")
PY
