#!/usr/bin/env bash
# Training across hosts (issue 33): two hosts of tests/net/lib.sh, the ranks
# talking over TCP on the test subnet only.
#  - the traffic really crosses the links: on two hosts, h1's eth0 carries at
#    least the gradients (4 bytes a parameter, every step) and placement.txt names
#    both hosts; on one host, h1's link stays quiet;
#  - train.deterministic = true gives the same bits on 1 host (2 ranks), 2
#    hosts (1 rank each), 2 hosts with 1 % of the packets lost, and 2 hosts
#    of 2 ranks each;
#  - log.trace across the hosts: trace.json names both hosts, and the barrier's
#    aligned ends and begins agree within the recorded bounds (issue 34).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
net_up 2
S=12
ARGS=(--config "$CONFIG" --set train.deterministic=true --set train.global_batch=96 --set train.micro_batch=8
      --set log.every_steps=1 --set checkpoint.every_epochs=0 --set train.max_steps=$S --set dist.threads=1
      --set log.trace=steps:5-7)
PARAMS=235146 # the mlp's (784*256+256 + 256*128+128 + 128*10+10)

# run_on HOSTS NP DIR: the deterministic mlp; "bytes" through h1's eth0 to DIR.bytes.
run_on() {
  local hosts=$1 np=$2 dir=$3 b0
  b0=$(net_bytes h1)
  if ! net_mpirun "$hosts" "$np" "$CT_BINARY" "${ARGS[@]}" --run-dir "$dir" >"$dir.log" 2>&1; then
    fail "run on $hosts ($np ranks)"; tail -20 "$dir.log"; return 1
  fi
  echo $(($(net_bytes h1) - b0)) >"$dir.bytes"
}

run_on h0:2 2 "$WORK/one" || true
run_on h0:1,h1:1 2 "$WORK/two" || true
min=$((S * PARAMS * 4))
got=$(cat "$WORK/two.bytes" 2>/dev/null || echo 0)
if [ "$got" -ge "$min" ] && grep -q ' h1 ' "$WORK/two/placement.txt"; then
  pass "2 hosts: $got bytes through h1's link for $S steps (the gradients alone: $min); placement.txt puts rank 1 on h1"
else
  fail "2 hosts: $got bytes through h1's link, want >= $min"; cat "$WORK/two/placement.txt"
fi
got=$(cat "$WORK/one.bytes" 2>/dev/null || echo -1)
if [ "$got" -ge 0 ] && [ "$got" -lt 100000 ]; then
  pass "1 host: h1's link quiet ($got bytes)"
else
  fail "1 host: $got bytes through h1's link"
fi
same "deterministic: 2 hosts = 1 host" "$WORK/one" "$WORK/two"
if out=$(python3 "$CT_SOURCE_DIR/tests/e2e/trace_check.py" "$WORK/two/trace.json" --steps 5-7 --world 2) &&
   grep -q '"hosts": \["h0", "h1"\]' "$WORK/two/trace.json"; then
  pass "trace across 2 hosts: $out"
else
  fail "trace across 2 hosts: ${out:-}"; grep -o '"otherData".*' "$WORK/two/trace.json"
fi

net_loss h0 1
net_loss h1 1
run_on h0:1,h1:1 2 "$WORK/lossy" || true
net_loss h0 0
net_loss h1 0
same "deterministic: 2 hosts with 1 % loss = 1 host" "$WORK/one" "$WORK/lossy"

# Two ranks a host across hosts: Open MPI only. MPICH 4.0.2 over UCX's TCP
# sometimes hangs in MPI_Finalize with several ranks a host (1 run in 3 of a
# program that only gathers, broadcasts and finalizes, at 2 x 2; none in 8
# at 2 x 1): a fault of that MPICH/UCX, not of this code. At 2 x 1 too, more
# rarely: stop 39's CI hung in the lossy run above (1 run in about 30 here at
# 5 % loss: one rank in ucp_worker_progress, the other in the PMI barrier);
# since then ctrain-dist ends a rank still in MPI_Finalize 60 s after its
# work is done and saved (src/cli/main.c), with its status, so such a run
# passes here, 60 s late.
if [ "$CT_MPI" != mpich ]; then
  run_on h0:2,h1:2 4 "$WORK/four" || true
  same "deterministic: 2 hosts x 2 ranks = 1 host" "$WORK/one" "$WORK/four"
fi
finish
