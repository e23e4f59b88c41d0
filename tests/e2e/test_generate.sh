#!/usr/bin/env bash
# ctrain-dist generate on a tiny gpt trained here (depth 1, width 32, block
# 16, 30 steps on this repository's README as byte tokens):
# - the prompt, then -n tokens: the same seed gives the same bytes, at 1 rank
#   and under mpirun with 2 (rank 0 generates), another seed other bytes;
# - -n 0 prints the prompt alone; --temperature 0 is the same for any seed;
# - the output is valid UTF-8 whatever the model emits;
# - bad input: a checkpoint that holds no gpt, -n -1, --temperature x,
#   --top-k -2, no checkpoint, a prompt for a vocabulary other than bytes.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

shard() {
  python3 -c '
import struct, sys
data = sys.stdin.buffer.read()
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<256i", 20240520, 1, len(data), *([0] * 253)))
    f.write(struct.pack("<%dH" % len(data), *data))' "$1"
}
head -c 20000 "$CT_SOURCE_DIR/README.md" | shard "$WORK/train.bin"
tail -c 3000 "$CT_SOURCE_DIR/README.md" | shard "$WORK/val.bin"
run=$WORK/run
if ! run_np 2 "$WORK/train" --config "$CT_SOURCE_DIR/configs/moby-gpt.ini" --set data.dir="$WORK" \
     --set model.depth=1 --set model.width=32 --set model.heads=2 --set model.block=16 \
     --set train.global_batch=16 --set train.max_steps=30 --set train.eval_every=1000 --run-dir "$run"; then
  fail "training the tiny gpt"; cat "$WORK/train.log"; finish
fi
ck=$run/$(cat "$run/latest")
gen() { "$CT_BINARY" generate --checkpoint "$ck" "$@"; }

gen --prompt "The " -n 200 --seed 7 >"$WORK/a" 2>"$WORK/a.err" && gen --prompt "The " -n 200 --seed 7 >"$WORK/b" &&
  gen --prompt "The " -n 200 --seed 8 >"$WORK/c" || { fail "generate failed"; cat "$WORK/a.err"; }
if cmp -s "$WORK/a" "$WORK/b" && ! cmp -s "$WORK/a" "$WORK/c" && [ "$(head -c 4 "$WORK/a")" = "The " ]; then
  pass "the same seed, the same text; another seed, another ($(wc -c <"$WORK/a") bytes, prompt first)"
else
  fail "seeded generation"; head -c 300 "$WORK/a" "$WORK/b" "$WORK/c"
fi
timeout 120 "$CT_MPIEXEC" --oversubscribe --bind-to none -np 2 "$CT_BINARY" generate --checkpoint "$ck" \
  --prompt "The " -n 200 --seed 7 >"$WORK/mpi" 2>"$WORK/mpi.err" || true
cmp -s "$WORK/a" "$WORK/mpi" && pass "under mpirun -np 2: rank 0 alone prints the same text" ||
  { fail "generate under mpirun"; cat "$WORK/mpi.err"; head -c 300 "$WORK/mpi"; }
python3 -c 'import sys; open(sys.argv[1], "rb").read().decode("utf-8")' "$WORK/c" &&
  pass "the output is valid UTF-8" || fail "the output is not valid UTF-8"
[ "$(gen --prompt "abc" -n 0)" = "abc" ] && pass "-n 0 prints the prompt alone" || fail "-n 0: '$(gen --prompt abc -n 0)'"
[ "$(gen -n 50 --temperature 0 --seed 1)" = "$(gen -n 50 --temperature 0 --seed 2)" ] &&
  pass "--temperature 0: the likeliest token, whatever the seed" || fail "greedy decoding depends on the seed"

# Bad input: status and the message naming what is wrong.
bad() { # WANT_STATUS MESSAGE ARGS...
  local want=$1 msg=$2 rc=0
  shift 2
  "$CT_BINARY" generate "$@" >"$WORK/bad.out" 2>"$WORK/bad.err" || rc=$?
  if [ "$rc" = "$want" ] && grep -q -- "$msg" "$WORK/bad.err"; then
    pass "generate $*: exit $rc, '$msg'"
  else
    fail "generate $*: exit $rc (want $want)"; cat "$WORK/bad.err"
  fi
}
bad 2 "-n '-1': expected a whole number" --checkpoint "$ck" -n -1
bad 2 "--temperature 'x': expected a number" --checkpoint "$ck" --temperature x
bad 2 "--top-k '-2'" --checkpoint "$ck" --top-k -2
bad 2 "generate needs a checkpoint"
bad 1 "$WORK/nothere" --checkpoint "$WORK/nothere"
run_np 1 "$WORK/mlp" --config "$CONFIG" --run-dir "$WORK/mlp" --set train.max_steps=2 ||
  { fail "mlp run"; cat "$WORK/mlp.log"; }
bad 2 "generate needs a language model; the checkpoint holds a mlp" --checkpoint "$WORK/mlp/$(cat "$WORK/mlp/latest")"
finish
