#!/usr/bin/env bash
# Disk faults for real, not by failpoint alone: the run directory lies on a
# small tmpfs this test mounts, in a mount namespace of its own (unshare -m)
# so that nothing stays mounted whatever happens.
# - the disk fills up during a checkpoint: every rank exits 1 naming data.bin
#   and "No space left on device"; `latest` and the previous checkpoint are
#   untouched (inspect, sha256sum -c, and every file's digest as before);
#   once space is freed, --resume auto continues from it and ends bit-identical
#   to a run that never failed;
# - ENOSPC on one rank only, and an fsync (MPI_File_sync / fsync) that fails,
#   injected (CT_FAILPOINT=PHASE:RANK:ERRNO, src/ckpt/ckpt.h): fatal for that
#   checkpoint on every rank, nothing published, nothing lost;
# - a read-only run directory (the tmpfs remounted ro): resuming in it and
#   starting a run in it fail on every rank naming the file and the error;
# - steps.jsonl and metrics.jsonl on a full disk: the error names the file.
# Exit 77 (skipped) only when no tmpfs can be mounted, even in a namespace.

# A private mount namespace first (root), or a user namespace that maps us to
# root (unprivileged); the re-executed script then mounts in there.
if [ -z "${CT_FAULTS_NS:-}" ] && command -v unshare > /dev/null; then
  for how in "-m --propagation private" "-r -m --propagation private"; do
    # shellcheck disable=SC2086
    if unshare $how true 2> /dev/null; then
      CT_FAULTS_NS=$how exec unshare $how bash "$0" "$@"
    fi
  done
fi
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
MNT=$WORK/mnt
mkdir -p "$MNT"
trap 'umount "$MNT" 2> /dev/null; rm -rf "$WORK"' EXIT
if ! mount -t tmpfs -o size=2m ct-disk-faults "$MNT" 2> "$WORK/mount.err"; then
  skip "cannot mount a tmpfs (namespace: ${CT_FAULTS_NS:-none}): $(cat "$WORK/mount.err")"
fi

# A small mlp (51k parameters: data.bin ~400 KiB, so the 2 MiB disk holds a
# few checkpoints), a progress line per step, checkpoints only at the end.
small=(--config "$CONFIG" --set model.hidden=64 --set log.every_steps=1
       --set checkpoint.every_epochs=0 --set train.eval_batch=auto)
# Every file of the checkpoints and `latest`, with its digest.
snapshot() { (cd "$1" && find latest ckpt-* -type f 2> /dev/null | LC_ALL=C sort | xargs -r sha256sum); }
# fill_leaving PAGES: a filler file takes all the free space but PAGES blocks.
fill_leaving() {
  rm -f "$MNT/filler"
  local avail bs
  avail=$(stat -f -c %a "$MNT")
  bs=$(stat -f -c %S "$MNT")
  fallocate -l $(((avail - $1) * bs)) "$MNT/filler"
}
# intact RUN CKPT: `latest` names CKPT, which inspects clean and passes sha256sum -c.
intact() {
  [ "$(cat "$1/latest")" = "$2" ] && "$CT_BINARY" inspect "$1/$2" > "$WORK/inspect.log" 2>&1 &&
    (cd "$1/$2" && sha256sum -c --quiet manifest.sha256)
}
# refused NP OUT WHAT PATTERN: every rank exited 1, the output matches PATTERN.
refused() {
  local np=$1 out=$2 what=$3 pat=$4
  inventory environment "$what" "$np" "$(cat "$out.rc.0" 2> /dev/null)" "$out.log"
  every_rank_exited "$np" "$out" 1 && grep -Eq -- "$pat" "$out.log" ||
    { echo "  no /$pat/ or wrong status:"; grep -v '^epoch [0-9]' "$out.log" | tail -n 15; return 1; }
  ! grep -Eq "Segmentation|AddressSanitizer|runtime error|MPI_ABORT|MPI_Abort" "$out.log"
}

run=$MNT/run
# The reference: 10 steps on an ordinary disk.
run_np 2 "$WORK/ref" "${small[@]}" --run-dir "$WORK/ref" --set train.max_steps=10 ||
  { fail "reference run"; cat "$WORK/ref.log"; }

# 1. The disk fills up while every rank writes data.bin.
if run_np 2 "$WORK/a1" "${small[@]}" --run-dir "$run" --set train.max_steps=5; then
  before=$(snapshot "$run")
  fill_leaving 50 # 200 KiB: the logs fit, a 400 KiB data.bin does not
  t0=$(date +%s.%N)
  run_np 2 "$WORK/a2" "${small[@]}" --run-dir "$run" --set train.max_steps=10 --resume auto || true
  t1=$(date +%s.%N)
  if refused 2 "$WORK/a2" "disk full during a checkpoint (tmpfs)" \
       "ckpt-10\.tmp-[^ ]*/data\.bin: write failed at offset [0-9]+: No space left on device" &&
     intact "$run" ckpt-5 && [ "$(snapshot "$run")" = "$before" ] && ! ls -d "$run"/ckpt-10* 2> /dev/null; then
    pass "disk full at step 10: both ranks exit 1 in $(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.1f", b-a}') s: $(grep -m1 -o 'rank [0-9]: [^ ]*data.bin: .*' "$WORK/a2.log" | sed "s|$WORK|WORK|")"
  else
    fail "disk full during a checkpoint"; ls -la "$run"
  fi
  rm -f "$MNT/filler"
  if run_np 2 "$WORK/a3" "${small[@]}" --run-dir "$run" --set train.max_steps=10 --resume auto &&
     grep -q "resumed from .*ckpt-5" "$WORK/a3.log" && intact "$run" ckpt-10 &&
     [ "$(digest "$run")" = "$(digest "$WORK/ref")" ]; then
    pass "space freed: --resume auto continued from ckpt-5, final digest identical to the run that never failed"
  else
    fail "resume after freeing space"; grep -v '^epoch [0-9]' "$WORK/a3.log" | tail; echo "$(digest "$run") vs $(digest "$WORK/ref")"
  fi
else
  fail "first run on the tmpfs"; cat "$WORK/a1.log"
fi

# 2. ENOSPC on one rank only, and a failing fsync: injected (CT_FAILPOINT).
# Each run would write ckpt-12 and publishes nothing; ckpt-10 stays.
inject() { # inject NP FAILPOINT PATTERN WHAT
  local np=$1 fp=$2 pat=$3 what=$4 out=$WORK/fp$RANDOM before
  before=$(snapshot "$run")
  CT_FAILPOINT=$fp run_np "$np" "$out" "${small[@]}" --run-dir "$run" --set train.max_steps=12 --resume auto || true
  if refused "$np" "$out" "$what (CT_FAILPOINT=$fp)" "$pat" && intact "$run" ckpt-10 &&
     [ "$(snapshot "$run")" = "$before" ] && ! ls -d "$run"/ckpt-12* 2> /dev/null; then
    pass "$what, np=$np: every rank exits 1, ckpt-10 intact: $(grep -m1 -Eo -- "$pat.*" "$out.log" | cut -c1-120)"
  else
    fail "$what, np=$np ($fp)"; ls -la "$run"
  fi
}
if [ -f "$run/ckpt-10/manifest.pb" ]; then
  inject 2 data:1:enospc "rank 1: [^ ]*ckpt-12\.tmp-[^ ]*/data\.bin: write failed: No space left on device" "ENOSPC on rank 1 only"
  inject 2 sync:0:eio "rank 0: [^ ]*ckpt-12\.tmp-[^ ]*/data\.bin: MPI_File_sync failed: Input/output error" "MPI_File_sync fails on rank 0"
  inject 2 sync:1:eio "rank 1: [^ ]*/data\.bin: MPI_File_sync failed: Input/output error" "MPI_File_sync fails on rank 1"
  inject 1 sync:0:eio "[^ ]*ckpt-12\.tmp-[^ ]*/data\.bin: (MPI_File_sync|fsync) failed: Input/output error" "fsync fails"
else
  fail "no ckpt-10 to inject faults after"
fi

# 3. A read-only run directory: nothing can be written, nothing is lost.
if [ -f "$run/ckpt-10/manifest.pb" ] && mount -o remount,ro "$MNT"; then
  all_before=$(cd "$run" && find . -type f | LC_ALL=C sort | xargs sha256sum)
  run_np 2 "$WORK/ro1" "${small[@]}" --run-dir "$run" --set train.max_steps=12 --resume auto || true
  refused 2 "$WORK/ro1" "resume in a read-only run directory" "$run/[^ ]*: .*Read-only file system" &&
    [ "$(cd "$run" && find . -type f | LC_ALL=C sort | xargs sha256sum)" = "$all_before" ] &&
    pass "resume in a read-only run dir: every rank exits 1: $(grep -m1 -o "$run/[^ ]*: .*Read-only file system" "$WORK/ro1.log" | sed "s|$WORK|WORK|")" ||
    fail "resume in a read-only run directory"
  run_np 2 "$WORK/ro2" "${small[@]}" --run-dir "$MNT/fresh" --set train.max_steps=2 || true
  refused 2 "$WORK/ro2" "a new run in a read-only directory" "$MNT/fresh[^ ]*: .*Read-only file system" &&
    pass "new run in a read-only dir: every rank exits 1: $(grep -m1 -o "$MNT/fresh[^ ]*: .*Read-only file system" "$WORK/ro2.log" | sed "s|$WORK|WORK|")" ||
    fail "new run in a read-only directory"
  mount -o remount,rw "$MNT" || fail "remount rw"
else
  fail "cannot remount the tmpfs read-only"
fi

# 4. The logs on a full disk. A new run first writes the files that the
# earlier one left outside its logs and checkpoints (config.ini, run.json,
# heartbeat/rank-*, ...): leave exactly the blocks they took, so the first
# log line is the first write that finds no room.
if [ -f "$run/run.json" ]; then
  pages=$(cd "$run" && find . -path './ckpt-*' -prune -o -type f ! -name '*.jsonl' ! -name latest -printf '%b\n' |
          awk -v bs="$(stat -f -c %S "$MNT")" '{ n += int(($1 * 512 + bs - 1) / bs) } END { print n }')
  rm -rf "$run"
  for which in steps metrics; do
    every=1
    [ $which = metrics ] && every=0 # no progress lines: metrics.jsonl is the first log written
    rm -rf "$MNT/logs"
    fill_leaving "$pages"
    run_np 2 "$WORK/log-$which" "${small[@]}" --run-dir "$MNT/logs" --set train.max_steps=3 --set log.every_steps=$every || true
    refused 2 "$WORK/log-$which" "$which.jsonl on a full disk" "$MNT/logs/$which\.jsonl: write failed: No space left on device" &&
      pass "$which.jsonl on a full disk ($pages blocks left for the run's other files): every rank exits 1 naming it" ||
      fail "$which.jsonl write error not reported"
  done
  rm -f "$MNT/filler"
fi
finish
