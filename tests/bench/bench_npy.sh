#!/usr/bin/env bash
# Issue 20's two by-hand numbers for the .npy path, side by side (run by hand,
# never by CI; results in tests/bench/README.md):
#
# 1. mlp throughput from .npy against IDX: configs/fmnist-mlp.ini at N ranks,
#    the same Fashion-MNIST images as uint8 .npy (made here with numpy from
#    the IDX files), R rounds alternating IDX and npy; the training
#    samples_per_s of every epoch after the first (metrics.jsonl), their
#    medians and npy/IDX - 1. Both sides must end with the same
#    param_sha256 (the same arithmetic).
# 2. time to the first step with a large .npy training set (BIG, e.g. the
#    2 GiB one of tests/bench/README.md): from mpirun's start to the first
#    line of steps.jsonl, against the SHA-256 of the file alone (hashlib, the
#    same OpenSSL code as ours), page cache warm for both.
#
#   tests/bench/bench_npy.sh [-n N] [-r ROUNDS] [-e EPOCHS] [-b BIG.npy BIG_LABELS.npy]
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BIN=${CT_BINARY:-$ROOT/build/ctrain-dist}
PY=/usr/bin/python3
DATA=/usr/share/datasets/fashion-mnist
N=2 R=3 E=3 BIG= BIGL=
while getopts "n:r:e:b:" o; do
  case $o in
    n) N=$OPTARG ;; r) R=$OPTARG ;; e) E=$OPTARG ;;
    b) BIG=$OPTARG; BIGL=${!OPTIND}; OPTIND=$((OPTIND + 1)) ;;
    *) sed -n '2,16p' "$0"; exit 2 ;;
  esac
done
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
W=$(mktemp -d /tmp/bench-npy-XXXXXX)
trap 'rm -rf "$W"' EXIT
echo "lscpu: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs," \
     "bf16: $(grep -q avx512_bf16 /proc/cpuinfo && echo avx512_bf16 || echo none);" \
     "OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset} OPENBLAS_L2_SIZE=${OPENBLAS_L2_SIZE:-unset}; $(date -u +%FT%TZ)"

"$PY" - "$DATA" "$W" <<'PY'
import gzip, sys, numpy as np
d, w = sys.argv[1], sys.argv[2]
def idx(name):
    b = gzip.open("%s/%s" % (d, name)).read()
    nd = b[3]
    dims = [int.from_bytes(b[4 + 4 * i:8 + 4 * i], "big") for i in range(nd)]
    return np.frombuffer(b, np.uint8, offset=4 + 4 * nd).reshape(dims)
for split, pre in (("train", "train"), ("test", "t10k")):
    np.save("%s/%s-x.npy" % (w, split), idx(pre + "-images-idx3-ubyte.gz"))
    np.save("%s/%s-y.npy" % (w, split), idx(pre + "-labels-idx1-ubyte.gz"))
PY
npy=(--set data.dir="$W" --set data.train_images=train-x.npy --set data.train_labels=train-y.npy
     --set data.test_images=test-x.npy --set data.test_labels=test-y.npy)
run() { # run TAG ARGS...: one training run; its epochs' samples/s (after the first) to $W/TAG.sps
  local tag=$1
  shift
  rm -rf "$W/run-$tag"
  mpirun --oversubscribe -np "$N" "$BIN" --config "$ROOT/configs/fmnist-mlp.ini" --run-dir "$W/run-$tag" \
    --set train.epochs="$E" --set checkpoint.every_epochs=0 -q "$@" > "$W/$tag.log" 2>&1
  "$PY" -c '
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
ep = [r for r in recs if "samples_per_s" in r and not r.get("partial")]
print(" ".join("%.0f" % r["samples_per_s"] for r in ep[1:]), ep[-1]["param_sha256"][:12])' \
    "$W/run-$tag/metrics.jsonl"
}
idx_s=() npy_s=()
for ((i = 1; i <= R; i++)); do
  for side in idx npy; do
    if [ $((i % 2)) = 0 ]; then side=$([ $side = idx ] && echo npy || echo idx); fi
    if [ $side = idx ]; then out=$(run "idx$i"); else out=$(run "npy$i" "${npy[@]}"); fi
    echo "round $i $side: samples/s ${out% *}  param_sha256 ${out##* }"
    read -r -a v <<<"${out% *}"
    if [ $side = idx ]; then idx_s+=("${v[@]}"); else npy_s+=("${v[@]}"); fi
  done
done
"$PY" - "${idx_s[*]}" "${npy_s[*]}" <<'PY'
import statistics, sys
a = [float(x) for x in sys.argv[1].split()]
b = [float(x) for x in sys.argv[2].split()]
ma, mb = statistics.median(a), statistics.median(b)
print("median samples/s: IDX %.0f, npy %.0f: npy/IDX - 1 = %+.1f %% (%d epochs each)" % (ma, mb, 100 * (mb / ma - 1), len(a)))
PY

if [ -n "$BIG" ]; then
  cat "$BIG" "$BIGL" > /dev/null
  t=$("$PY" -c '
import hashlib, sys, time
t = time.perf_counter(); h = hashlib.sha256()
with open(sys.argv[1], "rb") as f:
    for b in iter(lambda: f.read(1 << 24), b""): h.update(b)
print("%.2f" % (time.perf_counter() - t))' "$BIG")
  rm -rf "$W/big"
  ln -sf "$(readlink -f "$BIG")" "$W/big-x.npy"
  ln -sf "$(readlink -f "$BIGL")" "$W/big-y.npy"
  t0=$(date +%s.%N)
  mpirun --oversubscribe -np "$N" "$BIN" --config "$ROOT/configs/fmnist-mlp.ini" --run-dir "$W/big" \
    "${npy[@]}" --set data.train_images=big-x.npy --set data.train_labels=big-y.npy \
    --set train.max_steps=3 --set log.every_steps=1 -q > "$W/big.log" 2>&1 &
  while [ ! -s "$W/big/steps.jsonl" ] && kill -0 $! 2>/dev/null; do sleep 0.01; done
  t1=$(date +%s.%N)
  wait $! || { echo "big run failed:"; cat "$W/big.log"; exit 1; }
  awk -v a="$t0" -v b="$t1" -v s="$t" 'BEGIN { printf "first step after %.2f s; SHA-256 of the file alone %.2f s; the rest %.2f s\n", b - a, s, b - a - s }'
fi
