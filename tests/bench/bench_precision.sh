#!/usr/bin/env bash
# By hand, not CI: train.precision = fp32 against bf16 (issue 22, item 4),
# each model's shipped config for its whole schedule at NP ranks, for each
# seed. Per run: the final test accuracy (the gpt: its final validation
# loss, test_loss, in nats per token), the median samples/s and mfu over the epochs after the first (the
# first pays the probe, page faults and warm-up), and the gemm kernels that
# ran (run.json). Then per (model, precision) the means over seeds, the
# accuracy gap bf16 - fp32 and the speed ratio bf16 / fp32 (of the medians).
#   tests/bench/bench_precision.sh [MODELS="resnet vit gpt"] [NP=2] [SEEDS="0 1 2"] [EPOCHS=config]
# The precisions alternate run by run (a change of the machine's load hits
# both alike), but accuracy does not depend on load and speed does: take
# speed from a quiet machine, or from short runs (EPOCHS=2) made for it.
# The gpt needs data/moby-dick (launch/get-data.sh moby-dick). Prints the
# CPU model, its bf16 flags and OPENBLAS_* first.
set -euo pipefail
MODELS=${1:-"resnet vit gpt"} NP=${2:-2} SEEDS=${3:-"0 1 2"} EPOCHS=${4:-}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BIN=${CT_BINARY:-$ROOT/build/ctrain-dist}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
W=$(mktemp -d /tmp/ct-bench-precision-XXXXXX)
trap 'rm -rf "$W"' EXIT
declare -A CFG=([mlp]=fmnist-mlp [cnn]=fmnist-cnn [resnet]=fmnist-resnet [vit]=fmnist-vit
                [gpt]=moby-gpt [cifar-resnet]=cifar10-resnet)
echo "cpu: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs, bf16 flags: $(grep -o 'avx512_bf16\|amx_bf16' /proc/cpuinfo | sort -u | tr '\n' ' ')"
echo "OPENBLAS env: $(env | grep '^OPENBLAS_' | tr '\n' ' ')"
echo "load at start: $(uptime)"
echo "model precision seed final samples_per_s mfu kernels"
for model in $MODELS; do
  for seed in $SEEDS; do
    for p in fp32 bf16; do
      d=$W/$model-$p-$seed
      extra=()
      [ -z "$EPOCHS" ] || extra+=(--set train.epochs="$EPOCHS")
      (cd "$ROOT" && mpiexec -np "$NP" "$BIN" --config "configs/${CFG[$model]}.ini" --run-dir "$d" \
        --set train.seed="$seed" --set train.precision="$p" --set checkpoint.every_epochs=0 \
        --set log.every_steps=0 "${extra[@]}" >"$d.log" 2>&1) ||
        { echo "run failed: $d"; tail -5 "$d.log"; exit 1; }
      python3 - "$d" "$model" "$p" "$seed" <<'PY' | tee -a "$W/rows"
import json, statistics, sys
d, model, p, seed = sys.argv[1:]
rows = [json.loads(l) for l in open(d + "/metrics.jsonl") if l.strip() and '"epoch"' in l]
rows = [r for r in rows if not r.get("partial")] or rows
later = rows[1:] or rows
last = rows[-1]
final = last["test_loss"] if model == "gpt" else last["test_acc"]
run = json.load(open(d + "/run.json"))
kern = run.get("gemm", run.get("kernels", "?"))
if isinstance(kern, dict):
    kern = ",".join(f"{k}={v}" for k, v in sorted(kern.items()) if isinstance(v, (str, int)))
print(f"{model} {p} {seed} {final:.4f} {statistics.median(r['samples_per_s'] for r in later):.1f} "
      f"{statistics.median(r['mfu'] for r in later):.4f} {str(kern).replace(' ', '_')}")
PY
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
    by[(f[0], f[1])].append([float(x) for x in f[3:6]])
mean = lambda v, i: sum(r[i] for r in v) / len(v)
med = lambda v, i: statistics.median(r[i] for r in v)
print("\nmodel precision runs final_mean samples_per_s_median mfu_median | bf16-fp32 final, bf16/fp32 speed")
for model in dict.fromkeys(m for m, _ in by):
    for p in ("fp32", "bf16"):
        v = by.get((model, p))
        if not v:
            continue
        line = f"{model} {p} {len(v)} {mean(v, 0):.4f} {med(v, 1):.1f} {med(v, 2):.4f}"
        a = by.get((model, "fp32"))
        if p == "bf16" and a:
            line += f" | {mean(v, 0) - mean(a, 0):+.4f}, {med(v, 1) / med(a, 1):.3f}x"
        print(line)
PY
