#!/usr/bin/env bash
# The batch templates on a real local Slurm (tests/cluster/slurm.sh):
# - cluster/slurm/train.sbatch (mpirun) on 2 nodes, preempted twice (SIGUSR1
#   to the batch shell, as --signal=B:USR1 does): requeued twice, COMPLETED,
#   the same final param_sha256 as an uninterrupted job;
# - cluster/slurm/train-srun.sbatch (srun --mpi=pmix) on 1 node, the same;
# - a job whose training fails ends FAILED with the cause and is not requeued;
# - CTRAIN_MAX_REQUEUES bounds the requeues.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
slurm_up 2 || exit 1

# Long enough (about 4 s on 2 fast cores) that a preemption at step 40 or 80
# always lands before the end, however fast the machine.
args="--set train.max_steps=1200 --set train.epochs=6 --set log.every_steps=1 --set dist.threads=1"

# preempted_job TEMPLATE NODES RANKS DIR: submit, preempt twice mid-training.
preempted_job() {
  local tmpl=$1 nodes=$2 ranks=$3 dir=$4 job k target=40
  job=$(CTRAIN_ARGS=$args sbatch --parsable -N "$nodes" -n "$ranks" -o "$dir.out" \
        "$CT_SOURCE_DIR/cluster/slurm/$tmpl" "$CONFIG" "$dir") || return 1
  for k in 1 2; do
    wait_step "$dir" $target 240 || { echo "  no progress to step $target"; return 1; }
    scancel --batch --signal=USR1 "$job"
    wait_restarts "$job" "$k" 240 || { echo "  not requeued a ${k}. time"; return 1; }
    # The stop lands some steps after the signal: preempt the requeued job 40
    # steps after where the previous one checkpointed, i.e. once it trains.
    target=$(($(jsonl "$dir/steps.jsonl" -1 step) + 40))
  done
  echo "$job"
}

ref=$WORK/ref
job=$(CTRAIN_ARGS=$args sbatch --parsable -N 2 -n 2 -o "$ref.out" "$CT_SOURCE_DIR/cluster/slurm/train.sbatch" "$CONFIG" "$ref")
[ "$(slurm_wait_job "$job" 300)" = COMPLETED ] && pass "uninterrupted train.sbatch job COMPLETED" ||
  { fail "uninterrupted job"; cat "$ref.out"; }
want=$(digest "$ref")

for case in "train.sbatch 2 2" "train-srun.sbatch 1 2"; do
  read -r tmpl nodes ranks <<<"$case"
  dir=$WORK/pre-$tmpl
  if job=$(preempted_job "$tmpl" "$nodes" "$ranks" "$dir"); then
    state=$(slurm_wait_job "$job" 300)
    restarts=$(slurm_job_field "$job" Restarts)
    got=$(digest "$dir")
    if [ "$state" = COMPLETED ] && [ "$restarts" = 2 ] && [ "$got" = "$want" ] &&
       [ "$(grep -c 'ctrain-job: job .* start' "$dir.out")" = 3 ]; then
      pass "$tmpl on $nodes node(s), preempted twice: requeued twice, COMPLETED, same param_sha256"
    else
      fail "$tmpl preempted: state $state restarts $restarts digest $got (want $want)"; cat "$dir.out"
    fi
  else
    fail "$tmpl preempted: $job"; cat "$dir.out"
  fi
done

# Training fails (a data directory that does not exist): FAILED, not requeued.
dir=$WORK/bad
job=$(CTRAIN_ARGS="--set data.dir=$WORK/nowhere" sbatch --parsable -N 1 -n 2 -o "$dir.out" \
      "$CT_SOURCE_DIR/cluster/slurm/train.sbatch" "$CONFIG" "$dir")
state=$(slurm_wait_job "$job" 300)
if [ "$state" = FAILED ] && [ "$(slurm_job_field "$job" Restarts)" = 0 ] &&
   grep -q "ctrain-job: failed: training ended with exit status 1: a run-time error" "$dir.out" &&
   grep -q "nowhere" "$dir.out"; then
  pass "failing training: FAILED with the cause, not requeued"
else
  fail "failing training: state $state"; cat "$dir.out"
fi

# CTRAIN_MAX_REQUEUES=0: checkpointed on request but not requeued; exit 3.
dir=$WORK/max
job=$(CTRAIN_MAX_REQUEUES=0 CTRAIN_ARGS=$args sbatch --parsable -N 1 -n 1 -o "$dir.out" \
      "$CT_SOURCE_DIR/cluster/slurm/train-srun.sbatch" "$CONFIG" "$dir")
wait_step "$dir" 20 240 && scancel --batch --signal=USR1 "$job"
state=$(slurm_wait_job "$job" 300)
if [ "$state" = FAILED ] && [ "$(slurm_job_field "$job" ExitCode)" = 3:0 ] &&
   [ "$(slurm_job_field "$job" Restarts)" = 0 ] && grep -q "CTRAIN_MAX_REQUEUES=0" "$dir.out"; then
  pass "CTRAIN_MAX_REQUEUES=0: checkpointed, not requeued, exit 3"
else
  fail "max requeues: state $state exit $(slurm_job_field "$job" ExitCode)"; cat "$dir.out"
fi
finish
