#!/usr/bin/env bash
# The time limit's own warning on a real local Slurm (tests/cluster/slurm.sh):
# train.sbatch submitted with --time=1 --signal=B:USR1@50 gets SIGUSR1 from
# slurmctld itself (not from scancel) once fewer than 50 s are left, on
# slurmctld's next periodic check (every 30 s); the ranks checkpoint, the job
# requeues itself, and its next start resumes from that checkpoint. The test
# then cancels the job (each start would be warned again). The job has no
# end of its own (LONG epochs, lib.sh), so the warning finds it running
# however fast the machine.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
slurm_up 1 || exit 1

dir=$WORK/timelimit
args="--set train.epochs=$LONG --set log.every_steps=1 --set dist.threads=1"
t0=$(date +%s.%N)
job=$(CTRAIN_ARGS=$args sbatch --parsable -N 1 -n 2 --time=1 --signal=B:USR1@50 -o "$dir.out" \
      "$CT_SOURCE_DIR/cluster/slurm/train.sbatch" "$CONFIG" "$dir")
if why=$(wait_restarts "$job" 1 150); then
  took=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.0f", b - a }')
  # The second start resumes from the checkpoint the first one wrote.
  for ((i = 0; i < 600; i++)); do
    grep -q "resumed from" "$dir.out" && break
    slurm_state_final "$(slurm_job_field "$job" JobState)" && break
    sleep 0.1
  done
  scancel "$job" 2>/dev/null || true
  stopped=$(sed -n 's/.*stopped by signal 10 at step \([0-9]*\) after writing a checkpoint.*/\1/p' "$dir.out" | head -1)
  if grep -q "ctrain-job: SIGUSR1: asking the ranks to checkpoint and stop" "$dir.out" &&
     [ -n "$stopped" ] && grep -q "ctrain-job: checkpointed on request: requeueing job $job" "$dir.out" &&
     grep -q "resumed from .*/ckpt-$stopped: step $stopped " "$dir.out"; then
    pass "--time=1 --signal=B:USR1@50: warned by slurmctld, checkpointed at step $stopped, requeued and resumed from it ($took s from submission to the second start)"
  else
    fail "time-limit warning: the output does not show warn -> checkpoint -> requeue -> resume"; cat "$dir.out"
  fi
else
  scancel "$job" 2>/dev/null || true
  fail "time-limit warning: $why"
  cat "$dir.out"
fi
finish
