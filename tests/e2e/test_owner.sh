#!/usr/bin/env bash
# One live job per run directory (docs/checkpoints.md, "One live job per run
# directory"):
# - job A (the mlp on 2 ranks, no end of its own) owns its run directory:
#   owner.json names its nonce and its ranks' pids; job B started there is
#   refused on every rank (status 1), naming A (nonce, pids) and the
#   directory, and the directory is unchanged (A is SIGSTOPped meanwhile, so
#   that only B could have changed it);
# - A killed with SIGKILL: the next start (--resume auto) takes over, says so
#   naming A, and trains; at its end owner.json says released, and the start
#   after it takes over silently;
# - chain.jsonl holds one lineage (no step twice) and audit verify passes; a
#   crafted chain with two different checkpoints at one step, the replaced
#   one continued after, is refused, naming the step and both lines;
# - an owner on another host (a crafted record, its beat advanced by this
#   script) is live while its beat advances and taken over once it stops;
# - a job (dist.watchdog_s = 0) whose directory another job took over stops
#   at its next commit on every rank, naming that job, without a chain line;
# - a job stopped by SIGUSR1 (exit 3) leaves the directory released.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
ck=(--set checkpoint.every_steps=5 --set checkpoint.every_epochs=0 --set dist.threads=1)

owner_field() { python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$1/owner.json" "$2"; }
owner_pids() { python3 -c 'import json, sys; print(" ".join(str(r["pid"]) for r in json.load(open(sys.argv[1]))["ranks"]))' "$1/owner.json"; }
# Every entry; every file's size, time and content digest: any change shows
# (directories' own times aside).
snapshot() { (cd "$1" && find . | sort && find . -type f -printf '%p %s %T@\n' | sort && find . -type f -exec sha256sum {} + | sort); }
# inv CATEGORY INPUT NP STATUS LOG: inventory (lib.sh) of LOG with what differs from
# run to run (nonces, pids, times, steps, digests, this host) replaced.
inv() {
  sed -E "s/job [0-9a-f]{16}/job NONCE/g; s/pids? [0-9]+(, [0-9]+)*/pid PIDS/g; s/[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:]{8}Z/TIME/g;
          s/step [0-9]+/step N/g; s/ckpt-[0-9]+/ckpt-N/g; s/line ([0-9]+) \(digest [0-9a-f]{16}/line \1 (digest DIGEST/g;
          s/parent [0-9a-f]{16}/parent DIGEST/g; s/host $(hostname)\b/host HOST/g; s/on $(hostname) /on HOST /g" "$5" >"$5.inv"
  inventory "$1" "$2" "$3" "$4" "$5.inv"
}

# launch OUT DIR ARGS...: 2 ranks in the background, each rank's status in
# OUT.rc.<rank> (as run_np), the launcher's in OUT.status.
launch() {
  local out=$1 dir=$2 keep=(--mca orte_abort_on_non_zero_status 0)
  shift 2
  [ "$CT_MPI" != mpich ] || keep=()
  ( rc=0
    timeout 300 "$CT_MPIEXEC" "${CT_MPIEXEC_ARGS[@]}" "${keep[@]}" -np 2 \
      bash -c '"$0" "$@"; rc=$?; echo $rc > "'"$out"'.rc.${OMPI_COMM_WORLD_RANK:-$PMI_RANK}"; exit $rc' \
      "$CT_BINARY" --config "$CONFIG" --run-dir "$dir" "${ck[@]}" "$@" >"$out.log" 2>&1 </dev/null || rc=$?
    echo $rc >"$out.status" ) &
}
# wait_chain DIR N OUT: until DIR's chain.jsonl has N lines; fails when OUT's job ended first.
wait_chain() {
  local i
  for ((i = 0; i < 1800; i++)); do
    [ -s "$1/chain.jsonl" ] && [ "$(wc -l <"$1/chain.jsonl")" -ge "$2" ] && return 0
    [ -e "$3.status" ] && return 1
    sleep 0.1
  done
  return 1
}
wait_status() {
  local i
  for ((i = 0; i < $2 * 10; i++)); do
    [ -s "$1.status" ] && { cat "$1.status"; return 0; }
    sleep 0.1
  done
  echo timeout
}

# 1. A owns the directory; B is refused and changes nothing.
run=$WORK/run
launch "$WORK/a" "$run" --set train.epochs=$LONG
if wait_chain "$run" 2 "$WORK/a" && [ "$(owner_field "$run" state)" = running ]; then
  nonce_a=$(owner_field "$run" nonce)
  pids_a=$(owner_pids "$run")
  for p in $pids_a; do [ "$(cat /proc/"$p"/comm 2>/dev/null)" = ctrain-dist ] || fail "owner.json pid $p is no rank of A"; done
  # shellcheck disable=SC2086
  kill -STOP $pids_a
  snapshot "$run" >"$WORK/before"
  run_np 2 "$WORK/b" --config "$CONFIG" --run-dir "$run" "${ck[@]}" --set train.epochs=$LONG --resume auto &&
    fail "B trained in A's run directory"
  inv run-dir "a second job on a live job's run directory" 2 1 "$WORK/b.log"
  named=1
  for w in "$run: another job owns this run directory and is running" "job $nonce_a" "is alive on host" $pids_a; do
    grep -qF -- "$w" "$WORK/b.log" || { named=0; echo "  B's message lacks '$w'"; }
  done
  if every_rank_exited 2 "$WORK/b" 1 && [ $named = 1 ]; then
    pass "a second job is refused on every rank (status 1), naming A (job $nonce_a, pids $pids_a) and the directory"
  else
    fail "the second job"; cat "$WORK/b.log"
  fi
  snapshot "$run" >"$WORK/after"
  diff -q "$WORK/before" "$WORK/after" >/dev/null && pass "the refused job changed nothing in the run directory" ||
    { fail "the refused job changed the run directory"; diff "$WORK/before" "$WORK/after" | head; }
  # shellcheck disable=SC2086
  kill -KILL $pids_a
  [ "$(wait_status "$WORK/a" 60)" != timeout ] || fail "A's launcher did not return after SIGKILL of its ranks"
  for p in $pids_a; do ! kill -0 "$p" 2>/dev/null || fail "A's pid $p still runs after SIGKILL"; done
else
  fail "job A did not start checkpointing"; cat "$WORK/a.log"
  nonce_a=none
fi

# 2. After SIGKILL: the next start takes over, says so, trains; released at its end.
# The step --resume auto continues from is latest's: A was killed at any
# moment, possibly between a commit and its chain line (which the resume
# then appends), so chain.jsonl's last line may be one checkpoint behind.
last=$(sed -n 's/^ckpt-//p' "$run/latest" 2>/dev/null || echo 0)
if run_np 2 "$WORK/c" --config "$CONFIG" --run-dir "$run" "${ck[@]}" --set train.epochs=$LONG \
     --set train.max_steps=$((last + 10)) --resume auto &&
   grep -q "$run: taking the run directory over from job $nonce_a.*which is dead: its rank 0 (pid [0-9]* on host [^)]*), the rank that commits, is gone" "$WORK/c.log" &&
   grep -q "resumed from .*ckpt-$last" "$WORK/c.log"; then
  pass "after SIGKILL of A the next start takes over, naming A, and resumes from ckpt-$last"
else
  fail "the takeover after SIGKILL"; cat "$WORK/c.log"
fi
nonce_c=$(owner_field "$run" nonce)
[ "$nonce_c" != "$nonce_a" ] && [ "$(owner_field "$run" state)" = released ] && [ "$(owner_field "$run" end)" = done ] &&
  pass "owner.json: the new job's, released at its end (done)" || { fail "owner.json after the run"; cat "$run/owner.json"; }
if run_np 2 "$WORK/d" --config "$CONFIG" --run-dir "$run" "${ck[@]}" --set train.epochs=$LONG \
     --set train.max_steps=$((last + 15)) --resume auto && ! grep -q "taking the run directory over" "$WORK/d.log"; then
  pass "a start after a released job takes over silently"
else
  fail "the start after a released job"; cat "$WORK/d.log"
fi
steps=$(chain_steps "$run")
one_lineage "$steps" && pass "chain.jsonl: one lineage, no step twice ($steps)" || fail "chain.jsonl steps: $steps"
"$CT_BINARY" audit verify "$run" >"$WORK/v.log" 2>&1 && grep -q "verdict: OK" "$WORK/v.log" &&
  pass "audit verify passes on the run taken over" || { fail "audit verify"; cat "$WORK/v.log"; }

# 3. audit verify on two interleaved lineages: line 3's step written again
# by another job (line 4), and line 3's lineage continued after (line 5).
cp -r "$run" "$WORK/forked"
python3 - "$WORK/forked/chain.jsonl" <<'PY'
import json, sys
e = [json.loads(l) for l in open(sys.argv[1])]
other = dict(e[2], digest="cd" * 32, hosts="otherhost")
open(sys.argv[1], "w").write("".join(json.dumps(x) + "\n" for x in e[:3] + [other] + e[3:]))
PY
s3=$(jsonl "$WORK/forked/chain.jsonl" 3 step)
rc=0
"$CT_BINARY" audit verify "$WORK/forked" >"$WORK/f.log" 2>"$WORK/f.err" || rc=$?
inv checkpoint "audit verify of two interleaved lineages in chain.jsonl" 1 $rc "$WORK/f.err"
if [ $rc = 1 ] && grep -q "two different checkpoints of step $s3 in chain.jsonl: line 3 (digest .*) and line 4 (digest cdcdcdcd" "$WORK/f.log" &&
   grep -q "line 5 continues line 3's lineage after line 4 replaced it" "$WORK/f.log" &&
   grep -q "error: audit verify .*two different checkpoints of step $s3" "$WORK/f.err"; then
  pass "audit verify refuses two different checkpoints of step $s3, naming both lines"
else
  fail "audit verify of an interleaved chain (rc $rc)"; cat "$WORK/f.log" "$WORK/f.err"
fi

# 4. An owner on another host: its beat decides (this script beats for it).
far=$WORK/far
mkdir -p "$far/heartbeat"
cat >"$far/owner.json" <<'EOF'
{"format": "ctrain-owner 1", "nonce": "00000000000000ab", "state": "running", "started": "2026-01-01T00:00:00Z", "started_unix": 1767225600, "slurm_job_id": "4242", "beat_s": 1.000, "world": 1, "ranks": [{"host": "far-away-host", "pid": 1, "pid_start": 0}]}
EOF
( for ((i = 1; ; i++)); do
    printf '%-63s\n' "ctrain-owner-beat 1 nonce=00000000000000ab beat=$i" >"$far/heartbeat/owner.tmp"
    mv "$far/heartbeat/owner.tmp" "$far/heartbeat/owner"
    sleep 0.3
  done ) &
beater=$!
run_np 1 "$WORK/far1" --config "$CONFIG" --run-dir "$far" "${ck[@]}" --set train.max_steps=5 &&
  fail "a job started over a live owner on another host"
kill $beater
wait $beater 2>/dev/null || true
grep -q "job 00000000000000ab (Slurm job 4242), started 2026-01-01T00:00:00Z, on far-away-host (pid 1) (its beat in heartbeat/owner advanced" "$WORK/far1.log" &&
  pass "an owner on another host whose beat advances is live: refused, naming it and its Slurm job" ||
  { fail "an owner on another host, beating"; cat "$WORK/far1.log"; }
if run_np 1 "$WORK/far2" --config "$CONFIG" --run-dir "$far" "${ck[@]}" --set train.max_steps=5 &&
   grep -q "taking the run directory over from job 00000000000000ab .* its beat in heartbeat/owner did not advance" "$WORK/far2.log"; then
  pass "its beat stopped: the next start takes over, saying why"
else
  fail "takeover from a silent owner on another host"; cat "$WORK/far2.log"
fi

# 5. A job (no watchdog) whose directory was taken over stops at its next commit.
lost=$WORK/lost
launch "$WORK/l" "$lost" --set train.epochs=$LONG --set dist.watchdog_s=0
if wait_chain "$lost" 1 "$WORK/l"; then
  pids_l=$(owner_pids "$lost")
  # shellcheck disable=SC2086
  kill -STOP $pids_l
  n=$(wc -l <"$lost/chain.jsonl")
  sed 's/"nonce": "[0-9a-f]*"/"nonce": "00000000000000cd"/; s/"host": "[^"]*"/"host": "far-away-host"/g' \
    "$lost/owner.json" >"$lost/owner.json.new"
  mv "$lost/owner.json.new" "$lost/owner.json"
  # shellcheck disable=SC2086
  kill -CONT $pids_l
  st=$(wait_status "$WORK/l" 120)
  m=$(wc -l <"$lost/chain.jsonl")
  # (a commit already past its check when the record changed may still add its line)
  if every_rank_exited 2 "$WORK/l" 1 && [ "$m" -le $((n + 1)) ] &&
     grep -q "no longer owns the run directory: job 00000000000000cd.* took it over (owner.json); not committing" "$WORK/l.log" &&
     [ "$(owner_field "$lost" nonce)" = 00000000000000cd ] && [ "$(cat "$lost/latest")" = "$(jsonl "$lost/chain.jsonl" -1 ckpt)" ]; then
    pass "a job that lost its run directory stops at its next commit on every rank (status 1), naming the new owner; chain untouched"
  else
    fail "the job that lost its directory (status $st, chain $n -> $m lines)"; cat "$WORK/l.log"
  fi
  inv run-dir "a job whose run directory another job took over" 2 1 "$WORK/l.log"
else
  fail "the no-watchdog job did not start checkpointing"; cat "$WORK/l.log"
fi

# 6. A job stopped by SIGUSR1 (exit 3, as before a requeue) releases the directory.
sig=$WORK/sig
launch "$WORK/s" "$sig" --set train.epochs=$LONG
if wait_chain "$sig" 1 "$WORK/s"; then
  # shellcheck disable=SC2046
  kill -USR1 $(owner_pids "$sig")
  st=$(wait_status "$WORK/s" 120)
  if every_rank_exited 2 "$WORK/s" 3 && [ "$(owner_field "$sig" state)" = released ] &&
     [ "$(owner_field "$sig" end)" = "stopped by signal 10" ]; then
    pass "a job stopped by SIGUSR1 (exit 3) leaves owner.json released (stopped by signal 10)"
  else
    fail "release after SIGUSR1 (status $st)"; cat "$WORK/s.log" "$sig/owner.json"
  fi
else
  fail "the job to stop did not start checkpointing"; cat "$WORK/s.log"
fi

finish
