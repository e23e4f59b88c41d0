#!/usr/bin/env bash
# The checkpoint commit protocol's durability order, seen in the system calls
# (strace -f, one trace per rank, fds shown with their paths by -y) of a real
# 2-rank run that writes two checkpoints: on every rank data.bin is written
# and fsynced before rank 0 begins the manifest; rank 0 then fsyncs the
# manifest files and the temporary directory, renames it, fsyncs the run
# directory, replaces `latest` by a rename of a synced latest.tmp and fsyncs
# the run directory again (tests/e2e/strace_order.py checks it). The checker
# is shown to fail on the same traces with one fsync taken out.
# Exit 77 (skipped) without strace, or where ptrace is not allowed.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
command -v strace > /dev/null || skip "strace is not installed (launch/packages.txt lists it)"
strace -qq -o /dev/null true 2> "$WORK/strace.err" || skip "strace cannot trace here: $(cat "$WORK/strace.err")"
CHECK=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/strace_order.py

run=$WORK/run
calls=openat,open,write,pwrite64,pwritev,pwritev2,writev,fsync,fdatasync,rename,renameat,renameat2
# LeakSanitizer cannot stop the world of a process that strace already
# traces: its leak check stays off here even where ASAN_OPTIONS turns it on.
if ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0 timeout 300 "$CT_MPIEXEC" "${CT_MPIEXEC_ARGS[@]}" -np 2 bash -c \
     'exec strace -f -qq -y -ttt -T -e trace='"$calls"' -o "'"$WORK"'/trace.${OMPI_COMM_WORLD_RANK:-$PMI_RANK}" "$0" "$@"' \
     "$CT_BINARY" --config "$CONFIG" --run-dir "$run" --set model.hidden=32 --set log.every_steps=0 \
     --set checkpoint.every_epochs=0 --set checkpoint.every_steps=2 --set train.max_steps=4 \
     --set train.eval_batch=auto > "$WORK/run.log" 2>&1; then
  if python3 "$CHECK" "$run" "$WORK/trace.0" "$WORK/trace.1" > "$WORK/check.log" 2>&1 &&
     [ "$(grep -c ': ok: ' "$WORK/check.log")" = 2 ]; then
    pass "durability order of ckpt-2 and ckpt-4 on 2 ranks: $(head -1 "$WORK/check.log" | sed "s|$WORK|WORK|g")"
  else
    fail "durability order"; cat "$WORK/check.log"
  fi
  # The checker can fail: without rank 0's first fsync of the run directory
  # (the one after the rename), or without rank 1's fsync of data.bin.
  awk -v run="$run" 'index($0, "rename(\"" run "/ckpt-2.tmp-") { armed = 1 }
       armed && index($0, "fsync(") && index($0, "<" run ">)") { armed = 0; next } { print }' \
    "$WORK/trace.0" > "$WORK/broken.0"
  grep -v 'fsync([0-9]*<[^>]*/data\.bin>' "$WORK/trace.1" > "$WORK/broken.1"
  if ! python3 "$CHECK" "$run" "$WORK/broken.0" "$WORK/trace.1" > "$WORK/b0.log" 2>&1 &&
     grep -q "ckpt-2: rank 0: no " "$WORK/b0.log" &&
     ! python3 "$CHECK" "$run" "$WORK/trace.0" "$WORK/broken.1" > "$WORK/b1.log" 2>&1 &&
     grep -q "rank 1: data.bin written but not fsynced" "$WORK/b1.log"; then
    pass "the checker fails on the traces with one fsync removed: $(head -1 "$WORK/b0.log"); $(head -1 "$WORK/b1.log")"
  else
    fail "the checker did not notice a missing fsync"; cat "$WORK/b0.log" "$WORK/b1.log"
  fi
else
  fail "traced run"; cat "$WORK/run.log"
fi
finish
