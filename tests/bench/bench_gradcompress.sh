#!/usr/bin/env bash
# By hand, not CI: dist.grad_compress = none against bf16 and bf16 with
# error feedback, the shipped mlp config (5 epochs) at NP ranks, for each
# seed. Per run: the exposed communication's share of the training time
# (metrics.jsonl: exposed_comm_s of the slowest rank and the mean over ranks,
# summed over epochs, against epoch_s summed) and the final test accuracy;
# then the mean over seeds per variant and the accuracy gap to none.
#   tests/bench/bench_gradcompress.sh [NP=2] [SEEDS="0 1 2"] [EPOCHS=5]
# The variants alternate run by run (the machine is shared: a change of its
# load hits all of them alike). Prints the CPU model and OPENBLAS_* first.
set -euo pipefail
NP=${1:-2} SEEDS=${2:-"0 1 2"} EPOCHS=${3:-5}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BIN=${CT_BINARY:-$ROOT/build/ctrain-dist}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
W=$(mktemp -d /tmp/ct-bench-gc-XXXXXX)
trap 'rm -rf "$W"' EXIT
declare -A SETS=([none]="" [bf16]="--set dist.grad_compress=bf16"
                 [bf16fb]="--set dist.grad_compress=bf16 --set dist.grad_compress_feedback=true")
echo "cpu: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs; OPENBLAS env: $(env | grep '^OPENBLAS_' | tr '\n' ' ')"
echo "load at start: $(uptime)"
echo "variant seed epoch_s_total exposed_max_s exposed_mean_s share_max share_mean test_acc"
for seed in $SEEDS; do
  for v in none bf16 bf16fb; do
    d=$W/$v-$seed
    # shellcheck disable=SC2086
    mpiexec -np "$NP" "$BIN" --config "$ROOT/configs/fmnist-mlp.ini" --run-dir "$d" \
      --set train.seed="$seed" --set train.epochs="$EPOCHS" --set checkpoint.every_epochs=0 \
      ${SETS[$v]} >"$d.log" 2>&1
    python3 - "$d/metrics.jsonl" "$v" "$seed" <<'PY' | tee -a "$W/rows"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
ep = sum(r["epoch_s"] for r in rows)
mx = sum(r["exposed_comm_s_max"] for r in rows)
mean = sum(sum(r["exposed_comm_s"]) / len(r["exposed_comm_s"]) for r in rows)
print(f"{sys.argv[2]} {sys.argv[3]} {ep:.3f} {mx:.4f} {mean:.4f} {mx/ep:.4f} {mean/ep:.4f} {rows[-1]['test_acc']:.4f}")
PY
  done
done
echo "load at end: $(uptime)"
python3 - "$W/rows" <<'PY'
import sys
from collections import defaultdict
by = defaultdict(list)
for l in open(sys.argv[1]):
    f = l.split()
    by[f[0]].append([float(x) for x in f[2:]])
mean = lambda v, i: sum(r[i] for r in v) / len(v)
print("variant runs share_max share_mean test_acc acc_minus_none")
for v in ("none", "bf16", "bf16fb"):
    if by[v]:
        print(f"{v} {len(by[v])} {mean(by[v], 3):.4f} {mean(by[v], 4):.4f} {mean(by[v], 5):.4f} "
              f"{mean(by[v], 5) - mean(by['none'], 5):+.4f}")
PY
