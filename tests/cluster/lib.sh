# Helpers for the cluster tests (sourced): the e2e helpers, the local Slurm,
# and a few waits. Without root or without Slurm installed the tests are
# skipped (exit 77), except in CI (CI=true), where that is a failure.
source "$(dirname "${BASH_SOURCE[0]}")/../e2e/lib.sh"
source "$(dirname "${BASH_SOURCE[0]}")/slurm.sh"
if [ "$(id -u)" != 0 ] || ! command -v slurmd >/dev/null || ! command -v munged >/dev/null; then
  echo "cluster tests need root and Debian's munge, slurmctld, slurmd and slurm-client (launch/setup.sh)"
  [ "${CI:-}" = true ] && exit 1
  exit 77
fi
# The job's children find the binary through the templates' variable.
export CTRAIN_BINARY=$CT_BINARY

digest() { metric "$1/metrics.jsonl" -1 param_sha256 || echo "no digest in $1"; }

# A job that a test acts on (signals, requeues, kills a rank of) has no end
# of its own: LONG epochs (tests/e2e/lib.sh) and no max_steps; where it must
# end after the test has acted, the test sets train.max_steps from the step
# it finds in the run directory (job_config). Every wait below fails at
# once, saying so, when the job has ended before it should.

# job_config FILE MAX_STEPS: the config a job reads at each start: $CONFIG
# with train.max_steps = MAX_STEPS (0: no limit). A requeued job runs with
# the environment and arguments it was submitted with, so rewriting this file
# while the job waits to start again is how a test gives its last start an
# end (train.max_steps may change on resume: it changes no update).
job_config() {
  sed "s/^max_steps = .*/max_steps = $2/" "$CONFIG" >"$1.tmp" && mv "$1.tmp" "$1"
  grep -q "^max_steps = $2\$" "$1" || { echo "job_config: no max_steps line in $CONFIG"; return 1; }
}

# last_step DIR: the last step in DIR/steps.jsonl; 0 before the first.
last_step() { jsonl "$1/steps.jsonl" -1 step 2>/dev/null || echo 0; }

# job_gone JOB: JOB has ended for good; prints its state, exit code and
# restarts for the caller's message.
job_gone() {
  local state
  state=$(slurm_job_field "$1" JobState)
  slurm_state_final "$state" || return 1
  echo "job $1 ended $state (exit code $(slurm_job_field "$1" ExitCode), $(slurm_job_field "$1" Restarts) restarts)"
}

# wait_step JOB DIR STEP SECONDS: until DIR/steps.jsonl of JOB reaches STEP.
# On failure prints why: the job ended first (found at once), or no such
# step within SECONDS.
wait_step() {
  local job=$1 dir=$2 want=$3 i s gone
  for ((i = 0; i < $4 * 10; i++)); do
    s=$(last_step "$dir")
    [ "${s:-0}" -ge "$want" ] && return 0
    if ((i % 5 == 0)) && gone=$(job_gone "$job"); then
      s=$(last_step "$dir")
      [ "${s:-0}" -ge "$want" ] && return 0
      echo "$gone at step $s, before step $want"
      return 1
    fi
    sleep 0.1
  done
  echo "job $job: not at step $want within $4 s (at step $s, state $(slurm_job_field "$job" JobState))"
  return 1
}

# wait_restarts JOB K SECONDS: until JOB runs again after its K-th requeue.
# On failure prints why: the job ended instead (found at once), or it did
# not run again within SECONDS.
wait_restarts() {
  local i state restarts
  for ((i = 0; i < $3 * 5; i++)); do
    state=$(slurm_job_field "$1" JobState)
    restarts=$(slurm_job_field "$1" Restarts)
    [ "$restarts" = "$2" ] && [ "$state" = RUNNING ] && return 0
    if slurm_state_final "$state"; then
      echo "job $1 ended $state (exit code $(slurm_job_field "$1" ExitCode)) after $restarts restarts, not requeued a ${2}. time"
      return 1
    fi
    sleep 0.2
  done
  echo "job $1 not running again after requeue $2 within $3 s (state $state, $restarts restarts)"
  return 1
}

# partition_state STATE: the test Slurm's one partition (slurm.sh) to UP or
# DOWN. While it is DOWN, running jobs go on and a requeued job stays
# pending (reason PartitionDown) however fast the machine is: that is how a
# test changes what a job's next start reads without racing it.
partition_state() {
  scontrol update PartitionName=debug State="$1" || { echo "scontrol: partition debug not set $1"; return 1; }
}

# wait_requeued JOB K SECONDS: until JOB, requeued a K-th time, waits to
# start again (the caller has put the partition DOWN: the job is completing
# or pending, and cannot run again until it is UP; Restarts counts the
# requeue while the job still shows RUNNING, so wait past that). On failure
# prints why: the job ended, or it was not requeued within SECONDS.
wait_requeued() {
  local i state restarts
  for ((i = 0; i < $3 * 10; i++)); do
    state=$(slurm_job_field "$1" JobState)
    restarts=$(slurm_job_field "$1" Restarts)
    [ "$restarts" = "$2" ] && [ "$state" != RUNNING ] && return 0
    if slurm_state_final "$state"; then
      echo "job $1 ended $state (exit code $(slurm_job_field "$1" ExitCode)) after $restarts restarts, not requeued a ${2}. time"
      return 1
    fi
    sleep 0.1
  done
  echo "job $1 not requeued a ${2}. time within $3 s (state $state, $restarts restarts)"
  return 1
}
