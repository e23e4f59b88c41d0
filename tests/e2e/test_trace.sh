#!/usr/bin/env bash
# log.trace = steps:A-B: every rank's timeline of the window in
# RUN_DIR/trace.json, checked by tests/e2e/trace_check.py (the contract of
# docs/performance.md, "Timeline trace"):
# - 2 ranks, dist.grad_sync = overlap and blocking (two buckets): valid JSON,
#   every rank and thread named, spans of one track nested, steps 3..5 on
#   each rank, a bucket's allreduce starting before backward ends (overlap)
#   or after (blocking), and barrier causality within the recorded bounds;
#   a run that ends inside its window writes the steps it recorded;
# - under blocking, rank 1's trace clock 0.25 s ahead (CT_TRACE_CLOCK_SKEW):
#   the offset is measured and removed (the same checks hold; without the
#   alignment the barrier check fails);
# - a full disk (CT_TRACE_FAILPOINT=enospc) and a directory in the way of
#   trace.json (a resume in place): one warning, the run ends 0 with the
#   parameters of a run without a trace, no temporary file left;
# - no log.trace: no trace.json; a resume inside the window traces the rest,
#   a later window replaces the earlier job's trace.json (and says so);
# - a malformed log.trace: a config error naming the key.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
base=(--config "$CONFIG" --set model.hidden=64,32 --set train.global_batch=256 --set train.max_steps=6
      --set dist.bucket_mb=0.005 --set dist.peak_gflops=1 --set log.every_steps=2
      --set checkpoint.every_epochs=0)
trace=(--set log.trace=steps:3-5)
CHECK=$(dirname "${BASH_SOURCE[0]}")/trace_check.py
params() { grep -o 'params sha256 [0-9a-f]*' "$1.log" || echo "no digest in $1"; }

# A run without a trace: the reference parameters, and no trace.json.
if run_np 2 "$WORK/ref" "${base[@]}" --run-dir "$WORK/ref.d" && [ ! -e "$WORK/ref.d/trace.json" ]; then
  pass "no log.trace: no trace.json"
else
  fail "no log.trace"; tail -5 "$WORK/ref.log"
fi

# overlap; blocking with rank 1's trace clock 0.25 s ahead (CT_TRACE_CLOCK_SKEW),
# which the alignment must measure (offset ~ 250000 us) and remove.
skewed() { python3 -c 'import json, sys; c = json.load(open(sys.argv[1]))["otherData"]["ctrain"]["clock"]
o, b = c["offset_us"][1], c["bound_us"][1]
sys.exit(0 if abs(o - 250000) <= b + 1e-3 and b < 100000 else 1)' "$1"; }
# The blocking run ends (max_steps = 6) inside its window 3..9: what it
# recorded, steps 3..6, is written at the run's end.
for sync in overlap blocking; do
  skew=; win=3-5; [ $sync = overlap ] || { skew=1:0.25; win=3-9; }
  out=
  if CT_TRACE_CLOCK_SKEW=$skew run_np 2 "$WORK/$sync" "${base[@]}" --set log.trace=steps:$win --set dist.grad_sync=$sync --run-dir "$WORK/$sync.d" &&
     grep -Eq 'gradient sync [a-z]*, ([2-9]|[1-9][0-9]+) buckets' "$WORK/$sync.log" &&
     out=$(python3 "$CHECK" "$WORK/$sync.d/trace.json" --sync $sync --steps "${win/9/6}" --world 2) &&
     { [ -z "$skew" ] || skewed "$WORK/$sync.d/trace.json"; }; then
    pass "$sync${skew:+, skew $skew}: $out"
  else
    fail "$sync: ${out:-}"; grep -E 'buckets|trace|error' "$WORK/$sync.log" | head -5
  fi
done
[ "$(params "$WORK/overlap")" = "$(params "$WORK/ref")" ] && pass "tracing leaves the parameters as they were" ||
  fail "traced run's parameters differ: $(params "$WORK/overlap") vs $(params "$WORK/ref")"
if raw=$(python3 "$CHECK" "$WORK/blocking.d/trace.json" --raw 2>&1); then
  fail "the barrier check passes without the alignment too: it proves nothing"
else
  pass "without the alignment the barrier check fails: $(echo "$raw" | head -1 | cut -c1-100)"
fi

# A full disk under trace.json: a warning, training goes on.
if CT_TRACE_FAILPOINT=enospc run_np 2 "$WORK/full" "${base[@]}" "${trace[@]}" --run-dir "$WORK/full.d" &&
   grep -q 'warning: trace: .*No space left on device; no trace.json written (training goes on)' "$WORK/full.log" &&
   [ ! -e "$WORK/full.d/trace.json" ] && [ ! -e "$WORK/full.d/trace.json.tmp" ] &&
   [ "$(params "$WORK/full")" = "$(params "$WORK/ref")" ] && [ "$(digest "$WORK/full.d")" = "$(digest "$WORK/ref.d")" ]; then
  pass "full disk: $(grep -o 'warning: trace: .*' "$WORK/full.log" | cut -c1-120)"
else
  fail "full disk"; grep -E 'trace|error' "$WORK/full.log" | head -5; ls "$WORK/full.d"
fi

# A directory in the way of trace.json, at a resume in place: a warning;
# the checkpoints and metrics continue as without a trace.
run="$WORK/way.d"
if run_np 2 "$WORK/way1" "${base[@]}" --set train.max_steps=3 --set checkpoint.every_steps=3 --run-dir "$run" &&
   mkdir "$run/trace.json" &&
   run_np 2 "$WORK/way2" "${base[@]}" --set log.trace=steps:4-5 --run-dir "$run" --resume auto &&
   grep -q "warning: trace: .*trace.json.tmp: cannot rename it to .*trace.json: Is a directory; no trace.json written" "$WORK/way2.log" &&
   [ ! -e "$run/trace.json.tmp" ] && [ "$(params "$WORK/way2")" = "$(params "$WORK/ref")" ] &&
   [ "$(chain_steps "$run")" = "3 6 " ]; then
  pass "directory in the way: $(grep -o 'warning: trace: .*' "$WORK/way2.log" | cut -c1-100)"
else
  fail "directory in the way"; grep -E 'trace|error' "$WORK/way2.log" | head -5; chain_steps "$run"
fi
# ... removed, the resume again from step 3: trace.json is written; a
# resume from step 6 tracing step 7 replaces it and says so.
rmdir "$run/trace.json"
echo "ckpt-3" >"$run/latest"
if run_np 2 "$WORK/way3" "${base[@]}" --set log.trace=steps:4-5 --run-dir "$run" --resume "$run/ckpt-3" &&
   python3 "$CHECK" "$WORK/way.d/trace.json" --steps 4-5 --world 2 >/dev/null &&
   run_np 2 "$WORK/way4" "${base[@]}" --set log.trace=steps:7-7 --set train.max_steps=7 --run-dir "$run" --resume auto &&
   grep -q "trace: $run/trace.json of an earlier job replaced" "$WORK/way4.log" &&
   python3 "$CHECK" "$WORK/way.d/trace.json" --steps 7-7 --sync overlap >/dev/null; then
  pass "resumed inside the window: traced; a later window replaces the earlier job's trace"
else
  fail "resume"; grep -E 'trace|error' "$WORK/way3.log" "$WORK/way4.log" | head -6
fi

# Malformed windows: a config error naming the file's key and the text.
for bad in steps:5-3 steps:3 on; do
  if ! run_np 1 "$WORK/bad" "${base[@]}" --set "log.trace=$bad" --run-dir "$WORK/bad.d" &&
     grep -q -- "--set log.trace=$bad: log.trace: .*$bad" "$WORK/bad.log"; then
    pass "log.trace=$bad refused: $(grep -o 'log.trace: .*' "$WORK/bad.log" | head -1 | cut -c1-110)"
  else
    fail "log.trace=$bad"; tail -3 "$WORK/bad.log"
  fi
done

echo "passed $passed, failed $failed"
[ "$failed" -eq 0 ]
