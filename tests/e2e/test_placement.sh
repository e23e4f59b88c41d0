#!/usr/bin/env bash
# Placement through the real launcher: launch/ctrain-run starts the ranks with
# the flags this machine needs, ctrain-dist pins them and reports a binding
# table (stdout and <run dir>/placement.txt), and oversubscription is
# reported; dist.placement=none leaves the ranks unbound. Then the
# launcher's own binding (issue 33, item 5): mpirun -np 1 binds the rank to
# one core, so dist.threads = auto runs 1 thread and says why, and an
# explicit dist.threads = 2 is honoured with a warning.
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

# mpirun -np 1 without --bind-to none: Open MPI binds the rank to a core by
# default (np <= 2); MPICH's hydra binds nothing unless asked, so ask it.
if [ "$cores" -ge 2 ]; then
  bind=()
  [ "$CT_MPI" = mpich ] && bind=(-bind-to core)
  for th in auto 2; do
    dir=$WORK/bound-$th
    if timeout 300 "$CT_MPIEXEC" "${bind[@]}" -np 1 "$CT_BINARY" --config "$CONFIG" --run-dir "$dir" \
         --set train.max_steps=3 --set dist.threads=$th > "$dir.log" 2>&1; then
      row=$(grep -E '^ +0 ' "$dir/placement.txt" || true)
      blas=$(echo "$row" | awk '{print $7}')
      if [ "$th" = auto ]; then
        want="warning (rank 0): dist.threads = auto runs 1 thread, not $cores: bound by mpirun to 1 PU (cpuset 0x"
        expect=1
      else
        want="warning (rank 0): dist.threads = 2 on 1 PU: bound by mpirun to 1 PU (cpuset 0x"
        expect=2
      fi
      n=$(grep -cF "$want" "$dir.log" || true)
      if [ "$n" = 1 ] && grep -qF "$want" "$dir/placement.txt" && grep -qF -- "--bind-to none" "$dir/placement.txt" &&
         [ "$blas" = "$expect" ] && grep -q "\"blas_threads\": $expect\b" "$dir/run.json" &&
         grep -q "1 rank x $expect BLAS thread" "$dir.log"; then
        pass "mpirun -np 1 bound to a core, dist.threads=$th: $expect thread(s), warned once naming mpirun and --bind-to none"
      else
        fail "mpirun -np 1 bound to a core, dist.threads=$th: want $expect thread(s) and one warning (got BLAS '$blas', $n warnings)"
        cat "$dir.log"; cat "$dir/placement.txt" 2>/dev/null || true
      fi
    else
      fail "mpirun -np 1 (launcher's binding), dist.threads=$th failed"; cat "$dir.log"
    fi
  done
  # Unbound (ctrain-run), auto takes every core: no thread warning.
  if grep -q "dist.threads" "$WORK/pl1/placement.txt"; then
    fail "ctrain-run -np 1: a thread warning without a narrow binding"; cat "$WORK/pl1/placement.txt"
  else
    pass "ctrain-run -np 1: no thread warning"
  fi
fi
finish
