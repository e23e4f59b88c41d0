#!/usr/bin/env bash
# The batch templates on a real local Slurm (tests/cluster/slurm.sh):
# - cluster/slurm/train.sbatch (mpirun) on 2 nodes, preempted twice (SIGUSR1
#   to the batch shell, as --signal=B:USR1 does): requeued twice, COMPLETED,
#   the same final param_sha256 as an uninterrupted job;
# - cluster/slurm/train-srun.sbatch (srun --mpi=pmix) on 1 node, the same;
# - a job whose training fails ends FAILED with the cause and is not requeued;
# - CTRAIN_MAX_REQUEUES bounds the requeues.
# The preempted jobs cannot end before the test has acted, on any machine:
# they have no end of their own (LONG epochs, no max_steps) until the test,
# while the job waits after its second requeue (the partition DOWN, so it
# cannot start again however fast the machine), writes a max_steps 40 steps
# past the step it checkpointed at into the config the job reads.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
slurm_up 2 || exit 1

args="--set train.epochs=$LONG --set log.every_steps=1 --set dist.threads=1"

# preempted_job TEMPLATE NODES RANKS DIR: submit with the config DIR.ini (no
# max_steps), preempt at step 40 and again 40 steps into the second start;
# then, the job kept from its third start (partition DOWN), set max_steps in
# DIR.ini to 40 steps past the second checkpoint and let it go. Prints "JOB MAX_STEPS",
# or why it failed (and cancels the job).
preempted_job() {
  local tmpl=$1 nodes=$2 ranks=$3 dir=$4 job target=40 at
  job_config "$dir.ini" 0 || return 1
  job=$(CTRAIN_ARGS=$args sbatch --parsable -N "$nodes" -n "$ranks" -o "$dir.out" \
        "$CT_SOURCE_DIR/cluster/slurm/$tmpl" "$dir.ini" "$dir") || { echo "sbatch failed"; return 1; }
  wait_step "$job" "$dir" $target 240 || { scancel "$job"; return 1; }
  scancel --batch --signal=USR1 "$job"
  wait_restarts "$job" 1 240 || { scancel "$job"; return 1; }
  # The second start resumes from the checkpoint the first one stopped at.
  at=$(sed -n 's/^ckpt-//p' "$dir/latest")
  target=$((at + 40))
  wait_step "$job" "$dir" $target 240 || { scancel "$job"; return 1; }
  partition_state DOWN || { scancel "$job"; return 1; }
  scancel --batch --signal=USR1 "$job"
  wait_requeued "$job" 2 240 || { partition_state UP; scancel "$job"; return 1; }
  at=$(sed -n 's/^ckpt-//p' "$dir/latest")
  job_config "$dir.ini" $((at + 40)) || { partition_state UP; scancel "$job"; return 1; }
  partition_state UP || { scancel "$job"; return 1; }
  wait_restarts "$job" 2 240 || { scancel "$job"; return 1; }
  echo "$job $((at + 40))"
}

# reference MAX_STEPS: sets want to the final param_sha256 of an
# uninterrupted train.sbatch job on 2 nodes that stops at MAX_STEPS (one
# job per value).
declare -A refs=()
reference() {
  if [ -z "${refs[$1]:-}" ]; then
    local ref=$WORK/ref-$1 job
    job=$(CTRAIN_ARGS="$args --set train.max_steps=$1" sbatch --parsable -N 2 -n 2 -o "$ref.out" \
          "$CT_SOURCE_DIR/cluster/slurm/train.sbatch" "$CONFIG" "$ref")
    if [ "$(slurm_wait_job "$job" 300)" = COMPLETED ] && [ "$(last_step "$ref")" = "$1" ]; then
      pass "uninterrupted train.sbatch job to step $1 COMPLETED"
    else
      fail "uninterrupted job to step $1"; cat "$ref.out"
    fi
    refs[$1]=$(digest "$ref")
  fi
  want=${refs[$1]}
}

for case in "train.sbatch 2 2" "train-srun.sbatch 1 2"; do
  read -r tmpl nodes ranks <<<"$case"
  dir=$WORK/pre-$tmpl
  if out=$(preempted_job "$tmpl" "$nodes" "$ranks" "$dir"); then
    read -r job final <<<"$out"
    state=$(slurm_wait_job "$job" 300)
    restarts=$(slurm_job_field "$job" Restarts)
    got=$(digest "$dir")
    reference "$final"
    if [ "$state" = COMPLETED ] && [ "$restarts" = 2 ] && [ "$(last_step "$dir")" = "$final" ] &&
       [ "$got" = "$want" ] && [ "$(grep -c 'ctrain-job: job .* start' "$dir.out")" = 3 ]; then
      pass "$tmpl on $nodes node(s), preempted twice: requeued twice, COMPLETED at step $final, same param_sha256"
    else
      fail "$tmpl preempted: state $state restarts $restarts at step $(last_step "$dir") (want $final), digest $got (want $want)"
      cat "$dir.out"
    fi
  else
    fail "$tmpl preempted: $out"; cat "$dir.out"
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
if why=$(wait_step "$job" "$dir" 20 240); then
  scancel --batch --signal=USR1 "$job"
  state=$(slurm_wait_job "$job" 300)
  if [ "$state" = FAILED ] && [ "$(slurm_job_field "$job" ExitCode)" = 3:0 ] &&
     [ "$(slurm_job_field "$job" Restarts)" = 0 ] && grep -q "CTRAIN_MAX_REQUEUES=0" "$dir.out"; then
    pass "CTRAIN_MAX_REQUEUES=0: checkpointed, not requeued, exit 3"
  else
    fail "max requeues: state $state exit $(slurm_job_field "$job" ExitCode)"; cat "$dir.out"
  fi
else
  scancel "$job"
  fail "max requeues: $why"; cat "$dir.out"
fi
finish
