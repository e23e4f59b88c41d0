#!/bin/bash
# The run directory must be shared by every host, checked at start
# (src/run/shared.c; issue 33, item 3). Three hosts of tests/net/lib.sh, each
# with its own empty tmpfs at PRIV:
#   - --run-dir under PRIV (a per-host directory, like /tmp on real nodes):
#     refused before the first step, within 10 s, every rank exiting 1, the
#     message naming the host that does not see it (h1) and what to do;
#     nothing left in either host's PRIV (the probe and the directories the
#     check made are removed);
#   - (Open MPI only, see below) the same on 3 hosts (h1 and h2 named) and
#     at 4 ranks, 2 a host (h1 named once with its ranks 2,3);
#   - a shared --run-dir: the check passes, the run trains and checkpoints,
#     no probe left behind.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

PRIV=$WORK/private
net_up 3 "$PRIV"
[ "$CT_MPI" = mpich ] || NET_MPI_ARGS=(--mca orte_abort_on_non_zero_status 0)

# launch HOSTS NP OUT ARGS...: ctrain-dist on NP ranks over HOSTS; each rank's
# exit status to OUT.rc.<rank> (OUT is in WORK, which every host shares),
# the output to OUT.log, the seconds mpirun took to OUT.s.
launch() {
  local hosts=$1 np=$2 out=$3 t0 t1
  shift 3
  rm -f "$out".rc.*
  t0=$(date +%s.%N)
  net_mpirun "$hosts" "$np" \
    bash -c '"$0" "$@"; rc=$?; echo $rc > "'"$out"'.rc.${OMPI_COMM_WORLD_RANK:-$PMI_RANK}"; exit $rc' \
    "$CT_BINARY" "$@" >"$out.log" 2>&1 </dev/null || true
  t1=$(date +%s.%N)
  awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f\n", b - a }' >"$out.s"
}

# left HOST: what HOST's private directory holds (empty: nothing).
left() { net_exec "$1" find "$PRIV" -mindepth 1; }

ARGS=(--config "$CONFIG" --set train.max_steps=2 --set checkpoint.every_steps=1 --set dist.threads=1)

# 1. A per-host directory, 2 hosts x 1 rank.
launch h0:1,h1:1 2 "$WORK/priv2" "${ARGS[@]}" --run-dir "$PRIV/x/run"
secs=$(cat "$WORK/priv2.s")
if every_rank_exited 2 "$WORK/priv2" 1; then pass "private run dir: every rank exited 1"; else fail "private run dir: exit statuses"; cat "$WORK/priv2.log"; fi
if grep -q "error: run directory $PRIV/x/run is not shared between the hosts of this job: host h1 (rank 1: No such file or directory) does not see the file" "$WORK/priv2.log" &&
   grep -q "on host h0" "$WORK/priv2.log" && grep -q "pass it with --run-dir" "$WORK/priv2.log"; then
  pass "private run dir: the message names h1, h0 and what to do"
else
  fail "private run dir: message"; cat "$WORK/priv2.log"
fi
if ge 10 "$secs"; then pass "private run dir: refused in $secs s (<= 10)"; else fail "private run dir: refused after $secs s (> 10)"; fi
# Refused before the first step: before the model, the data or the watchdog.
if ! grep -qE "^model |^placement |^ctrain-dist [0-9]" "$WORK/priv2.log"; then pass "private run dir: refused before anything trained"; else fail "private run dir: it got further"; cat "$WORK/priv2.log"; fi
if [ -z "$(left h0)$(left h1)" ]; then pass "private run dir: nothing left on h0 or h1"; else fail "private run dir: left behind: h0 [$(left h0)] h1 [$(left h1)]"; fi

# Cases 2 and 2b under Open MPI only: MPICH 4.0.2 over UCX here hangs now and
# then in MPI_Finalize with more than two processes (one rank spinning in
# UCX's endpoint close, the others in hydra's PMI barrier): 1 run in 6 of
# this case at 3 hosts, 1 in 3 of a program that only gathers, broadcasts
# and finalizes at 2 x 2; none in 8 at 2 hosts x 1, the cases MPICH runs.
if [ "$CT_MPI" != mpich ]; then
  # 2. 3 hosts: h1 and h2 named, each with its rank.
  launch h0:1,h1:1,h2:1 3 "$WORK/priv3" "${ARGS[@]}" --run-dir "$PRIV/run3"
  secs=$(cat "$WORK/priv3.s")
  if every_rank_exited 3 "$WORK/priv3" 1 &&
     grep -q "hosts h1 (rank 1: No such file or directory), h2 (rank 2: No such file or directory) do not see" "$WORK/priv3.log" &&
     ge 10 "$secs"; then
    pass "private run dir, 3 hosts: every rank exited 1 in $secs s, h1 and h2 named"
  else
    fail "private run dir, 3 hosts ($secs s)"; cat "$WORK/priv3.log"
  fi
  if [ -z "$(left h0)$(left h1)$(left h2)" ]; then pass "private run dir, 3 hosts: nothing left"; else fail "private run dir, 3 hosts: left behind: h0 [$(left h0)] h1 [$(left h1)] h2 [$(left h2)]"; fi

  # 2b. 2 hosts x 2 ranks: h1's two ranks named together, h0's ranks see it.
  launch h0:2,h1:2 4 "$WORK/priv4" "${ARGS[@]}" --run-dir "$PRIV/run4"
  secs=$(cat "$WORK/priv4.s")
  if every_rank_exited 4 "$WORK/priv4" 1 && grep -q "host h1 (ranks 2,3: No such file or directory) does not see" "$WORK/priv4.log" &&
     ! grep -q "h0 (rank" "$WORK/priv4.log" && ge 10 "$secs"; then
    pass "private run dir, 4 ranks: every rank exited 1 in $secs s, h1's ranks 2,3 named"
  else
    fail "private run dir, 4 ranks ($secs s)"; cat "$WORK/priv4.log"
  fi
  if [ -z "$(left h0)$(left h1)" ]; then pass "private run dir, 4 ranks: nothing left"; else fail "private run dir, 4 ranks: left behind: h0 [$(left h0)] h1 [$(left h1)]"; fi
fi

# 3. A shared directory (WORK: the same file system on every host).
launch h0:1,h1:1 2 "$WORK/shared" "${ARGS[@]}" --run-dir "$WORK/run"
if every_rank_exited 2 "$WORK/shared" 0 && [ -d "$WORK/run/ckpt-2" ] &&
   [ -z "$(find "$WORK/run" -name '.ct-shared-probe.tmp-*')" ]; then
  pass "shared run dir: trained and checkpointed on 2 hosts, no probe left"
else
  fail "shared run dir"; cat "$WORK/shared.log"; ls -la "$WORK/run" || true
fi

finish
