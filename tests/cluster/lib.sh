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

# wait_step DIR STEP SECONDS: until DIR/steps.jsonl reaches STEP.
wait_step() {
  local i s
  for ((i = 0; i < $3 * 10; i++)); do
    s=$(jsonl "$1/steps.jsonl" -1 step 2>/dev/null || echo 0)
    [ "${s:-0}" -ge "$2" ] && return 0
    sleep 0.1
  done
  return 1
}

# wait_restarts JOB K SECONDS: until JOB runs again after its K-th requeue.
wait_restarts() {
  local i
  for ((i = 0; i < $3 * 5; i++)); do
    [ "$(slurm_job_field "$1" Restarts)" = "$2" ] && [ "$(slurm_job_field "$1" JobState)" = RUNNING ] && return 0
    sleep 0.2
  done
  return 1
}
