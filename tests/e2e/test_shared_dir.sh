#!/bin/bash
# A directory that not every rank sees, on one host (the multi-host version
# is tests/net/test_shared_dir.sh):
#
# 1. data.bin of a checkpoint that one rank cannot open (CT_FAILPOINT=open:R
#    hides the checkpoint's temporary directory from rank R, as on a host
#    that does not share the run directory; under Open MPI every rank used to
#    block inside MPI_File_open until the watchdog ended the job): every rank
#    exits 1 with rank R's message naming data.bin and its host; nothing
#    already saved is lost (latest, the last checkpoint and its digest are
#    unchanged, no temporary directory is left) and --resume auto then
#    continues from it.
# 2. --run-dir in a directory private to each rank (each rank in a mount and
#    UTS namespace of its own, hostname h<rank>, a directory of its own bound
#    at the same path): refused at start within 10 s on every rank, naming
#    h1, nothing left in either rank's directory. Skipped (this case only)
#    where unshare cannot make the namespaces (not root).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

small=(--config "$CONFIG" --set dist.threads=1 --set checkpoint.every_steps=2)

# 1. One rank cannot open data.bin.
for np in $(nps 2 4); do
  run=$WORK/open$np victim=$((np - 1))
  if ! run_np "$np" "$WORK/o$np-a" "${small[@]}" --run-dir "$run" --set train.max_steps=4; then
    fail "np=$np: the first 4 steps"; cat "$WORK/o$np-a.log"; continue
  fi
  sum4=$(cat "$run/ckpt-4/manifest.sha256")
  CT_FAILPOINT=open:$victim run_np "$np" "$WORK/o$np-b" "${small[@]}" --run-dir "$run" \
    --set train.max_steps=8 --resume auto || true
  if every_rank_exited "$np" "$WORK/o$np-b" 1; then
    pass "np=$np, rank $victim cannot open data.bin: every rank exited 1"
  else
    fail "np=$np, rank $victim cannot open data.bin: exit statuses"; cat "$WORK/o$np-b.log"
  fi
  if grep -q "error: checkpoint at step 6: rank $victim: $run/ckpt-6.tmp-[^ ]*/data.bin: rank $victim on host [^ ]* cannot open the file rank 0 created: No such file or directory" "$WORK/o$np-b.log"; then
    pass "np=$np: the message names rank $victim, its host and data.bin"
  else
    fail "np=$np: message"; cat "$WORK/o$np-b.log"
  fi
  if [ "$(cat "$run/latest")" = ckpt-4 ] && [ "$(cat "$run/ckpt-4/manifest.sha256")" = "$sum4" ] &&
     [ -z "$(find "$run" -maxdepth 1 -name 'ckpt-6*')" ] &&
     "$CT_BINARY" inspect "$run/ckpt-4" >"$WORK/o$np-i.log" 2>&1; then
    pass "np=$np: nothing lost (latest, ckpt-4 and its digest unchanged and verified, no ckpt-6*)"
  else
    fail "np=$np: after the failed checkpoint"; ls -la "$run"; cat "$WORK/o$np-i.log"
  fi
  if run_np "$np" "$WORK/o$np-c" "${small[@]}" --run-dir "$run" --set train.max_steps=8 --resume auto &&
     grep -q "resumed from $run/ckpt-4" "$WORK/o$np-c.log" && [ "$(cat "$run/latest")" = ckpt-8 ]; then
    pass "np=$np: --resume auto continues from ckpt-4 to ckpt-8"
  else
    fail "np=$np: resume after the failed checkpoint"; cat "$WORK/o$np-c.log"
  fi
done

# 2. A run directory private to each rank.
PRIV=$WORK/private
mkdir -p "$PRIV" "$WORK/host0" "$WORK/host1"
if ! unshare --mount --uts --propagation private sh -c "mount --bind '$WORK/host0' '$PRIV' && hostname h0" 2>/dev/null; then
  echo "note: unshare cannot make mount and UTS namespaces here: case 2 not run"
  finish
  exit
fi
cat >"$WORK/private.sh" <<EOF
#!/bin/sh
# One rank in namespaces of its own: hostname h<rank>, $WORK/host<rank> at $PRIV.
r=\${OMPI_COMM_WORLD_RANK:-\$PMI_RANK}
exec unshare --mount --uts --propagation private sh -c 'mount --bind "\$0" "\$1" && hostname "\$2" && shift 3 && exec "\$@"' \\
  "$WORK/host\$r" "$PRIV" "h\$r" x "\$@"
EOF
chmod +x "$WORK/private.sh"
# run_np starts CT_BINARY: the wrapper, with the real binary as its first argument.
t0=$(date +%s.%N)
CT_BINARY="$WORK/private.sh" run_np 2 "$WORK/p" "$CT_BINARY" "${small[@]}" --run-dir "$PRIV/x/run" || true
t1=$(date +%s.%N)
secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
if every_rank_exited 2 "$WORK/p" 1 &&
   grep -q "error: run directory $PRIV/x/run is not shared between the hosts of this job: host h1 (rank 1: No such file or directory) does not see the file .ct-shared-probe.tmp-[0-9]*-[0-9a-f]* that rank 0 wrote there on host h0" "$WORK/p.log" &&
   ge 10 "$secs"; then
  pass "private run dir per rank: refused on every rank in $secs s, naming h1"
else
  fail "private run dir per rank ($secs s)"; cat "$WORK/p.log"
fi
if [ -z "$(find "$WORK/host0" "$WORK/host1" -mindepth 1)" ]; then
  pass "private run dir per rank: nothing left in either rank's directory"
else
  fail "private run dir per rank: left behind"; find "$WORK/host0" "$WORK/host1" -mindepth 1
fi

finish
