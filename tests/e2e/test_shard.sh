#!/usr/bin/env bash
# dist.shard_optimizer = true (ZeRO-1, issue 25): 1/N of the optimizer state
# per rank, the same weights, checkpoints of one layout.
# - deterministic vit (AdamW, clipping at norm 1) sharded at N = 2, 3, 4 ends
#   with the param_sha256, per-step losses and test metrics of the unsharded
#   run at N = 1 (at N = 3 with the update in pieces);
# - the checkpoints' sections (names, shapes, sizes, digests) are the
#   unsharded run's, line for line in `inspect`, and `audit verify` passes;
# - the sharded N = 4 checkpoint (step 4) resumes unsharded at N = 1 and
#   sharded at N = 3, and an unsharded N = 1 one resumes sharded at N = 2:
#   each ends bit-exact against the straight run, and the change of
#   dist.shard_optimizer is recorded (a runtime key);
# - optim_state_bytes in metrics.jsonl: 2 x 4 bytes x the parameters
#   unsharded; sharded, the slice: at most numel / N + 256 elements;
# - the default (non-deterministic) mode: the mlp (SGD with momentum) at
#   N = 2 sharded ends with the unsharded run's digest (a reduce-scatter
#   adds two ranks' floats as the allreduce does), also with
#   grad_sync = blocking; and with grad_compress = bf16 it trains;
# - a NaN injected on one rank is dropped on every rank, sharded as unsharded,
#   with and without clipping.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
VIT=$CONFIGS/fmnist-vit.ini
S=8
det=(--config "$VIT" --set model.depth=2 --set train.deterministic=true --set train.global_batch=96
     --set train.micro_batch=8 --set log.every_steps=1 --set checkpoint.every_epochs=0
     --set dist.threads=1)
on=(--set dist.shard_optimizer=true)

sections() { "$CT_BINARY" inspect "$1" | grep -E '^  OK  (params|buffers|optim)/' || echo "no sections in $1"; }

ref=$WORK/vit-1
run_np 1 "$ref" "${det[@]}" --run-dir "$ref" --set train.max_steps=$S --set checkpoint.every_steps=4 ||
  { fail "vit unsharded np=1 reference"; cat "$ref.log"; finish; }
params=$(grep -o 'vit: [0-9]* parameters' "$ref.log" | grep -o '[0-9]*')
osb=$(metric "$ref/metrics.jsonl" -1 optim_state_bytes)
numel=$((osb / 8))
# The flat buffer holds the parameters and the alignment padding between them.
[ "$numel" -ge "$params" ] && [ "$numel" -lt $((params + 64 * 64)) ] &&
  pass "unsharded: optim_state_bytes $osb = 2 moments x 4 bytes x $numel (parameters $params + padding)" ||
  fail "unsharded: optim_state_bytes $osb for $params parameters"

for np in $(nps 2 3 4); do
  dir=$WORK/vit-sharded-$np
  # At N = 3 the update goes in pieces of 0.01 MiB (10 a slice), each
  # piece's all-gather overlapping the next one's update (step_shard.h).
  pieces=(); [ "$np" != 3 ] || pieces=(--set dist.bucket_mb=0.01)
  if run_np "$np" "$dir" "${det[@]}" "${on[@]}" "${pieces[@]}" --run-dir "$dir" \
       --set train.max_steps=$S --set checkpoint.every_steps=4; then
    same "vit sharded np=$np vs unsharded np=1" "$ref" "$dir"
    if [ "$(sections "$dir/ckpt-8")" = "$(sections "$ref/ckpt-8")" ]; then
      pass "np=$np: the checkpoint's sections (names, sizes, digests) are the unsharded run's"
    else
      fail "np=$np: sections differ"; diff <(sections "$ref/ckpt-8") <(sections "$dir/ckpt-8") | head -5
    fi
    got=$(metric "$dir/metrics.jsonl" -1 optim_state_bytes)
    want_max=$((8 * (numel / np + 256)))
    if [ "$got" -le "$want_max" ] && [ "$((got * np))" -ge "$osb" ]; then
      pass "np=$np: optim_state_bytes $got per rank (<= 8 x (numel/$np + 256) = $want_max)"
    else
      fail "np=$np: optim_state_bytes $got per rank, want at most $want_max and N x it >= $osb"
    fi
  else
    fail "vit sharded np=$np run"; cat "$dir.log"
  fi
done

# Resume across N and across the setting; straight runs: $ref (unsharded).
if [ -d "$WORK/vit-sharded-4/ckpt-4" ] || [ -n "${CT_SANITIZED:-}" ]; then
  src=$WORK/vit-sharded-$(nps 4)
  for v in "1 off" "3 on"; do
    set -- $v
    dir=$WORK/resume-$1-$2
    mkdir -p "$dir" && cp -r "$src/ckpt-4" "$dir/" && echo ckpt-4 > "$dir/latest"
    extra=(); [ "$2" = off ] || extra=("${on[@]}")
    np=$(nps "$1")
    if run_np "$np" "$dir" "${det[@]}" "${extra[@]}" --run-dir "$dir" --set train.max_steps=$S \
         --resume auto; then
      [ "$(digest "$dir")" = "$(digest "$ref")" ] &&
        pass "sharded np=$(nps 4) ckpt-4 resumed np=$np shard $2: the straight run's digest" ||
        fail "resume np=$np shard $2: $(digest "$dir") vs $(digest "$ref")"
    else
      fail "resume np=$np shard $2"; cat "$dir.log"
    fi
  done
  grep -q "dist.shard_optimizer: true -> false" "$WORK/resume-1-off.log" &&
    pass "the change of dist.shard_optimizer is recorded" ||
    { fail "no recorded change of dist.shard_optimizer"; grep changed "$WORK/resume-1-off.log"; }
fi
dir=$WORK/resume-unsharded
mkdir -p "$dir" && cp -r "$ref/ckpt-4" "$dir/" && echo ckpt-4 > "$dir/latest"
if run_np 2 "$dir" "${det[@]}" "${on[@]}" --run-dir "$dir" --set train.max_steps=$S --resume auto; then
  [ "$(digest "$dir")" = "$(digest "$ref")" ] &&
    pass "unsharded np=1 ckpt-4 resumed sharded at np=2: the straight run's digest" ||
    fail "unsharded ckpt resumed sharded: $(digest "$dir") vs $(digest "$ref")"
else
  fail "unsharded ckpt resumed sharded"; cat "$dir.log"
fi
if "$CT_BINARY" audit verify "$WORK/vit-sharded-$(nps 4)" >"$WORK/audit.log" 2>&1; then
  pass "audit verify of the sharded run"
else
  fail "audit verify of the sharded run"; cat "$WORK/audit.log"
fi

# Default mode: N = 2 sums two floats either way.
mlp=(--config "$CONFIG" --set train.max_steps=20 --set log.every_steps=10 --set checkpoint.every_epochs=0)
a=$WORK/mlp-allreduce
run_np 2 "$a" "${mlp[@]}" --run-dir "$a" || { fail "mlp allreduce"; cat "$a.log"; }
# Under the sanitizers the gradsync variants are mpi.test_zero's (blocking,
# bf16): one run here drives the sharded step, state and checkpoint code.
variants="overlap blocking"
[ -z "${CT_SANITIZED:-}" ] || variants=overlap
# The overlapped run also cuts buckets and update pieces of 0.05 MiB (7
# buckets reduce-scattered in place, 9 pieces a slice).
for v in $variants; do
  b=$WORK/mlp-sharded-$v
  small=(); [ $v != overlap ] || small=(--set dist.bucket_mb=0.05)
  if run_np 2 "$b" "${mlp[@]}" "${on[@]}" "${small[@]}" --set "dist.grad_sync=$v" --run-dir "$b"; then
    [ "$(digest "$b")" = "$(digest "$a")" ] &&
      pass "mlp (SGD momentum) np=2 sharded, grad_sync=$v: the allreduce run's digest" ||
      fail "mlp np=2 sharded $v: $(digest "$b") vs $(digest "$a")"
  else
    fail "mlp sharded $v"; cat "$b.log"
  fi
done
# A non-finite gradient on one rank (CT_INJECT_NONFINITE, step 3, rank 1)
# is seen by every rank whatever the slices, with clipping (the norm's block
# sums) and without (each slice scanned, one flag): the step is dropped
# (on_nonfinite = skip) and the run ends as the allreduce run does.
for clip in 0 1; do
  for v in allreduce sharded; do
    d=$WORK/mlp-nonfinite-$clip-$v
    extra=(); [ $v = allreduce ] || extra=("${on[@]}")
    CT_INJECT_NONFINITE=3:1 run_np 2 "$d" "${mlp[@]}" "${extra[@]}" --set optim.clip_norm=$clip \
      --set train.max_steps=8 --set train.on_nonfinite=skip --run-dir "$d" ||
      { fail "mlp nonfinite clip=$clip $v"; cat "$d.log"; }
  done
  a=$WORK/mlp-nonfinite-$clip-allreduce b=$WORK/mlp-nonfinite-$clip-sharded
  if [ "$(metric "$b/metrics.jsonl" -1 nonfinite_skipped_total)" = 1 ] && [ "$(digest "$b")" = "$(digest "$a")" ]; then
    pass "clip_norm=$clip: a NaN on rank 1 at step 3 is dropped on every rank, sharded = allreduce"
  else
    fail "clip_norm=$clip: skipped $(metric "$b/metrics.jsonl" -1 nonfinite_skipped_total), $(digest "$b") vs $(digest "$a")"
  fi
done
b=$WORK/mlp-sharded-bf16
if [ -n "${CT_SANITIZED:-}" ]; then
  :
elif run_np 2 "$b" "${mlp[@]}" "${on[@]}" --set dist.grad_compress=bf16 --set dist.grad_compress_feedback=true \
     --run-dir "$b" && ge "$(metric "$b/metrics.jsonl" -1 test_acc)" 0.5; then
  pass "mlp np=2 sharded with bf16 compression and feedback trains (test_acc $(metric "$b/metrics.jsonl" -1 test_acc))"
else
  fail "mlp sharded bf16"; cat "$b.log"
fi
finish
