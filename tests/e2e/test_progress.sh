#!/usr/bin/env bash
# Progress output: without a terminal, plain lines every log.every_steps steps
# (on stdout, no carriage returns); on a terminal (a pty from script(1)) a bar
# redrawn in place on stderr, coloured unless NO_COLOR is set, when
# launch/ctrain-run sees the terminal (under mpirun the ranks cannot:
# CT_PROGRESS=bar is how it tells them); --quiet prints neither, nor the
# epoch lines, and trains the same weights; a bad CT_PROGRESS is refused.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
args=(--config "$CONFIG" --set train.max_steps=120 --set log.every_steps=50 --set checkpoint.every_epochs=0)

if run_np 2 "$WORK/plain" "${args[@]}" --run-dir "$WORK/r1" &&
   grep -Eq '^epoch 1/5 50/234  [0-9,]+ samples/s  mfu [0-9.]+  loss [0-9.]+  ETA [0-9:]+ epoch, [0-9:]+ run$' "$WORK/plain.log" &&
   grep -q '^epoch 1/5 100/234 ' "$WORK/plain.log" && ! grep -q $'\r' "$WORK/plain.log"; then
  pass "no terminal: a plain line every 50 steps"
else
  fail "plain progress lines"; cat "$WORK/plain.log"
fi

# tty RUN_DIR ENV...: the run on a pseudo-terminal; its output in $WORK/tty.out.
# The bar is redrawn every 0.1 s and at the epoch's last step: the run
# trains one whole epoch (its step count read from the plain lines), so at
# least one bar is drawn however fast the machine.
per_epoch=$(sed -n 's|^epoch 1/5 [0-9]*/\([0-9]*\) .*|\1|p' "$WORK/plain.log" | head -1)
tty_run() {
  local dir=$1
  shift
  rm -f "$WORK/tty.out"
  env "$@" CT_BINARY="$CT_BINARY" timeout 300 script -qec \
    "$CT_SOURCE_DIR/launch/ctrain-run -np 2 ${args[*]:1} --set train.max_steps=${per_epoch:-234} --run-dir $dir" \
    "$WORK/tty.out" >/dev/null 2>&1
}
if tty_run "$WORK/r2" TERM=xterm && grep -q $'\r\033\[K' "$WORK/tty.out" &&
   grep -q $'epoch 1/5 \[\033\[32m#' "$WORK/tty.out"; then
  pass "terminal: a coloured bar redrawn in place ($(grep -o $'\r\033\[K' "$WORK/tty.out" | wc -l) redraws)"
else
  fail "terminal progress bar"; cat -v "$WORK/tty.out" | head -20
fi
if tty_run "$WORK/r3" TERM=xterm NO_COLOR=1 && grep -q $'epoch 1/5 \[#' "$WORK/tty.out" &&
   ! grep -q $'\033\[32m' "$WORK/tty.out"; then
  pass "terminal with NO_COLOR: the bar without colour codes"
else
  fail "NO_COLOR"; cat -v "$WORK/tty.out" | head -20
fi

if run_np 2 "$WORK/quiet" "${args[@]}" --run-dir "$WORK/r4" -q && ! grep -q '^epoch' "$WORK/quiet.log" &&
   [ "$(metric "$WORK/r4/metrics.jsonl" -1 param_sha256)" = "$(metric "$WORK/r1/metrics.jsonl" -1 param_sha256)" ]; then
  pass "--quiet: no progress and no epoch lines, the same weights"
else
  fail "--quiet"; cat "$WORK/quiet.log"
fi
CT_PROGRESS=bars run_np 2 "$WORK/badmode" "${args[@]}" --run-dir "$WORK/r5" || true
inventory environment "CT_PROGRESS=bars" 2 "$(cat "$WORK/badmode.rc.0")" "$WORK/badmode.log"
if every_rank_exited 2 "$WORK/badmode" 2 && grep -q "CT_PROGRESS: unknown value 'bars' (expected auto, bar, lines or off)" "$WORK/badmode.log"; then
  pass "CT_PROGRESS=bars: a usage error on every rank"
else
  fail "bad CT_PROGRESS"; cat "$WORK/badmode.log"
fi
finish
