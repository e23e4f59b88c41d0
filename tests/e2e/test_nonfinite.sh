#!/usr/bin/env bash
# train.on_nonfinite: a non-finite gradient injected on one rank (test-only
# CT_INJECT_NONFINITE=STEP:RANK, step.h) is agreed by every rank at the same
# step, in the default and the deterministic mode.
# - stop (the default), N = 2, injected on rank 1 in step 5, checkpoints every
#   2 steps: every rank exits 1, one message names step 5 and rank 1, the
#   newest checkpoint is ckpt-4 and its weights are finite;
# - a parameter made NaN past the step's check (CT_INJECT_NONFINITE=4:1:params):
#   the checkpoint of step 4 is refused on every rank (exit 1, naming the
#   tensor), ckpt-2 stays the newest;
# - skip, N = 2: the run finishes, metrics.jsonl counts 1 skipped step (epoch
#   and total), steps.jsonl has no line for it, the manifest records
#   train.nonfinite_skipped = 1; resumed with another injection, the count goes
#   on to 2 (metrics and manifest);
# - skip in deterministic mode: N = 1 (injected on rank 0) and N = 2 (on rank
#   1) end with the same digest and test metrics, which differ from the run
#   without injection (so the comparison can fail).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
base=(--config "$CONFIG" --set log.every_steps=1 --set checkpoint.every_epochs=0)

scalar() { "$CT_BINARY" inspect "$1" 2>/dev/null | sed -n "s/.* train.nonfinite_skipped = //p"; }
finite() { # CKPT: every float tensor it exports is finite (the npz also holds metadata)
  "$CT_BINARY" export "$1" --format npz -o "$WORK/finite.npz" >/dev/null 2>&1 &&
    /usr/bin/python3 -c 'import numpy as np, sys; d = np.load(sys.argv[1]); f = [a for a in (d[k] for k in d.files) if isinstance(a, np.ndarray) and a.dtype.kind == "f"]; sys.exit(0 if f and all(np.isfinite(a).all() for a in f) else 1)' "$WORK/finite.npz"
}

# stop: step 5 on rank 1.
out=$WORK/stop
if ! CT_INJECT_NONFINITE=5:1 run_np 2 "$out" "${base[@]}" --run-dir "$out" --set train.max_steps=8 \
     --set checkpoint.every_steps=2 --set checkpoint.keep_last=0 &&
   every_rank_exited 2 "$out" 1 &&
   [ "$(grep -c "error: step 5: a non-finite loss or gradient, first seen on rank 1; no update made" "$out.log")" = 1 ] &&
   [ "$(cat "$out/latest")" = ckpt-4 ] && [ ! -e "$out/ckpt-5" ] && [ ! -e "$out/ckpt-6" ] && finite "$out/ckpt-4"; then
  pass "stop: every rank exits 1 at step 5, naming rank 1 once; ckpt-4 is the newest and finite"
else
  fail "stop at step 5"; cat "$out.log"; ls "$out"
fi

# A checkpoint refuses non-finite weights.
out=$WORK/refuse
if ! CT_INJECT_NONFINITE=4:1:params run_np 2 "$out" "${base[@]}" --run-dir "$out" --set train.max_steps=8 \
     --set checkpoint.every_steps=2 --set checkpoint.keep_last=0 &&
   every_rank_exited 2 "$out" 1 &&
   grep -q "refusing to write a checkpoint of non-finite weights at step 4: params/.* element 0 is nan" "$out.log" &&
   [ "$(cat "$out/latest")" = ckpt-2 ] && [ ! -e "$out/ckpt-4" ]; then
  pass "a checkpoint of non-finite weights is refused on every rank; ckpt-2 stays the newest"
else
  fail "checkpoint of non-finite weights"; cat "$out.log"; ls "$out"
fi

# skip, then a resume that skips one more.
out=$WORK/skip
if CT_INJECT_NONFINITE=5:1 run_np 2 "$out" "${base[@]}" --run-dir "$out" --set train.on_nonfinite=skip \
     --set train.max_steps=8 &&
   grep -q "warning: step 5: a non-finite loss or gradient, first seen on rank 1: step skipped on every rank" "$out.log" &&
   [ "$(metric "$out/metrics.jsonl" -1 nonfinite_skipped) $(metric "$out/metrics.jsonl" -1 nonfinite_skipped_total)" = "1 1" ] &&
   [ "$(jsonl "$out/steps.jsonl" all step | tr '\n' ' ')" = "1 2 3 4 6 7 8 " ] &&
   [ "$(scalar "$out/ckpt-8")" = 1 ]; then
  pass "skip: the run finishes, 1 step skipped in metrics.jsonl and the manifest, no loss line for it"
else
  fail "skip at step 5"; cat "$out.log"; cat "$out/metrics.jsonl" "$out/steps.jsonl"
fi
if CT_INJECT_NONFINITE=10:0 run_np 2 "$out.r" "${base[@]}" --run-dir "$out" --set train.on_nonfinite=skip \
     --set train.max_steps=12 --resume auto &&
   [ "$(metric "$out/metrics.jsonl" -1 nonfinite_skipped) $(metric "$out/metrics.jsonl" -1 nonfinite_skipped_total)" = "1 2" ] &&
   [ "$(scalar "$out/ckpt-12")" = 2 ]; then
  pass "resume: the count survives (1 restored + 1 skipped after the resume = 2)"
else
  fail "skip count across a resume"; cat "$out.r.log"; cat "$out/metrics.jsonl"
fi

# Deterministic mode: the dropped step is the same whatever rank held it.
det=(--set train.deterministic=true --set train.global_batch=96 --set train.micro_batch=8
     --set train.on_nonfinite=skip --set train.max_steps=8)
ok=1
CT_INJECT_NONFINITE=5:0 run_np 1 "$WORK/det1" "${base[@]}" --run-dir "$WORK/det1" "${det[@]}" || ok=0
CT_INJECT_NONFINITE=5:1 run_np 2 "$WORK/det2" "${base[@]}" --run-dir "$WORK/det2" "${det[@]}" || ok=0
run_np 2 "$WORK/det0" "${base[@]}" --run-dir "$WORK/det0" "${det[@]}" || ok=0
end() { jsonl "$1/metrics.jsonl" -1 param_sha256 test_loss test_acc nonfinite_skipped 2>/dev/null || echo "none in $1"; }
if [ $ok = 1 ] && [ "$(end "$WORK/det1")" = "$(end "$WORK/det2")" ] &&
   [ "$(jsonl "$WORK/det1/steps.jsonl" all step loss)" = "$(jsonl "$WORK/det2/steps.jsonl" all step loss)" ] &&
   [ "$(end "$WORK/det1" | cut -d' ' -f4)" = 1 ] &&
   [ "$(end "$WORK/det0" | cut -d' ' -f1)" != "$(end "$WORK/det1" | cut -d' ' -f1)" ]; then
  pass "deterministic skip: N = 1 and N = 2 drop step 5 and end with the same digest and test metrics"
else
  fail "deterministic skip: $(end "$WORK/det1") vs $(end "$WORK/det2") (no injection: $(end "$WORK/det0"))"
  cat "$WORK/det2.log"
fi

# The same with one micro-batch per rank at N = 2 (2 of 48): the injected
# row is then the last one, which stays in the model's gradient buffer
# (step.c, det_row) rather than in a row of its own.
det48=("${det[@]}" --set train.micro_batch=48)
ok=1
CT_INJECT_NONFINITE=5:0 run_np 1 "$WORK/det48-1" "${base[@]}" --run-dir "$WORK/det48-1" "${det48[@]}" || ok=0
CT_INJECT_NONFINITE=5:1 run_np 2 "$WORK/det48-2" "${base[@]}" --run-dir "$WORK/det48-2" "${det48[@]}" || ok=0
if [ $ok = 1 ] && [ "$(end "$WORK/det48-1")" = "$(end "$WORK/det48-2")" ] &&
   [ "$(end "$WORK/det48-2" | cut -d' ' -f4)" = 1 ]; then
  pass "deterministic skip, one micro-batch per rank: N = 1 and N = 2 drop step 5 alike"
else
  fail "deterministic skip, micro-batch 48: $(end "$WORK/det48-1") vs $(end "$WORK/det48-2")"
  cat "$WORK/det48-2.log"
fi

finish
