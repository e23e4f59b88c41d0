#!/usr/bin/env bash
# The step engine's settings that must not change a single bit (same N):
# - dist.grad_sync = overlap (buckets started from the backward hook) and
#   blocking (all buckets after backward) give identical parameter digests and
#   per-step losses at N = 2 and 4, with the default buckets and with buckets
#   so small that every layer is its own (many collectives in flight);
# - data.prefetch = 0 (gather in the step) and 2 or 5 (a loader thread ahead
#   of the step) give identical digests;
# - data.shared = false (a private copy of the images per rank) and true (one
#   copy per node in an MPI shared-memory window) give identical digests;
# - a stop by max_steps at an epoch's end is a whole epoch;
# - metrics.jsonl carries every rank's phase split and the slowest rank.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
CNN=$CONFIGS/fmnist-cnn.ini
S=30
base=(--set train.max_steps=$S --set log.every_steps=1 --set checkpoint.every_epochs=0)
cnn_small=(--set model.channels=4,8 --set model.hidden=16 --set train.global_batch=64 --set train.eval_batch=auto)

# (Under the sanitizers at N = 2 alone: lib.sh nps.)
for np in $(nps 2 4); do
  for model in mlp cnn; do
    if [ $model = mlp ]; then cfg=(--config "$CONFIG"); else cfg=(--config "$CNN" "${cnn_small[@]}"); fi
    # The same buckets in both modes (the bucket size may choose another
    # allreduce algorithm, so another summation order, at N >= 3).
    for mb in 4 0.01; do
      ref=$WORK/$model-blocking-$np-$mb
      dir=$WORK/$model-overlap-$np-$mb
      if run_np $np "$ref" "${cfg[@]}" --run-dir "$ref" "${base[@]}" --set dist.grad_sync=blocking --set dist.bucket_mb=$mb &&
         run_np $np "$dir" "${cfg[@]}" --run-dir "$dir" "${base[@]}" --set dist.grad_sync=overlap --set dist.bucket_mb=$mb; then
        same "np=$np $model overlap vs blocking (bucket_mb=$mb)" "$ref" "$dir"
      else
        fail "np=$np $model bucket_mb=$mb runs"; cat "$ref.log" "$dir.log"
      fi
    done
  done
done

# Prefetch depth and the node-shared images: the same batches, the same bits.
ref=$WORK/mlp-overlap-2-4
for opt in data.prefetch=0 data.prefetch=5 data.shared=false; do
  dir=$WORK/mlp-${opt//=/-}
  if run_np 2 "$dir" --config "$CONFIG" --run-dir "$dir" "${base[@]}" --set "$opt"; then
    same "np=2 mlp $opt vs the defaults" "$ref" "$dir"
  else
    fail "np=2 mlp $opt run"; cat "$dir.log"
  fi
done

# A stop by max_steps right at an epoch's end completes that epoch: not
# partial, and a resume starts the next epoch.
dir=$WORK/mlp-epoch-end
if run_np 2 "$dir" --config "$CONFIG" --run-dir "$dir" --set train.max_steps=234 --set checkpoint.every_epochs=0 &&
   [ "$(metric "$dir/metrics.jsonl" -1 partial)" = false ] && [ "$(metric "$dir/metrics.jsonl" -1 step)" = 234 ] &&
   run_np 2 "$dir.b" --config "$CONFIG" --run-dir "$dir" --set train.max_steps=240 --resume auto &&
   [ "$(metric "$dir/metrics.jsonl" -1 epoch)" = 2 ] && [ "$(metric "$dir/metrics.jsonl" -1 partial)" = true ]; then
  pass "max_steps at the epoch's end: a whole epoch, the resume starts epoch 2"
else
  fail "max_steps at the epoch's end"; cat "$dir.log" "$dir/metrics.jsonl"
fi

# The phase split of every rank, and which rank was slowest (of the largest
# N that ran).
np=$(nps 2 4 | awk '{print $NF}')
m=$WORK/mlp-overlap-$np-4/metrics.jsonl
if n=$(python3 - "$m" "$np" <<'PY'
import json, sys
rec = json.loads(open(sys.argv[1]).read().splitlines()[-1])
N = int(sys.argv[2])
for k in ("data_wait_s", "forward_backward_s", "exposed_comm_s", "optim_s"):
    v = rec[k]
    assert isinstance(v, list) and len(v) == rec["world"] == N, k
    assert all(x >= 0 for x in v), k
    assert abs(rec[k + "_max"] - max(v)) < 1e-3, k
assert 0 <= rec["slowest_rank"] < N
assert rec["forward_backward_s_max"] > 0
print(rec["slowest_rank"])
PY
); then
  pass "metrics.jsonl: per-rank phase arrays of $np ranks, their max, slowest rank $n"
else
  fail "metrics.jsonl phase split"; tail -1 "$m"
fi
finish
