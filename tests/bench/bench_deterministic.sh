#!/usr/bin/env bash
# By hand, not CI: the cost of train.deterministic = true against false at
# the same N, for the shipped mlp and cnn configs. Each variant runs R times
# for STEPS steps (no checkpoints, no evaluation until the end); prints the
# median and the best samples_per_s (training time only) per variant and
# the overhead of each.
#   tests/bench/bench_deterministic.sh [NP=2] [STEPS=100] [R=5] [MICRO=128] [MODELS="mlp cnn"]
# MICRO is the deterministic micro-batch: 128 of a global batch of 256 gives
# each of 2 ranks one micro-batch, the same products as the default mode
# (at NP=1 use 256 for the same).
# CT_BINARY_BEFORE=path/to/an/older/ctrain-dist also runs that binary beside
# CT_BINARY (default build/ctrain-dist) in every round, so a before/after
# comparison sees the same machine load.
set -euo pipefail
NP=${1:-2} STEPS=${2:-100} R=${3:-5} MICRO=${4:-128} MODELS=${5:-"mlp cnn"}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
declare -A BIN=([after]=${CT_BINARY:-$ROOT/build/ctrain-dist})
VARIANTS=after
if [ -n "${CT_BINARY_BEFORE:-}" ]; then
  BIN[before]=$CT_BINARY_BEFORE
  VARIANTS="before after"
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
W=$(mktemp -d /tmp/ct-bench-det-XXXXXX)
trap 'rm -rf "$W"' EXIT
median() { sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
best() { sort -g | tail -1; }
overhead() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f%%", (a / b - 1) * 100 }'; }
echo "load at start: $(uptime)"
echo "model np binary micro median_false median_true overhead best_false best_true best_overhead"
# The variants alternate run by run, so a change of the machine's load (it
# is shared) hits all of them alike.
for model in $MODELS; do
  for ((i = 0; i < R; i++)); do
    for v in $VARIANTS; do
      for det in false true; do
        d=$W/$model-$v-$det-$i
        mpiexec --bind-to none -np "$NP" "${BIN[$v]}" --config "$ROOT/configs/fmnist-$model.ini" \
          --run-dir "$d" --set train.max_steps="$STEPS" --set checkpoint.every_epochs=0 \
          --set dist.threads=1 --set train.deterministic=$det --set train.micro_batch="$MICRO" \
          >"$d.log" 2>&1
        python3 "$ROOT/tests/e2e/jsonl.py" "$d/metrics.jsonl" -1 samples_per_s >>"$W/$model-$v-$det.sps"
      done
    done
  done
  for v in $VARIANTS; do
    f=$W/$model-$v-false.sps t=$W/$model-$v-true.sps
    mf=$(median <"$f") mt=$(median <"$t") bf=$(best <"$f") bt=$(best <"$t")
    echo "$model $NP $v $MICRO $mf $mt $(overhead "$mf" "$mt") $bf $bt $(overhead "$bf" "$bt")"
    echo "  runs false: $(tr '\n' ' ' <"$f")"
    echo "  runs true:  $(tr '\n' ' ' <"$t")"
  done
done
echo "load at end: $(uptime)"
