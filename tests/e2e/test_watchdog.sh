#!/usr/bin/env bash
# The hang watchdog and the stop signals under plain mpirun (the Slurm
# versions are in tests/cluster/test_faults.sh):
# - a rank SIGSTOPped mid-epoch: the job ends with status 4 within
#   dist.watchdog_s plus a few beats, one message naming that rank;
# - every rank stuck in I/O while loading the data (a FIFO nobody writes),
#   before the first step: the watchdog already runs and ends the job the
#   same way, naming every rank (all alive, all at step 0);
# - SIGUSR1 sent to every rank the moment the processes exist (in MPI_Init
#   or earlier): not the default action (death) but a stop request: the run
#   checkpoints at its first step and exits 3 on every rank, and --resume
#   auto continues from that checkpoint.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# The .gz files (lib.sh: CONFIG_GZ): the stuck start-up below puts a FIFO
# in place of one.
CONFIG=$CONFIG_GZ
WD=3

# rank_pids DIR: the PIDs of the ctrain-dist processes writing DIR, as
# "rank pid" lines (the rank from the launcher's environment: Open MPI's
# OMPI_COMM_WORLD_RANK or hydra's PMI_RANK).
rank_pids() {
  local p r
  for p in $(pgrep -f -- "--run-dir $1( |\$)"); do
    [ "$(cat /proc/"$p"/comm 2>/dev/null)" = ctrain-dist ] || continue
    r=$(tr '\0' '\n' </proc/"$p"/environ 2>/dev/null | sed -n -E 's/^(OMPI_COMM_WORLD_RANK|PMI_RANK)=//p')
    [ -n "$r" ] && echo "$r $p"
  done
}

# launch DIR ARGS...: mpirun -np 2 in the background, status to DIR.status.
launch() {
  local dir=$1
  shift
  ( rc=0
    timeout 300 "$CT_MPIEXEC" "${CT_MPIEXEC_ARGS[@]}" -np 2 "$CT_BINARY" --config "$CONFIG" \
      --run-dir "$dir" --set dist.threads=1 "$@" >"$dir.log" 2>&1 || rc=$?
    echo $rc >"$dir.status" ) &
}

# wait_status DIR SECONDS: wait for the launcher's status; prints it.
wait_status() {
  local i
  for ((i = 0; i < $2 * 10; i++)); do
    [ -s "$1.status" ] && { cat "$1.status"; return 0; }
    sleep 0.1
  done
  echo timeout
}

# 1. SIGSTOP of rank 1 mid-epoch. The run has no end of its own (LONG
# epochs, no max_steps): the signal finds it running however fast the machine.
dir=$WORK/stop
launch "$dir" --set train.epochs=$LONG --set log.every_steps=1 --set dist.watchdog_s=$WD
for ((i = 0; i < 600; i++)); do
  [ -s "$dir/steps.jsonl" ] && [ "$(wc -l <"$dir/steps.jsonl")" -ge 20 ] && break
  [ -e "$dir.status" ] && break # ended early: fail now, not after a minute
  sleep 0.1
done
victim=
[ -e "$dir.status" ] || victim=$(rank_pids "$dir" | awk '$1 == 1 { print $2 }')
if [ -e "$dir.status" ]; then
  fail "SIGSTOP mid-epoch: the run ended (status $(cat "$dir.status")) before it could be stopped"; cat "$dir.log"
elif [ -n "$victim" ]; then
  kill -STOP "$victim"
  t0=$(date +%s.%N)
  st=$(wait_status "$dir" 60)
  took=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  kill -CONT "$victim" 2>/dev/null || true
  if [ "$st" = 4 ] && ge $((WD + 10)) "$took" &&
     grep -q "watchdog: no rank made progress for $WD s (dist.watchdog_s); behind: rank 1 (host [^,]*, last step [0-9]*, not responding" "$dir.log"; then
    pass "SIGSTOP of rank 1 mid-epoch: exit 4 after $took s (dist.watchdog_s $WD), rank 1 named"
  else
    fail "SIGSTOP mid-epoch: status $st after $took s"; cat "$dir.log"
  fi
else
  fail "SIGSTOP mid-epoch: the run did not get going"; cat "$dir.log"
fi

# 2. Stuck in I/O during start-up: the training images are a FIFO that no
# one writes, so loading them blocks in open(2) before the first step (the
# watchdog already runs then: it starts before the data is loaded).
slow=$WORK/slowdata
mkdir -p "$slow"
for f in train-labels-idx1-ubyte.gz t10k-images-idx3-ubyte.gz t10k-labels-idx1-ubyte.gz; do
  ln -s "$DATA/$f" "$slow/$f"
done
mkfifo "$slow/train-images-idx3-ubyte.gz"
dir=$WORK/stuck
t0=$(date +%s.%N)
launch "$dir" --set train.epochs=1 --set dist.watchdog_s=$WD --set data.dir="$slow"
st=$(wait_status "$dir" 60)
took=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
if [ "$st" = 4 ] && [ ! -e "$dir/steps.jsonl" ] &&
   grep -q "watchdog: no rank made progress for $WD s (dist.watchdog_s); behind: rank 0 (host [^,]*, last step 0, still running); rank 1 " "$dir.log"; then
  pass "a data file that never delivers: exit 4 after $took s from the launch, before any step"
else
  fail "stuck at start-up: status $st after $took s"; cat "$dir.log"
fi
# Nothing may still hold the FIFO open.
pkill -KILL -f -- "--run-dir $dir( |\$)" 2>/dev/null || true

# 3. SIGUSR1 to both ranks while they start: as soon as both processes
# catch it (main's first instruction installs the handler; /proc/PID/status
# SigCgt, bit 10), that is in MPI_Init, the BLAS re-exec or the loading of
# the data. (Between exec and main, while the dynamic loader runs, nothing of
# ours can catch it.)
dir=$WORK/usr1
launch "$dir" --set train.epochs=$LONG --set dist.watchdog_s=60
caught() { local m; m=$(sed -n 's/^SigCgt:[[:space:]]*//p' /proc/"$1"/status 2>/dev/null); [ -n "$m" ] && (( (16#$m >> 9) & 1 )); }
pids=
for ((i = 0; i < 1000; i++)); do
  pids=$(rank_pids "$dir" | awk '{ print $2 }')
  n=0
  for p in $pids; do caught "$p" && n=$((n + 1)); done
  [ "$n" -ge 2 ] && break
  [ -e "$dir.status" ] && break
  sleep 0.005
done
signalled=$n
if [ "$signalled" -ge 2 ]; then
  # shellcheck disable=SC2086
  kill -USR1 $pids
  st=$(wait_status "$dir" 120)
else
  # Not signalled, the run would not end: end it now.
  [ -e "$dir.status" ] || pkill -KILL -f -- "--run-dir $dir( |\$)" 2>/dev/null || true
  st=$(wait_status "$dir" 30)
fi
if [ "$signalled" -ge 2 ] && [ "$st" = 3 ] && [ -e "$dir/latest" ] &&
   grep -q "stopped by signal 10 at step" "$dir.log"; then
  at=$(sed -n 's/.*stopped by signal 10 at step \([0-9]*\).*/\1/p' "$dir.log" | head -1)
  pass "SIGUSR1 at start-up: exit 3 after a checkpoint at step $at"
  # The resumed run ends 20 steps after the checkpoint it resumes from.
  if run_np 2 "$dir.resume" --config "$CONFIG" --run-dir "$dir" --set dist.threads=1 \
       --set train.epochs=$LONG --set train.max_steps=$((at + 20)) --resume auto &&
     grep -q "resumed from .*ckpt-$at: " "$dir.resume.log" && [ "$(metric "$dir/metrics.jsonl" -1 step)" = $((at + 20)) ]; then
    pass "--resume auto continues from it and finishes at step $((at + 20))"
  else
    fail "resume after the start-up SIGUSR1"; cat "$dir.resume.log"
  fi
else
  fail "SIGUSR1 at start-up: signalled $signalled ranks, status $st"; cat "$dir.log"
fi

finish
