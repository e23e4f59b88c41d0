#!/usr/bin/env bash
# Reproducibility audits end to end (docs/audit.md):
# - chain.jsonl holds one line per committed checkpoint and survives
#   retention; keep_every anchors stay;
# - audit verify passes on a run resumed at another world size, says "absent"
#   for checkpoints deleted by retention or by hand, "superseded" for one a
#   resume from an older checkpoint wrote again, and fails naming the
#   checkpoint on a flipped byte, a forged parent digest, a checkpoint
#   committed without its chain line (SIGKILL after the commit) and a torn
#   chain line; a resume repairs both;
# - audit replay certifies an interval at the same N bit for bit (its files,
#   without --out, in a directory beside the run) and, with
#   the other gemm (cnn: ct_sgemm), names the first differing tensor; an
#   interval that ends at an epoch's last step replays too;
# - audit diff prints the config, provenance and tensor differences;
# - train --seeds and summary;
# - every bad command line: a clear error and exit 2 (usage) or 1 (files).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
CNN=$CONFIGS/fmnist-cnn.ini
ck=(--set checkpoint.every_steps=10 --set checkpoint.keep_last=2 --set checkpoint.keep_every=20
    --set checkpoint.every_epochs=0)
audit() { local r=0; "$CT_BINARY" "$@" > "$WORK/out.log" 2> "$WORK/err.log" || r=$?; echo $r > "$WORK/rc"; }
rc() { cat "$WORK/rc"; }
has() { grep -q -- "$1" "$2"; }

# A run at N=2 to step 30, resumed at N=1 to step 60.
run=$WORK/run
if run_np 2 "$WORK/r1" --config "$CONFIG" --run-dir "$run" "${ck[@]}" --set train.max_steps=30 &&
   run_np 1 "$WORK/r2" --config "$CONFIG" --run-dir "$run" "${ck[@]}" --set train.max_steps=60 --resume auto; then
  steps=$(jsonl "$run/chain.jsonl" all step | tr '\n' ' ')
  [ "$steps" = "10 20 30 40 50 60 " ] && pass "chain.jsonl: one line per checkpoint, kept by retention ($steps)" ||
    fail "chain.jsonl steps: $steps"
  [ -d "$run/ckpt-20" ] && [ ! -d "$run/ckpt-10" ] && [ ! -d "$run/ckpt-30" ] &&
    pass "retention: keep_every anchor ckpt-20 kept, ckpt-10 and ckpt-30 deleted" || fail "retention: $(ls "$run")"
  audit audit verify "$run"
  if [ "$(rc)" = 0 ] && has "ckpt-10 .* absent" "$WORK/out.log" && has "verdict: OK" "$WORK/out.log" &&
     has "world_size: 2 -> 1" "$WORK/out.log" && has "steps 40-60: world 1" "$WORK/out.log"; then
    pass "verify: a run resumed at another N passes; absent checkpoints and the segments shown"
  else
    fail "verify of a good run (rc $(rc))"; cat "$WORK/out.log" "$WORK/err.log"
  fi
else
  fail "the audited run"; cat "$WORK/r1.log" "$WORK/r2.log"
fi

# Breaks, each on a copy of the run; every one must name its checkpoint.
expect_break() { # NAME DIR CKPT WHAT
  audit audit verify "$2"
  cat "$WORK/out.log" "$WORK/err.log" > "$WORK/both.log"
  inventory checkpoint "audit verify of a run with $1" 1 "$(rc)" "$WORK/both.log"
  if [ "$(rc)" = 1 ] && has "$3" "$WORK/err.log" && has "$4" "$WORK/out.log"; then
    pass "verify fails on $1, naming $3"
  else
    fail "verify on $1 (rc $(rc))"; cat "$WORK/out.log" "$WORK/err.log"
  fi
}
cp -r "$run" "$WORK/flip"
python3 - "$WORK/flip/ckpt-40/data.bin" <<'PY'
import sys
with open(sys.argv[1], "r+b") as f:
    f.seek(100); b = f.read(1); f.seek(100); f.write(bytes([b[0] ^ 1]))
PY
expect_break "a flipped byte" "$WORK/flip" ckpt-40 "BROKEN ckpt-40"

cp -r "$run" "$WORK/forge"
python3 - "$WORK/forge/chain.jsonl" <<'PY'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
lines[4]["parent"] = "ab" * 32
open(sys.argv[1], "w").write("".join(json.dumps(l) + "\n" for l in lines))
PY
expect_break "a forged parent digest" "$WORK/forge" ckpt-50 "parent digest"

cp -r "$run" "$WORK/gone"
rm -rf "$WORK/gone/ckpt-50"
audit audit verify "$WORK/gone"
[ "$(rc)" = 0 ] && has "ckpt-50 .* absent" "$WORK/out.log" && pass "verify: a deleted middle checkpoint with its chain line passes, says absent" ||
  { fail "verify with ckpt-50 deleted (rc $(rc))"; cat "$WORK/out.log" "$WORK/err.log"; }

# A resume from an older checkpoint in place: the lineage branches, ckpt-30
# is written again and its first line is superseded, not a break.
br=$WORK/branch
nk=(--set checkpoint.every_steps=10 --set checkpoint.keep_last=0 --set checkpoint.every_epochs=0)
if run_np 1 "$WORK/b1" --config "$CONFIG" --run-dir "$br" "${nk[@]}" --set train.max_steps=30 &&
   run_np 1 "$WORK/b2" --config "$CONFIG" --run-dir "$br" "${nk[@]}" --set train.max_steps=40 --resume "$br/ckpt-20"; then
  audit audit verify "$br"
  [ "$(rc)" = 0 ] && has "ckpt-30 .* superseded" "$WORK/out.log" && has "resumed from ckpt-20" "$WORK/out.log" &&
    pass "verify: a resume from an older checkpoint branches the lineage; the replaced ckpt-30 is superseded" ||
    { fail "verify of a branched run (rc $(rc))"; cat "$WORK/out.log" "$WORK/err.log"; }
else
  fail "branch runs"; cat "$WORK/b1.log" "$WORK/b2.log"
fi

# SIGKILL after the commit, before the chain's append (failpoint `latest`).
dir=$WORK/kill
run_np 2 "$WORK/k1" --config "$CONFIG" --run-dir "$dir" "${ck[@]}" --set train.max_steps=10 || fail "kill: setup"
CT_FAILPOINT="latest:0" timeout 120 "$CT_MPIEXEC" "${CT_MPIEXEC_ARGS[@]}" -np 2 "$CT_BINARY" --config "$CONFIG" \
  --run-dir "$dir" "${ck[@]}" --set train.max_steps=20 --resume auto > "$WORK/k2.log" 2>&1 && fail "kill: the killed run succeeded"
expect_break "a checkpoint committed without its chain line" "$dir" ckpt-20 "not in chain.jsonl"
if run_np 2 "$WORK/k3" --config "$CONFIG" --run-dir "$dir" "${ck[@]}" --set train.max_steps=30 --resume auto; then
  audit audit verify "$dir"
  [ "$(rc)" = 0 ] && [ "$(jsonl "$dir/chain.jsonl" all step | tr '\n' ' ')" = "10 20 30 " ] &&
    pass "resume repairs the chain (the missing line re-derived from the manifest)" ||
    { fail "chain after the repair (rc $(rc))"; cat "$WORK/out.log" "$WORK/err.log"; }
else
  fail "kill: resume"; cat "$WORK/k3.log"
fi
# SIGKILL inside the append (failpoint `chain`: half the line written).
CT_FAILPOINT="chain:0" timeout 120 "$CT_MPIEXEC" "${CT_MPIEXEC_ARGS[@]}" -np 2 "$CT_BINARY" --config "$CONFIG" \
  --run-dir "$dir" "${ck[@]}" --set train.max_steps=40 --resume auto > "$WORK/k4.log" 2>&1 && fail "chain kill: the killed run succeeded"
audit audit verify "$dir"
[ "$(rc)" = 1 ] && has "chain.jsonl:4: torn last line" "$WORK/err.log" && pass "verify fails on a torn chain line (SIGKILL inside the append), naming chain.jsonl:4" ||
  { fail "verify on a torn chain line (rc $(rc))"; cat "$WORK/err.log" "$WORK/k4.log"; }
if run_np 1 "$WORK/k5" --config "$CONFIG" --run-dir "$dir" "${ck[@]}" --set train.max_steps=50 --resume auto; then
  audit audit verify "$dir"
  [ "$(rc)" = 0 ] && [ "$(jsonl "$dir/chain.jsonl" all step | tr '\n' ' ')" = "10 20 30 40 50 " ] &&
    pass "resume repairs a torn chain line (cut off, ckpt-40's line re-derived)" || { fail "torn line repair (rc $(rc))"; cat "$WORK/out.log" "$WORK/err.log"; }
else
  fail "torn: resume"; cat "$WORK/k5.log"
fi

# diff
audit audit diff "$run/ckpt-20" "$run/ckpt-40"
[ "$(rc)" = 0 ] && has "train.max_steps: 30 -> 60" "$WORK/out.log" && has "world        2  ->  1" "$WORK/out.log" &&
  has "params/layers.0.weight .*differs max_abs" "$WORK/out.log" && has "world_size: 2 -> 1" "$WORK/out.log" &&
  pass "diff: config, provenance and per-tensor differences" || { fail "diff (rc $(rc))"; cat "$WORK/out.log" "$WORK/err.log"; }
audit audit diff "$run/ckpt-40" "$run/ckpt-40"
[ "$(rc)" = 0 ] && has "0 of .* tensors differ" "$WORK/out.log" && pass "diff of a checkpoint with itself: nothing differs" ||
  { fail "self diff"; cat "$WORK/out.log"; }

# replay: the small cnn (ct_sgemm products), an interval at N=2.
small=(--set model.channels=4,8 --set model.hidden=16 --set train.global_batch=64 --set train.eval_batch=auto
       --set checkpoint.every_epochs=0 --set checkpoint.every_steps=4)
cnn=$WORK/cnn
mkdir -p "$WORK/cert"
if run_np 2 "$WORK/c1" --config "$CNN" --run-dir "$cnn" "${small[@]}" --set train.max_steps=8; then
  # Without --out, from an empty working directory: the files go beside the
  # audited run ($cnn-audit), none into the working directory or the run.
  mkdir -p "$WORK/cwd"
  if (cd "$WORK/cwd" && run_np 2 "$WORK/c2" audit replay "$cnn/ckpt-4" "$cnn/ckpt-8") &&
     [ "$(jsonl "$cnn-audit/audit-ckpt-4-ckpt-8.json" 1 verdict b_digest)" = "identical $(jsonl "$cnn/chain.jsonl" 2 digest)" ] &&
     [ -d "$cnn-audit/audit-ckpt-4-ckpt-8.run" ] && [ -z "$(ls -A "$WORK/cwd")" ] &&
     [ ! -e "$cnn/ckpt-8.tmp" ] && [ "$(ls "$cnn" | grep -c ckpt-)" = 2 ]; then
    pass "replay ckpt-4 -> ckpt-8 at N=2: identical, certificate beside the run (cnn-audit/), working and run directories untouched"
  else
    fail "replay at the same N"; cat "$WORK/c2.log"
  fi
  # The other gemm than the one B ran (the chain records it).
  [ "$(jsonl "$cnn/chain.jsonl" 2 gemm)" = openblas ] && other=own || other=openblas
  if grep -q avx512f /proc/cpuinfo; then
    run_np 2 "$WORK/c3" audit replay "$cnn/ckpt-4" "$cnn/ckpt-8" --out "$WORK/cert" --gemm $other || true
    if every_rank_exited 2 "$WORK/c3" 1 && has "first differing tensor params/" "$WORK/c3.log" &&
       has "likely cause: different gemm" "$WORK/c3.log" &&
       [ "$(jsonl "$WORK/cert/audit-ckpt-4-ckpt-8.json" 1 verdict)" = differs ]; then
      pass "replay with the other gemm: exit 1, names $(grep -o 'tensor params/[^ ]*' "$WORK/c3.log") and the gemm"
    else
      fail "replay with the other gemm"; cat "$WORK/c3.log"
    fi
  else
    echo "skip: replay with the other gemm needs AVX-512F (ct_sgemm's own kernel)"
  fi
  run_np 1 "$WORK/c4" audit replay "$cnn/ckpt-4" "$cnn/ckpt-8" --out "$WORK/cert" --set model.hidden=32 || true
  every_rank_exited 1 "$WORK/c4" 2 && has "runtime keys only" "$WORK/c4.log" && pass "replay refuses --set of a key that changes the experiment" ||
    { fail "replay --set model.hidden"; cat "$WORK/c4.log"; }
else
  fail "cnn run for replay"; cat "$WORK/c1.log"
fi

# replay to an epoch's last step (10 steps an epoch): the epoch cadence
# wrote ckpt-10 after the loader reported the epoch's end (every_steps = 3
# does not hit it), and the replay stops there by max_steps; both must hold
# the state at the epoch's end (the next epoch's step 0 and random streams).
ep=$WORK/epoch-end
if run_np 2 "$WORK/e1" --config "$CONFIG" --run-dir "$ep" --set train.global_batch=6000 \
     --set checkpoint.every_steps=3 --set checkpoint.keep_last=10 --set train.max_steps=12; then
  if run_np 2 "$WORK/e2" audit replay "$ep/ckpt-9" "$ep/ckpt-10" --out "$WORK/cert" &&
     [ "$(jsonl "$WORK/cert/audit-ckpt-9-ckpt-10.json" 1 verdict)" = identical ]; then
    pass "replay ckpt-9 -> ckpt-10, the epoch's end: identical"
  else
    fail "replay to an epoch's end"; cat "$WORK/e2.log"
  fi
else
  fail "mlp run for the epoch-end replay"; cat "$WORK/e1.log"
fi

# Seeds and summary.
seeds=$WORK/seeds
if run_np 2 "$WORK/s1" --config "$CONFIG" --run-dir "$seeds" --set train.max_steps=20 --seeds 0,1,2; then
  audit summary "$seeds"
  d0=$(metric "$seeds/seed-0/metrics.jsonl" -1 param_sha256); d1=$(metric "$seeds/seed-1/metrics.jsonl" -1 param_sha256)
  if [ "$(rc)" = 0 ] && has "over 3 runs" "$WORK/out.log" && has "test_acc .* +- " "$WORK/out.log" &&
     grep -q "^seed *= *2" "$seeds/seed-2/config.ini" && [ "$d0" != "$d1" ]; then
    pass "--seeds 0,1,2: three runs with their seeds recorded; summary prints mean +- std"
  else
    fail "seeds/summary (rc $(rc))"; cat "$WORK/out.log" "$WORK/err.log"
  fi
  python3 - "$seeds" <<'PY' > "$WORK/want"
import json, statistics, sys
acc = [json.loads(open(f"{sys.argv[1]}/seed-{k}/metrics.jsonl").read().splitlines()[-1])["test_acc"] for k in range(3)]
print(f"{statistics.mean(acc):.6f} +- {statistics.stdev(acc):.6f}")
PY
  has "test_acc *$(cat "$WORK/want")" "$WORK/out.log" && pass "summary: test_acc mean and std match Python's ($(cat "$WORK/want"))" ||
    { fail "summary numbers: want $(cat "$WORK/want")"; cat "$WORK/out.log"; }
else
  fail "--seeds run"; cat "$WORK/s1.log"
fi

# Bad command lines: exit 2 for usage, 1 for files that are not what they should be.
bad() { # WANT MESSAGE ARGS...
  local want=$1 msg=$2; shift 2
  audit "$@"
  inventory "audit, summary" "$*" 1 "$(rc)" "$WORK/err.log"
  [ "$(rc)" = "$want" ] && has "$msg" "$WORK/err.log" && pass "'$*': exit $want, '$msg'" ||
    { fail "'$*': exit $(rc), want $want with '$msg'"; cat "$WORK/err.log"; }
}
bad 2 "needs a subcommand" audit
bad 2 "unknown audit subcommand 'check'" audit check "$run"
bad 2 "takes one run directory" audit verify
bad 1 "no such run directory" audit verify "$WORK/nonexistent"
bad 1 "no chain.jsonl" audit verify "$WORK/cert"
bad 2 "takes two checkpoints" audit diff "$run/ckpt-20"
bad 1 "nonexistent" audit diff "$WORK/nonexistent" "$run/ckpt-20"
bad 1 "manifest" audit diff "$run" "$run/ckpt-20"
bad 2 "two checkpoints, A and B" audit replay "$run/ckpt-20"
bad 1 "manifest" audit replay "$WORK/cert" "$run/ckpt-20"
bad 2 "must come before" audit replay "$run/ckpt-40" "$run/ckpt-20"
bad 2 "--gemm 'fast'" audit replay "$run/ckpt-20" "$run/ckpt-40" --gemm fast
bad 2 "takes one or more run directories" summary
bad 1 "no such run directory" summary "$WORK/nonexistent"
bad 2 "expected non-negative integers" --config "$CONFIG" --seeds 1,x
finish
