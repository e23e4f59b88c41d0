#!/usr/bin/env bash
# Faults and several nodes on a real local Slurm of 4 nodes (tests/cluster/slurm.sh):
# - a rank SIGSTOPped mid-epoch under train.sbatch (mpirun, 2 nodes): the hang
#   watchdog ends the job within dist.watchdog_s + 30 s, FAILED, with a
#   message naming that rank and its host;
# - a rank SIGKILLed under train-srun.sbatch (srun, 2 nodes): the job ends (no
#   hang), and the next job (train.sbatch) with --resume auto ends bit for bit
#   like a run never interrupted;
# - 4 nodes x 1 rank and 2 nodes x 2 ranks: placement numbers local ranks per
#   host, and the checkpoint written to the shared run directory records
#   every rank's host.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
slurm_up 4 || exit 1
WD=10
# No end of their own (LONG epochs, lib.sh): the signals at step 30 find the
# jobs running however fast the machine.
args="--set train.epochs=$LONG --set log.every_steps=1 --set dist.threads=1 --set dist.watchdog_s=$WD"

# rank_pid DIR RANK: the PID of that rank of the job writing DIR (its rank from
# the process-management interface: PMIX_RANK under Open MPI's mpirun and srun
# --mpi=pmix, PMI_RANK under MPICH's hydra and srun --mpi=pmi2). Looked for
# during up to 10 s (once, in CI under load, one look found no such process
# while the job ran: a process list or environ read caught in passing); on
# failure it names every process that matched and the rank it carried.
rank_pid() {
  local p i seen
  for ((i = 0; i < 50; i++)); do
    seen=
    for p in $(pgrep -f -- "--run-dir $1( |\$)"); do
      tr '\0' '\n' </proc/"$p"/environ 2>/dev/null | grep -qxE "(PMIX_RANK|PMI_RANK)=$2" && { echo "$p"; return 0; }
      seen="$seen $p:$(tr '\0' '\n' </proc/"$p"/environ 2>/dev/null | grep -m1 -E '^(PMIX_RANK|PMI_RANK)=' || echo no-rank)"
    done
    sleep 0.2
  done
  echo "no process of rank $2 writes $1 (matched:${seen:- none})"
  return 1
}

# SIGSTOP under sbatch + mpirun.
dir=$WORK/stop
job=$(CTRAIN_ARGS=$args sbatch --parsable -N 2 -n 2 -o "$dir.out" "$CT_SOURCE_DIR/cluster/slurm/train.sbatch" "$CONFIG" "$dir")
if why=$(wait_step "$job" "$dir" 30 240) && why=$(rank_pid "$dir" 1); then
  victim=$why
  kill -STOP "$victim"
  t0=$(date +%s.%N)
  state=$(slurm_wait_job "$job" $((WD + 120))) || true
  took=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  kill -CONT "$victim" 2>/dev/null || true
  if [ "$state" = FAILED ] && ge $((WD + 30)) "$took" &&
     grep -q "watchdog: no rank made progress for $WD s (dist.watchdog_s); behind: rank 1 (host node2, last step" "$dir.out" &&
     grep -q "exit status 4: the hang watchdog" "$dir.out"; then
    pass "SIGSTOP of rank 1 under train.sbatch: FAILED after $took s (watchdog_s $WD), rank 1 on node2 named"
    grep -m1 "watchdog: no rank" "$dir.out" | sed 's/^/  /'
  else
    fail "SIGSTOP: state $state after $took s"; cat "$dir.out"
  fi
else
  scancel "$job" 2>/dev/null || true
  fail "SIGSTOP: $why"; cat "$dir.out"
fi

# SIGKILL under srun, then --resume auto bit for bit. The killed job has no
# end of its own; the job that resumes it stops 40 steps past the
# checkpoint it resumes from, and so does the uninterrupted reference.
dir=$WORK/kill
job=$(CTRAIN_ARGS="$args --set checkpoint.every_steps=20" sbatch --parsable -N 2 -n 2 -o "$dir.out" \
      "$CT_SOURCE_DIR/cluster/slurm/train-srun.sbatch" "$CONFIG" "$dir")
if why=$(wait_step "$job" "$dir" 30 240) && why=$(rank_pid "$dir" 1); then
  victim=$why
  kill -KILL "$victim"
  t0=$(date +%s.%N)
  state=$(slurm_wait_job "$job" $((WD + 120))) || true
  took=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  if [ "$state" = FAILED ] && grep -q "task 1" "$dir.out"; then
    pass "SIGKILL of rank 1 under train-srun.sbatch: FAILED after $took s, task 1 named"
    grep -E "srun: error|watchdog: no rank|ctrain-job: failed" "$dir.out" | sed 's/^/  /'
  else
    fail "SIGKILL: state $state after $took s"; cat "$dir.out"
  fi
  at=$(sed -n 's/^ckpt-//p' "$dir/latest" 2>/dev/null || true)
  steps="--set train.max_steps=$((${at:-0} + 40))"
  # The next job resumes with the other template (mpirun): the launcher is
  # not part of the experiment.
  job=$(CTRAIN_ARGS="$args $steps --set checkpoint.every_steps=20" sbatch --parsable -N 2 -n 2 -o "$dir.out" \
        "$CT_SOURCE_DIR/cluster/slurm/train.sbatch" "$CONFIG" "$dir")
  state=$(slurm_wait_job "$job" 300) || true
  ref=$WORK/ref
  job=$(CTRAIN_ARGS="$args $steps" sbatch --parsable -N 2 -n 2 -o "$ref.out" "$CT_SOURCE_DIR/cluster/slurm/train-srun.sbatch" "$CONFIG" "$ref")
  [ "$(slurm_wait_job "$job" 300)" = COMPLETED ] || { fail "srun reference job"; cat "$ref.out"; }
  final() { sed -n 's/.*params sha256 \([0-9a-f]*\)$/\1/p' "$1" | tail -1; }
  if [ -n "$at" ] && [ "$state" = COMPLETED ] && [ -n "$(final "$dir.out")" ] && [ "$(final "$dir.out")" = "$(final "$ref.out")" ] &&
     grep -q "resumed from .*/ckpt-$at: " "$dir.out"; then
    pass "after the SIGKILL, --resume auto from ckpt-$at to step $((at + 40)) ends with the uninterrupted run's parameters"
  else
    fail "resume after SIGKILL (from ${at:-no checkpoint}): state $state, $(final "$dir.out") vs $(final "$ref.out")"; cat "$dir.out"
  fi
else
  scancel "$job" 2>/dev/null || true
  fail "SIGKILL: $why"; cat "$dir.out"
fi

# Placement and manifests on 4 nodes x 1 rank and 2 nodes x 2 ranks.
for shape in "4 4" "2 4"; do
  read -r nodes ranks <<<"$shape"
  dir=$WORK/place-$nodes
  per=$((ranks / nodes))
  job=$(CTRAIN_ARGS="--set train.max_steps=5 --set train.epochs=1 --set dist.threads=1" sbatch --parsable \
        -N "$nodes" -n "$ranks" --ntasks-per-node="$per" -o "$dir.out" "$CT_SOURCE_DIR/cluster/slurm/train.sbatch" "$CONFIG" "$dir")
  state=$(slurm_wait_job "$job" 300)
  want=$(for ((r = 0; r < ranks; r++)); do echo "$r node$((r / per + 1)) $((r % per))/$per"; done)
  got=$(awk '$1 ~ /^[0-9]+$/ { print $1, $2, $3 }' "$dir/placement.txt")
  hosts=$("$CT_BINARY" inspect "$dir/ckpt-5" 2>&1 | grep -o 'node[0-9]' | sort -u | tr '\n' ' ')
  want_hosts=$(for ((i = 1; i <= nodes; i++)); do printf 'node%d ' "$i"; done)
  if [ "$state" = COMPLETED ] && [ "$got" = "$want" ] && [ "$hosts" = "$want_hosts" ]; then
    pass "$nodes nodes x $per ranks: local ranks per host, the checkpoint's manifest names $hosts"
  else
    fail "$nodes nodes: state $state; placement:"; echo "$got"; echo "want:"; echo "$want"; echo "hosts: $hosts"; cat "$dir.out"
  fi
done
finish
