#!/usr/bin/env bash
# Checkpoint and resume, end to end, on the real data with a model that has
# dropout and batch norm (a small cnn):
# - bit-exact resume: S steps straight, or k steps then --resume auto in a new
#   mpirun, give identical parameter digests and identical per-step losses,
#   for N = 1, 2, 4 and several mid-epoch k;
# - a rank killed (SIGKILL) at each phase of the commit protocol: --resume
#   auto then loads the newest committed checkpoint and the run still ends
#   bit-identical to the straight one;
# - SIGUSR1 to one rank: every rank checkpoints the same step and exits 3;
# - resuming with another number of ranks continues and records the change;
# - the cnn fused and unfused (model.fused) give the same weights, also when a
#   run switches form on resume;
# - a checkpoint of another experiment is refused, naming the differing keys;
# - eval and inspect of a checkpoint.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
CNN=$CONFIGS/fmnist-cnn.ini
S=24
small=(--set model.channels=4,8 --set model.hidden=16 --set train.global_batch=64
       --set log.every_steps=1 --set train.eval_batch=auto --set checkpoint.every_epochs=0)

# On a missing or malformed file each prints a line naming the run, so that two
# failed reads never compare equal.

# Stops at step 7 and 17 (mid-epoch, before and after the first half of the
# steps); both at N = 2, one each at N = 1 and 4.
for np in 1 2 4; do
  ref=$WORK/ref$np
  if ! run_np $np "$WORK/ref$np" --config "$CNN" --run-dir "$ref" "${small[@]}" --set train.max_steps=$S; then
    fail "np=$np straight run"; cat "$WORK/ref$np.log"; continue
  fi
  case $np in 1) stops="7" ;; 2) stops="7 17" ;; *) stops="17" ;; esac
  for k in $stops; do
    dir=$WORK/res$np-$k
    if run_np $np "$WORK/a$np-$k" --config "$CNN" --run-dir "$dir" "${small[@]}" --set train.max_steps=$k &&
       run_np $np "$WORK/b$np-$k" --config "$CNN" --run-dir "$dir" "${small[@]}" --set train.max_steps=$S --resume auto; then
      if [ "$(digest "$dir")" = "$(digest "$ref")" ] && [ "$(losses "$dir")" = "$(losses "$ref")" ]; then
        pass "np=$np stop at $k, resume: digest and all $S losses identical"
      else
        fail "np=$np stop at $k, resume: differs"; diff <(losses "$ref") <(losses "$dir") | head; echo "$(digest "$ref") vs $(digest "$dir")"
      fi
    else
      fail "np=$np stop at $k / resume failed"; cat "$WORK/a$np-$k.log" "$WORK/b$np-$k.log"
    fi
  done
done

# Kill a rank with SIGKILL at each phase of the commit protocol. Each phase
# starts from a copy of one 8-step run (its checkpoint ckpt-8 committed).
ref=$WORK/ref2
base=$WORK/kill-base
run_np 2 "$WORK/k0" --config "$CNN" --run-dir "$base" "${small[@]}" --set train.max_steps=8 ||
  { fail "kill: the 8-step run"; cat "$WORK/k0.log"; }
# Every rank writes data and syncs; rank 0 alone writes the manifest,
# renames and replaces latest: the victim is a rank that works in that phase.
for phase in data synced agreed manifest renamed latest; do
  case $phase in data | synced | agreed) victims="1" ;; *) victims="0" ;; esac
  for victim in $victims; do
    dir=$WORK/kill-$phase-$victim
    cp -a "$base" "$dir" || { fail "kill $phase: copy of the 8-step run"; continue; }
    # Plain mpirun here: when a rank dies it ends the job (the others would
    # otherwise wait forever in a collective; MPI cannot see a dead peer).
    if CT_FAILPOINT="$phase:$victim" timeout 120 "$CT_MPIEXEC" "${CT_MPIEXEC_ARGS[@]}" -np 2 \
         "$CT_BINARY" --config "$CNN" --run-dir "$dir" "${small[@]}" --set train.max_steps=16 \
         --resume auto > "$WORK/k2.log" 2>&1; then
      fail "kill $phase:$victim: the killed run succeeded"; continue
    fi
    if run_np 2 "$WORK/k3" --config "$CNN" --run-dir "$dir" "${small[@]}" --set train.max_steps=$S --resume auto; then
      from=$(sed -n 's/.*resumed from .*ckpt-\([0-9]*\).*/\1/p' "$WORK/k3.log")
      steps=$(chain_steps "$dir")
      if [ "$(digest "$dir")" = "$(digest "$ref")" ] && one_lineage "$steps" &&
         "$CT_BINARY" audit verify "$dir" >"$WORK/k3.verify" 2>&1; then
        pass "SIGKILL rank $victim at '$phase': resumed from step $from, final digest identical, chain whole ($steps), audit verify OK"
      elif [ "$(digest "$dir")" = "$(digest "$ref")" ]; then
        fail "SIGKILL rank $victim at '$phase': the chain after the resume (steps $steps)"; cat "$WORK/k3.verify"
      else
        fail "SIGKILL rank $victim at '$phase': final digest differs"; cat "$WORK/k3.log"
      fi
    else
      fail "SIGKILL rank $victim at '$phase': resume failed"; cat "$WORK/k3.log"
    fi
  done
done

# One rank's write fails: every rank sees it, nothing is published.
dir=$WORK/failwrite
run_np 2 "$WORK/f1" --config "$CNN" --run-dir "$dir" "${small[@]}" --set train.max_steps=4
latest_before=$(cat "$dir/latest")
if CT_FAILPOINT="data:1:fail" run_np 2 "$WORK/f2" --config "$CNN" --run-dir "$dir" "${small[@]}" \
     --set train.max_steps=6 --resume auto; then
  fail "a failed checkpoint write was not reported"
elif inventory environment "a checkpoint write failing on rank 1 (CT_FAILPOINT=data:1:fail)" 2 "$(cat "$WORK/f2.rc.0")" "$WORK/f2.log" &&
     every_rank_exited 2 "$WORK/f2" 1 && [ "$(cat "$dir/latest")" = "$latest_before" ] && [ ! -d "$dir/ckpt-6" ]; then
  pass "rank 1's write failure: every rank exits 1, latest still $latest_before, nothing published"
else
  fail "failed write handling"; cat "$WORK/f2.log"; ls "$dir"
fi

# SIGUSR1 to one rank: all ranks checkpoint the same step and exit 3. The run
# has no end of its own (LONG epochs, lib.sh): the signal finds it running
# however fast the machine.
dir=$WORK/sig
( run_np 2 "$WORK/s1" --config "$CNN" --run-dir "$dir" "${small[@]}" --set train.epochs=$LONG ) &
bg=$!
# One rank process (not its bash wrapper): the one whose executable is ours,
# once the run has made 5 steps; the wait ends at once if the run has ended.
bin_real=$(readlink -f "$CT_BINARY")
pid=
for _ in $(seq 1 600); do
  if [ -s "$dir/steps.jsonl" ] && [ "$(wc -l < "$dir/steps.jsonl")" -ge 5 ]; then
    pid=$(pgrep -f -- "--run-dir $dir" | while read -r p; do
            [ "$(readlink -f /proc/$p/exe 2>/dev/null)" = "$bin_real" ] && echo "$p"; done | tail -n 1)
    break
  fi
  kill -0 $bg 2>/dev/null || break
  sleep 0.2
done
if [ -n "$pid" ]; then
  kill -USR1 "$pid"
  # Never wait forever: should the signal be lost, the run would not end.
  # The guard's sleep is ended with it and holds no output stream: ctest
  # waits for every process that holds the test's output (a stray sleep
  # 120 made this test take 170 s instead of 60).
  ( sleep 120; pkill -KILL -f -- "--run-dir $dir" ) >/dev/null 2>&1 & guard=$!
  wait $bg || true
  pkill -P $guard 2>/dev/null || true
  kill $guard 2>/dev/null || true
  if every_rank_exited 2 "$WORK/s1" 3 && [ -f "$dir/latest" ] && grep -q "stopped by signal" "$WORK/s1.log"; then
    pass "SIGUSR1 to one rank: both ranks checkpointed $(cat "$dir/latest") and exited 3"
  else
    fail "SIGUSR1 handling"; cat "$WORK/s1.log"; ls "$dir"
  fi
else
  if kill -0 $bg 2>/dev/null; then
    fail "SIGUSR1: no rank process after $(wc -l < "$dir/steps.jsonl" 2>/dev/null || echo 0) steps in 120 s"
    pkill -KILL -f -- "--run-dir $dir" || true
  else
    fail "SIGUSR1: the run ended before it could be signalled"
  fi
  wait $bg || true
  cat "$WORK/s1.log"
fi

# Another world size: continues, and the new manifest records the change.
dir=$WORK/world
if run_np 2 "$WORK/w1" --config "$CNN" --run-dir "$dir" "${small[@]}" --set train.max_steps=6 &&
   run_np 4 "$WORK/w2" --config "$CNN" --run-dir "$dir" "${small[@]}" --set train.max_steps=10 --resume auto &&
   "$CT_BINARY" inspect "$dir/$(cat "$dir/latest")" > "$WORK/w3.log" 2>&1 &&
   grep -q "world_size: 2 -> 4" "$WORK/w3.log"; then
  pass "resume 2 -> 4 ranks: continued, change recorded in the manifest"
else
  fail "resume with another world size"; cat "$WORK/w2.log" "$WORK/w3.log"
fi

# The cnn's fused Conv-BN-ReLU-MaxPool blocks (model.fused, the default, as
# in ref2) and the four separate modules: the same parameters bit for bit
# after S steps, straight or when a run switches form on resume (the change
# is recorded). Bit-identity is what the code gives, not a law: the two forms
# add BatchNorm's gradient terms in different orders, in double, rounded to
# float once; if a change of those sums breaks it, compare the losses.
dir=$WORK/unfused
if run_np 2 "$WORK/u1" --config "$CNN" --run-dir "$dir" "${small[@]}" --set train.max_steps=$S --set model.fused=false &&
   [ "$(digest "$dir")" = "$(digest "$WORK/ref2")" ]; then
  pass "model.fused=false: digest after $S steps identical to the fused run"
else
  fail "model.fused=false differs from the fused run"; cat "$WORK/u1.log"; diff <(losses "$WORK/ref2") <(losses "$dir") | head
fi
dir=$WORK/switch
if run_np 2 "$WORK/u2" --config "$CNN" --run-dir "$dir" "${small[@]}" --set train.max_steps=10 --set model.fused=false &&
   run_np 2 "$WORK/u3" --config "$CNN" --run-dir "$dir" "${small[@]}" --set train.max_steps=$S --resume auto &&
   [ "$(digest "$dir")" = "$(digest "$WORK/ref2")" ] &&
   "$CT_BINARY" inspect "$dir/$(cat "$dir/latest")" > "$WORK/u4.log" 2>&1 &&
   grep -q "model.fused: false -> true" "$WORK/u4.log"; then
  pass "unfused for 10 steps, resumed fused: identical to the straight run, change recorded"
else
  fail "resume across model.fused"; cat "$WORK/u3.log" "$WORK/u4.log"
fi

# A checkpoint of another experiment is refused with the differing keys.
if run_np 2 "$WORK/x1" --config "$CNN" --run-dir "$dir" "${small[@]}" --set train.max_steps=12 \
     --set optim.lr=0.2 --resume auto; then
  fail "resumed a different experiment"
elif inventory checkpoint "--resume auto with optim.lr changed (another experiment)" 2 "$(cat "$WORK/x1.rc.0")" "$WORK/x1.log" &&
     every_rank_exited 2 "$WORK/x1" 2 && grep -q "optim.lr: 0.05 -> 0.2" "$WORK/x1.log"; then
  pass "different optim.lr refused: $(grep -m1 -o 'optim.lr: [^(]*' "$WORK/x1.log")"
else
  fail "different experiment: wrong refusal"; cat "$WORK/x1.log"
fi

# eval and inspect
ck=$WORK/ref2/$(cat "$WORK/ref2/latest")
if run_np 2 "$WORK/e1" eval --checkpoint "$ck" && grep -q "test_acc" "$WORK/e1.log" &&
   "$CT_BINARY" inspect "$ck" > "$WORK/i1.log" 2>&1; then
  pass "eval: $(grep -o 'test_acc [0-9.]*' "$WORK/e1.log"); inspect verified"
else
  fail "eval/inspect"; cat "$WORK/e1.log" "$WORK/i1.log"
fi
finish
