#!/usr/bin/env bash
# Two builds side by side at the two ways of using a 2-core node: 1 rank x 2
# threads and 2 ranks x 1 thread (samples/s from metrics.jsonl, the mean of
# the last epoch's line, rounds alternating between the builds; medians
# printed). Made for issue 24 (the products' kernel must not depend on the
# thread count): run by hand, never by CI.
#
#   tests/bench/bench_threads.sh -a OLD_BINARY -b NEW_BINARY [-m "mlp cnn vit"] [-r 3] [-e 2]
#
# Prints one Markdown table and the machine (lscpu model, bf16 flags,
# OPENBLAS_*), as the bench README asks of every table.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
A="" B="" MODELS="mlp cnn vit" REPS=3 EPOCHS=2 STEPS=""
while getopts "a:b:m:r:e:s:" o; do
  case $o in
    a) A=$OPTARG ;; b) B=$OPTARG ;; m) MODELS=$OPTARG ;; r) REPS=$OPTARG ;; e) EPOCHS=$OPTARG ;;
    s) STEPS=$OPTARG ;;
    *) echo "usage: $0 -a OLD -b NEW [-m MODELS] [-r REPS] [-e EPOCHS] [-s MAX_STEPS]" >&2; exit 2 ;;
  esac
done
[ -x "$A" ] && [ -x "$B" ] || { echo "$0: -a and -b must name two ctrain-dist binaries" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

# one BIN NP THREADS MODEL: samples/s of the last metrics line.
one() {
  local bin=$1 np=$2 th=$3 model=$4 run=$work/run
  rm -rf "$run"
  local extra=()
  [ -n "$STEPS" ] && extra=(--set train.max_steps="$STEPS")
  mpirun --oversubscribe --bind-to none -np "$np" "$bin" --config "$ROOT/configs/fmnist-$model.ini" \
    --run-dir "$run" -q --set train.epochs="$EPOCHS" --set dist.threads="$th" \
    --set train.eval_every=1000 --set checkpoint.every_epochs=0 "${extra[@]}" >"$work/log" 2>&1 ||
    { cat "$work/log" >&2; return 1; }
  python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).read().splitlines()[-1])["samples_per_s"])' \
    "$run/metrics.jsonl"
}

med() { python3 -c 'import statistics,sys; print(round(statistics.median(map(float, sys.argv[1:]))))' "$@"; }

echo "| model | ranks x threads | A samples/s | B samples/s | B/A | rounds |"
echo "|---|---|---|---|---|---|"
for model in $MODELS; do
  for nt in "1 2" "2 1"; do
    read -r np th <<<"$nt"
    a=() b=()
    for ((r = 0; r < REPS; r++)); do
      a+=("$(one "$A" "$np" "$th" "$model")")
      b+=("$(one "$B" "$np" "$th" "$model")")
    done
    ma=$(med "${a[@]}") mb=$(med "${b[@]}")
    echo "| $model | $np x $th | $ma (${a[*]}) | $mb (${b[*]}) | $(python3 -c "print(f'{$mb/$ma:.2f}')") | $REPS |"
  done
done
echo
echo "A: $A"
echo "B: $B"
echo "CPU: $(lscpu | sed -n 's/^Model name: *//p'); bf16 flags: $(grep -o 'avx512_bf16\|amx_bf16' /proc/cpuinfo | sort -u | tr '\n' ' ')"
echo "OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE-unset} OPENBLAS_L2_SIZE=${OPENBLAS_L2_SIZE-unset}"
