#!/usr/bin/env bash
# Placement through the real launcher: launch/ctrain-run starts the ranks with
# the flags this machine needs, ctrain-dist pins them and reports a binding
# table (stdout and <run dir>/placement.txt), and oversubscription is
# reported; dist.placement=none leaves the ranks unbound.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
run=$CT_SOURCE_DIR/launch/ctrain-run
export CT_BINARY

for np in 1 2 4; do
  dir=$WORK/pl$np
  if timeout 300 "$run" -np $np "$CONFIG" --run-dir "$dir" --set train.max_steps=5 > "$WORK/pl$np.log" 2>&1; then
    rows=$(grep -cE '^ +[0-9]+ ' "$dir/placement.txt" || true)
    if grep -q "placement auto: $np rank" "$WORK/pl$np.log" && [ "$rows" = "$np" ]; then
      pass "ctrain-run -np $np: binding table with $rows rows"
    else
      fail "ctrain-run -np $np: table missing or wrong ($rows rows)"; cat "$WORK/pl$np.log"
    fi
  else
    fail "ctrain-run -np $np failed"; cat "$WORK/pl$np.log"
  fi
done
cores=$(nproc)
if [ "$cores" -lt 4 ]; then
  if grep -q "oversubscribed" "$WORK/pl4.log"; then pass "4 ranks on $cores cores: oversubscription reported"
  else fail "4 ranks on $cores cores: no oversubscription warning"; cat "$WORK/pl4.log"; fi
fi
dir=$WORK/none
if timeout 300 "$run" -np 2 "$CONFIG" --run-dir "$dir" --set train.max_steps=5 --set dist.placement=none > "$WORK/none.log" 2>&1 &&
   grep -q "placement none" "$dir/placement.txt"; then
  pass "dist.placement=none"
else
  fail "dist.placement=none"; cat "$WORK/none.log"
fi
finish
