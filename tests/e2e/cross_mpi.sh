#!/usr/bin/env bash
# A deterministic-mode run does not depend on which MPI carries it: Open MPI
# and MPICH give the same weights bit for bit, and each resumes the other's
# checkpoint (MPI-IO through Open MPI's OMPIO or MPICH's ROMIO, the same
# bytes). Two builds of the same code are needed, one per MPI, so this is not
# a test_*.sh that every build runs: tests/CMakeLists.txt registers it as
# e2e.cross_mpi in a build configured with -DCT_OTHER_MPI_BINARY=<the other
# build's ctrain-dist> (tests/mpich/ci.sh, CI's MPICH phase, passes build/'s).
#   - N = 2, S = 6 steps of the mlp, straight through, under each MPI: the
#     same param_sha256 and per-step losses;
#   - Open MPI to step 3, MPICH resumes to S; MPICH to step 3, Open MPI
#     resumes to S: both end with the straight run's digest;
#   - run.json and the checkpoint manifests name the MPI that wrote them
#     (lib.mpi "Open MPI v..." / "MPICH Version: ..."), and audit verify
#     accepts the mixed chains (a new segment where the MPI changed).
# About 40 s here (six short runs at N = 2).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# Both launchers run in one script: Open MPI's needs its root permission
# whichever MPI this build has (MPICH ignores the variables).
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1

flavour_of() { # flavour_of BINARY: the MPI it is linked with
  if ldd "$1" 2>/dev/null | grep -q libmpich; then echo mpich; else echo openmpi; fi
}
OTHER_BINARY=${CT_OTHER_BINARY:-}
[ -x "$OTHER_BINARY" ] || skip "CT_OTHER_BINARY (the other MPI's ctrain-dist) is not set or not executable"
declare -A BIN MPIEXEC ARGS
BIN[$CT_MPI]=$CT_BINARY
MPIEXEC[$CT_MPI]=$CT_MPIEXEC
ARGS[$CT_MPI]="${CT_MPIEXEC_ARGS[*]}"
other=$(flavour_of "$OTHER_BINARY")
[ "$other" != "$CT_MPI" ] || skip "$OTHER_BINARY is a $other build, like this one: no other MPI to compare with"
BIN[$other]=$OTHER_BINARY
# Debian's names for each MPI's launcher, beside the alternatives.
MPIEXEC[$other]=${CT_OTHER_MPIEXEC:-mpiexec.$other}
command -v "${MPIEXEC[$other]}" >/dev/null || skip "${MPIEXEC[$other]} not found (set CT_OTHER_MPIEXEC)"
if [ "$other" = mpich ]; then ARGS[$other]="-bind-to none"; else ARGS[$other]="--oversubscribe --bind-to none"; fi
name() { [ "$1" = mpich ] && echo MPICH || echo "Open MPI"; }

# under FLAVOUR NP OUT ARGS...: run_np with that MPI's binary and launcher.
under() {
  local CT_MPI=$1 CT_BINARY=${BIN[$1]} CT_MPIEXEC=${MPIEXEC[$1]} CT_MPIEXEC_ARGS
  read -r -a CT_MPIEXEC_ARGS <<<"${ARGS[$1]}"
  shift
  run_np "$@"
}

S=6
det=(--config "$CONFIG" --set model.hidden=32 --set train.deterministic=true --set train.global_batch=96
     --set train.micro_batch=8 --set log.every_steps=1 --set checkpoint.every_epochs=0
     --set checkpoint.every_steps=3)

for f in openmpi mpich; do
  if under $f 2 "$WORK/straight-$f" "${det[@]}" --run-dir "$WORK/straight-$f" --set train.max_steps=$S; then
    mpi=$(jsonl "$WORK/straight-$f/run.json" 1 lib.mpi 2>/dev/null || true)
    case $mpi in
      "$(name $f)"*) pass "$(name $f): $S steps at N=2; run.json lib.mpi = '$mpi'" ;;
      *) fail "$(name $f): run.json lib.mpi = '$mpi', want $(name $f) ..." ;;
    esac
  else
    fail "$(name $f): straight run"; cat "$WORK/straight-$f.log"
  fi
done
ref=$WORK/straight-openmpi
if [ "$(digest "$WORK/straight-mpich")" = "$(digest "$ref")" ] &&
   [ "$(losses "$WORK/straight-mpich")" = "$(losses "$ref")" ]; then
  pass "Open MPI and MPICH: the same param_sha256 ($(digest "$ref" | cut -c1-16)...) and $S losses"
else
  fail "Open MPI vs MPICH: $(digest "$ref") vs $(digest "$WORK/straight-mpich")"
  diff <(losses "$ref") <(losses "$WORK/straight-mpich") | head -5
fi

for pair in "openmpi mpich" "mpich openmpi"; do
  set -- $pair
  dir=$WORK/$1-then-$2
  if under "$1" 2 "$dir.a" "${det[@]}" --run-dir "$dir" --set train.max_steps=3 &&
     under "$2" 2 "$dir.b" "${det[@]}" --run-dir "$dir" --set train.max_steps=$S --resume auto; then
    if [ "$(digest "$dir")" = "$(digest "$ref")" ] && grep -q "resumed from .*ckpt-3" "$dir.b.log"; then
      pass "$(name "$1") to step 3, $(name "$2") resumes to $S: the straight run's digest"
    else
      fail "$(name "$1") -> $(name "$2"): $(digest "$dir") vs $(digest "$ref")"; cat "$dir.b.log"
    fi
  else
    fail "$(name "$1") -> $(name "$2") runs"; cat "$dir.a.log" "$dir.b.log" 2>/dev/null
  fi
  # Each checkpoint names the MPI that wrote it; the chain verifies.
  "$CT_BINARY" inspect "$dir/ckpt-3" >"$dir.i3" 2>&1 || true
  "$CT_BINARY" inspect "$dir/ckpt-$S" >"$dir.i$S" 2>&1 || true
  if grep -q "mpi $(name "$1")" "$dir.i3" && grep -q "mpi $(name "$2")" "$dir.i$S"; then
    pass "ckpt-3 records $(name "$1"), ckpt-$S $(name "$2")"
  else
    fail "manifests: ckpt-3 / ckpt-$S do not name $(name "$1") / $(name "$2")"
    grep -h "mpi " "$dir.i3" "$dir.i$S"
  fi
  if "$CT_BINARY" audit verify "$dir" >"$dir.audit.log" 2>&1 && grep -q "verdict: OK" "$dir.audit.log"; then
    pass "audit verify: the $(name "$1") -> $(name "$2") chain"
  else
    fail "audit verify $dir"; cat "$dir.audit.log"
  fi
done
finish
