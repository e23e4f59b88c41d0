#!/usr/bin/env bash
# Checkpoint retention (checkpoint.keep_last, keep_every) when things go wrong:
# - rank 0 killed (SIGKILL) inside retention, in the middle of deleting a
#   checkpoint (failpoint "retain": its manifest gone, its data not yet) and
#   with a second deletion still to come: the newest committed checkpoint
#   and every anchor (a multiple of keep_every) survive and verify, `latest`
#   names the newest, the next run finishes the half-deleted one off;
# - directories that only look like ours are never deleted nor emptied: a
#   ckpt-<step> without manifest holding a user's file, ckpt-008 (a second
#   spelling of step 8), a symlink ckpt-<step> to a real checkpoint elsewhere,
#   a ckpt-<step>.tmp-* holding a user's file;
# - a retention that fails (injected EIO) is a warning, the run goes on.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

run=$WORK/run
small=(--config "$CONFIG" --run-dir "$run" --set model.hidden=32 --set log.every_steps=0
       --set checkpoint.every_epochs=0 --set checkpoint.every_steps=1 --set checkpoint.keep_last=2
       --set checkpoint.keep_every=4 --set train.eval_batch=auto)
# The ckpt-* entries of the run directory, in one line.
# The ckpt-* entries of the run directory in one line: the foreign ones
# (FOREIGN), then ours by step.
ckpts() {
  local f=" $FOREIGN "
  echo $(for c in $FOREIGN; do [ -e "$run/$c" ] || [ -L "$run/$c" ] && echo "$c"; done) \
       $(cd "$run" && ls -d ckpt-* 2> /dev/null | while read -r c; do
    [[ "$f" == *" $c "* ]] || echo "$c"; done | sort -t- -k2 -n)
}
# verified CKPT...: each is a checkpoint that inspects clean and passes sha256sum -c.
verified() {
  local c
  for c in "$@"; do
    "$CT_BINARY" inspect "$run/$c" > "$WORK/inspect.log" 2>&1 && (cd "$run/$c" && sha256sum -c --quiet manifest.sha256) ||
      { echo "  $c does not verify"; cat "$WORK/inspect.log" | tail -3; return 1; }
  done
}
# The foreign entries, with their contents: must come out unchanged.
FOREIGN="ckpt-0 ckpt-1 ckpt-008 ckpt-5.tmp-mine"
foreign() { (cd "$run" && ls -ld --time-style=+%s $FOREIGN | awk '{print $1, $NF}' &&
             find $FOREIGN/ "$WORK/elsewhere" -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum); }
# killed_in_retention OUT ARGS...: rank 0 SIGKILLed at failpoint "retain".
killed_in_retention() {
  local out=$1
  shift
  # Plain mpirun: when rank 0 dies it ends the job (its peers would otherwise
  # wait in the agreement after retention).
  if CT_FAILPOINT=retain:0 timeout 120 "$CT_MPIEXEC" "${CT_MPIEXEC_ARGS[@]}" -np 2 \
       "$CT_BINARY" "$@" > "$out.log" 2>&1; then
    echo "  the run meant to be killed in retention succeeded"; return 1
  fi
  grep -q "killed\|signal 9\|exited on signal" "$out.log" || { echo "  not killed by the failpoint:"; tail -5 "$out.log"; return 1; }
}

if ! run_np 2 "$WORK/r1" "${small[@]}" --set train.max_steps=3; then
  fail "first run"; cat "$WORK/r1.log"
fi
# Not ours, each in its own way (made after the first run: a new run moves
# a directory's earlier ckpt-* away to previous-*/). Before the fix, retention
# deleted every one of them, and ckpt-008 made it delete ckpt-8, an anchor.
mkdir "$run/ckpt-1" "$run/ckpt-008" "$run/ckpt-5.tmp-mine" "$WORK/elsewhere"
echo "results" > "$run/ckpt-1/notes.txt"          # no manifest and a user's file: not a half-deleted ckpt
echo "my notes" > "$run/ckpt-008/data.bin"        # our file name, in a second spelling of step 8
echo "mine" > "$run/ckpt-5.tmp-mine/notes.txt"    # a temporary name holding a user's file
cp -a "$run/ckpt-2/." "$WORK/elsewhere/"          # a real checkpoint, elsewhere, ...
ln -s "$WORK/elsewhere" "$run/ckpt-0"             # ... behind a symlink of a step retention would drop
foreign_before=$(foreign)

# Steps 4..11 with keep_last 2, keep_every 4; rank 0 is killed in the
# retention after ckpt-11 is committed, mid-way through deleting ckpt-9.
if run_np 2 "$WORK/r2" "${small[@]}" --set train.max_steps=10 --resume auto &&
   [ "$(ckpts)" = "$FOREIGN ckpt-4 ckpt-8 ckpt-9 ckpt-10" ] && [ "$(foreign)" = "$foreign_before" ]; then
  pass "keep_last 2 + keep_every 4 over steps 1-10: $(ckpts) ($FOREIGN are not ours: untouched)"
else
  fail "retention to step 10: $(ckpts)"; grep -v '^epoch [0-9]' "$WORK/r2.log" | tail
fi
if grep -q "checkpoint retention leaves $run/ckpt-1 alone: .*holds 'notes.txt'" "$WORK/r2.log" &&
   grep -q "checkpoint retention leaves $run/ckpt-0 alone: .*a symbolic link" "$WORK/r2.log" &&
   grep -q "leaving $run/ckpt-5.tmp-mine in place: .*holds 'notes.txt'" "$WORK/r2.log"; then
  pass "each foreign directory is named in a warning: $(grep -m1 -o 'checkpoint retention leaves .*' "$WORK/r2.log" | sed "s|$WORK|WORK|g")"
  inventory environment "a ckpt-<step> directory that is not ours (no manifest, a user's file)" 2 0 "$WORK/r2.log"
else
  fail "foreign directories not reported"; grep -i warn "$WORK/r2.log" | head
fi

if killed_in_retention "$WORK/k1" "${small[@]}" --set train.max_steps=11 --resume auto; then
  if [ "$(cat "$run/latest")" = ckpt-11 ] && verified ckpt-11 ckpt-10 ckpt-8 ckpt-4 &&
     [ -f "$run/ckpt-9/data.bin" ] && [ ! -e "$run/ckpt-9/manifest.pb" ] && [ "$(foreign)" = "$foreign_before" ]; then
    pass "SIGKILL in retention deleting ckpt-9: latest ckpt-11, ckpt-11/10 and anchors 8, 4 verify, ckpt-9 half-deleted, foreign entries untouched"
  else
    fail "state after SIGKILL in retention: $(ckpts), latest $(cat "$run/latest")"; ls -la "$run/ckpt-9"
  fi
else
  fail "SIGKILL in retention"
fi
# The next run resumes from ckpt-11 and finishes ckpt-9 off.
if run_np 2 "$WORK/r3" "${small[@]}" --set train.max_steps=12 --resume auto &&
   grep -q "resumed from .*ckpt-11" "$WORK/r3.log" &&
   [ "$(ckpts)" = "$FOREIGN ckpt-4 ckpt-8 ckpt-11 ckpt-12" ] &&
   verified ckpt-12 ckpt-11 ckpt-8 ckpt-4 && [ "$(foreign)" = "$foreign_before" ]; then
  pass "resumed from ckpt-11; retention finished ckpt-9 off: $(ckpts)"
else
  fail "resume after SIGKILL in retention: $(ckpts)"; grep -v '^epoch [0-9]' "$WORK/r3.log" | tail
fi

# On to step 14 (ckpt-12 is an anchor): ckpt-14 13 12 8 4. Then keep_last 1
# at step 15: two deletions due (ckpt-14, then ckpt-13); killed in the first,
# the second never starts.
run_np 2 "$WORK/r5" "${small[@]}" --set train.max_steps=14 --resume auto || { fail "run to step 14"; cat "$WORK/r5.log"; }
if killed_in_retention "$WORK/k2" "${small[@]}" --set train.max_steps=15 --set checkpoint.keep_last=1 --resume auto; then
  if [ "$(cat "$run/latest")" = ckpt-15 ] && verified ckpt-15 ckpt-13 ckpt-12 ckpt-8 ckpt-4 &&
     [ ! -e "$run/ckpt-14/manifest.pb" ] && [ "$(foreign)" = "$foreign_before" ]; then
    pass "SIGKILL between two deletions: ckpt-15 (newest), ckpt-13 (not reached), anchors 12, 8, 4 verify; ckpt-14 half-deleted"
  else
    fail "state after SIGKILL between two deletions: $(ckpts)"
  fi
else
  fail "SIGKILL between two deletions"
fi

# A failing retention (EIO injected mid-deletion) is a warning; the run ends 0.
if CT_FAILPOINT=retain:0:eio run_np 2 "$WORK/r4" "${small[@]}" --set train.max_steps=16 --set checkpoint.keep_last=1 --resume auto &&
   grep -q "warning: checkpoint retention in $run: .*ckpt-15/manifest.pb: unlink failed: Input/output error" "$WORK/r4.log" &&
   [ "$(cat "$run/latest")" = ckpt-16 ] && verified ckpt-16 ckpt-12 ckpt-8 ckpt-4 && [ "$(foreign)" = "$foreign_before" ]; then
  pass "retention failing with EIO: a warning, the run ends 0: $(grep -m1 -o 'warning: checkpoint retention in.*' "$WORK/r4.log" | sed "s|$WORK|WORK|g" | cut -c1-140)"
  inventory environment "checkpoint retention fails (CT_FAILPOINT=retain:0:eio)" 2 0 "$WORK/r4.log"
else
  fail "failing retention: $(ckpts)"; grep -v '^epoch [0-9]' "$WORK/r4.log" | tail
fi
finish
