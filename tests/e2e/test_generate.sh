#!/usr/bin/env bash
# ctrain-dist generate on a tiny gpt trained here (depth 1, width 32, block
# 16, 30 steps on this repository's README as byte tokens):
# - the prompt, then -n tokens: the same seed gives the same bytes, at 1 rank
#   and under mpirun with 2 (rank 0 generates), another seed other bytes;
# - -n 0 prints the prompt alone; --temperature 0 is the same for any seed;
# - the output is valid UTF-8 whatever the model emits;
# - bad input: a checkpoint that holds no gpt, -n -1, --temperature x,
#   --top-k -2, --temperature -0.5, --seed x, no checkpoint, a prompt for a
#   vocabulary other than bytes (which prints token ids without one).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

head -c 20000 "$CT_SOURCE_DIR/README.md" | token_shard "$WORK/train.bin"
tail -c 3000 "$CT_SOURCE_DIR/README.md" | token_shard "$WORK/val.bin"
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
timeout 120 "$CT_MPIEXEC" "${CT_MPIEXEC_ARGS[@]}" -np 2 "$CT_BINARY" generate --checkpoint "$ck" \
  --prompt "The " -n 200 --seed 7 >"$WORK/mpi" 2>"$WORK/mpi.err" || true
cmp -s "$WORK/a" "$WORK/mpi" && pass "under mpirun -np 2: rank 0 alone prints the same text" ||
  { fail "generate under mpirun"; cat "$WORK/mpi.err"; head -c 300 "$WORK/mpi"; }
python3 -c 'import sys; open(sys.argv[1], "rb").read().decode("utf-8")' "$WORK/c" &&
  pass "the output is valid UTF-8" || fail "the output is not valid UTF-8"
# A prompt longer than the context (block 16): its last 16 bytes are the context.
long="Call me Ishmael. Some years ago, never mind how long precisely"
gen --prompt "$long" -n 30 --seed 5 >"$WORK/long" && [ "$(head -c ${#long} "$WORK/long")" = "$long" ] &&
  [ "$(wc -c <"$WORK/long")" -ge $((${#long} + 30)) ] && pass "a prompt longer than model.block" ||
  fail "long prompt: '$(cat "$WORK/long")'"
# Exactly the prompt's bytes: no newline is added.
gen --prompt "abc" -n 0 >"$WORK/n0" && printf 'abc' | cmp -s - "$WORK/n0" && pass "-n 0 prints the prompt alone" ||
  fail "-n 0: '$(cat "$WORK/n0")'"
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
bad 2 "--temperature '-0.5': expected a number" --checkpoint "$ck" --temperature -0.5
bad 2 "--seed 'x': expected a whole number" --checkpoint "$ck" --seed x
bad 2 "generate needs a checkpoint"
bad 1 "$WORK/nothere" --checkpoint "$WORK/nothere"
run_np 1 "$WORK/mlp" --config "$CONFIG" --run-dir "$WORK/mlp" --set train.max_steps=2 ||
  { fail "mlp run"; cat "$WORK/mlp.log"; }
mlp_ck=$WORK/mlp/$(cat "$WORK/mlp/latest")
bad 2 "generate needs a language model; $mlp_ck holds a mlp" --checkpoint "$mlp_ck"

# A vocabulary larger than bytes (data.vocab = 300 over the same byte shards):
# a text prompt is refused; without one, the tokens print as ids.
run=$WORK/v300
if run_np 1 "$WORK/v300" --config "$CT_SOURCE_DIR/configs/moby-gpt.ini" --set data.dir="$WORK" \
     --set model.depth=1 --set model.width=32 --set model.heads=2 --set model.block=16 --set data.vocab=300 \
     --set train.global_batch=16 --set train.max_steps=2 --set train.eval_every=1000 --run-dir "$run"; then
  ck=$run/$(cat "$run/latest")
  bad 2 "has a vocabulary of 300 tokens" --checkpoint "$ck" --prompt "The "
  if gen -n 20 --seed 3 >"$WORK/ids" 2>"$WORK/ids.err" && grep -Eq '^([0-9]+ ){20}$' "$WORK/ids" &&
     awk '{ for (i = 1; i <= NF; i++) if ($i >= 300) exit 1 }' "$WORK/ids"; then
    pass "vocabulary 300 without a prompt: 20 token ids below 300"
  else
    fail "vocabulary 300 ids"; cat "$WORK/ids" "$WORK/ids.err"
  fi
else
  fail "training the vocabulary-300 gpt"; cat "$WORK/v300.log"
fi
finish
