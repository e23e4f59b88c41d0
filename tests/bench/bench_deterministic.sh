#!/usr/bin/env bash
# By hand, not CI: the cost of train.deterministic = true against false at
# the same N, for the shipped mlp and cnn configs. Each variant runs R times
# for STEPS steps (no checkpoints, no evaluation until the end); prints the
# median of samples_per_s (training time only) per variant and the overhead.
#   tests/bench/bench_deterministic.sh [NP=2] [STEPS=100] [R=5] [MICRO=128]
# MICRO is the deterministic micro-batch: 128 of a global batch of 256 gives
# each of 2 ranks one micro-batch, the same products as the default mode.
set -euo pipefail
NP=${1:-2} STEPS=${2:-100} R=${3:-5} MICRO=${4:-128}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BIN=${CT_BINARY:-$ROOT/build/ctrain-dist}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
W=$(mktemp -d /tmp/ct-bench-det-XXXXXX)
trap 'rm -rf "$W"' EXIT
median() { sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
echo "model np det micro median_samples_per_s runs"
# The two variants alternate run by run, so a change of the machine's load
# (it is shared) hits both alike.
for model in mlp cnn; do
  for ((i = 0; i < R; i++)); do
    for det in false true; do
      d=$W/$model-$det-$i
      mpiexec --bind-to none -np "$NP" "$BIN" --config "$ROOT/configs/fmnist-$model.ini" --run-dir "$d" \
        --set train.max_steps="$STEPS" --set checkpoint.every_epochs=0 --set dist.threads=1 \
        --set train.deterministic=$det --set train.micro_batch="$MICRO" >"$d.log" 2>&1
      python3 "$ROOT/tests/e2e/jsonl.py" "$d/metrics.jsonl" -1 samples_per_s >>"$W/$model-$det.sps"
    done
  done
  declare -A med
  for det in false true; do
    med[$det]=$(median <"$W/$model-$det.sps")
    echo "$model $NP $det $MICRO ${med[$det]} $(tr '\n' ' ' <"$W/$model-$det.sps")"
  done
  awk -v a="${med[false]}" -v b="${med[true]}" -v m=$model 'BEGIN { printf "%s overhead: %.1f%%\n", m, (a / b - 1) * 100 }'
  unset med
done
