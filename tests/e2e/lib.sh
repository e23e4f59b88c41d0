# Helpers for the end-to-end tests (sourced). ctest sets CT_BINARY, CT_SOURCE_DIR,
# CT_MPIEXEC, CT_MPI (the MPI flavour: openmpi or mpich) and CT_MPIEXEC_FLAGS;
# running by hand, they default to the usual build layout, the mpiexec of the
# binary's MPI and that launcher's flavour (its --version).
set -euo pipefail
CT_SOURCE_DIR=${CT_SOURCE_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
CT_BINARY=${CT_BINARY:-$CT_SOURCE_DIR/build/ctrain-dist}
if [ -z "${CT_MPIEXEC:-}" ]; then
  # By hand: the launcher of the MPI the binary is linked with (Debian's names).
  CT_MPIEXEC=mpiexec
  if ldd "$CT_BINARY" 2>/dev/null | grep -q 'libmpich'; then CT_MPIEXEC=mpiexec.mpich; fi
fi
if [ -z "${CT_MPI:-}" ]; then
  case $("$CT_MPIEXEC" --version 2>&1) in
    *HYDRA*) CT_MPI=mpich ;;
    *) CT_MPI=openmpi ;;
  esac
fi
# CT_MPIEXEC_ARGS: what every mpirun line of a test passes before -np
#   "$CT_MPIEXEC" "${CT_MPIEXEC_ARGS[@]}" -np N PROGRAM...
# (the ranks pin themselves, so the launcher must not bind; Open MPI also
# needs to be told that N may exceed the cores, and that root may run it).
# In a command that mpirun starts, the rank's number is
# ${OMPI_COMM_WORLD_RANK:-$PMI_RANK}: Open MPI sets the first, hydra the second.
if [ "$CT_MPI" = mpich ]; then
  read -r -a CT_MPIEXEC_ARGS <<<"${CT_MPIEXEC_FLAGS:--bind-to none}"
else
  read -r -a CT_MPIEXEC_ARGS <<<"${CT_MPIEXEC_FLAGS:---oversubscribe --bind-to none}"
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
fi
DATA=/usr/share/datasets/fashion-mnist
WORK=$(mktemp -d /tmp/ct-e2e-XXXXXX)
trap 'rm -rf "$WORK"' EXIT

# The runs read Fashion-MNIST un-gzipped: every launch would otherwise
# inflate the 26 MB of training images again (measured: 0.65 CPU-s and
# 1.5 s of wall time less per 2-rank launch of 2 steps, loaded machine; the
# e2e tests launch a few hundred times). RAW_DATA holds the four IDX files
# as gunzip writes them, made once per build directory by the first test
# that needs it (in a temporary directory renamed into place: a test running
# beside it never sees a half-written file). CONFIGS holds copies of
# configs/fmnist-*.ini (same file names, so messages naming the config read
# the same) whose [data] section reads RAW_DATA; CONFIG is the mlp's. The
# loader takes raw and gzip files alike (by their first bytes); the tests of
# gzip loading itself read the .gz files: CONFIG_GZ (the repository's
# configs/fmnist-mlp.ini, data in DATA) in test_bad_inputs (truncated, lying
# and missing .gz files), test_watchdog and test_accuracy (a whole run),
# and DATA in test_data_tool.
CONFIG_GZ=$CT_SOURCE_DIR/configs/fmnist-mlp.ini
RAW_DATA=$(cd "$(dirname "$CT_BINARY")" && pwd)/test-data/fashion-mnist-raw
FMNIST_FILES=(train-images-idx3-ubyte train-labels-idx1-ubyte t10k-images-idx3-ubyte t10k-labels-idx1-ubyte)
if [ ! -d "$RAW_DATA" ]; then
  mkdir -p "$(dirname "$RAW_DATA")"
  raw_tmp=$(mktemp -d "$RAW_DATA.tmp-XXXXXX")
  chmod 755 "$raw_tmp"
  for f in "${FMNIST_FILES[@]}"; do
    gzip -dc "$DATA/$f.gz" >"$raw_tmp/$f" || { echo "lib.sh: cannot unpack $DATA/$f.gz (install dataset-fashion-mnist)"; exit 1; }
  done
  # Another test may have renamed its copy into place first: keep that one.
  mv -T "$raw_tmp" "$RAW_DATA" 2>/dev/null || rm -rf "$raw_tmp"
fi
CONFIGS=$WORK/configs
mkdir -p "$CONFIGS"
for c in "$CT_SOURCE_DIR"/configs/fmnist-*.ini; do
  sed "s|^dir = $DATA\$|dir = $RAW_DATA\ntrain_images = ${FMNIST_FILES[0]}\ntrain_labels = ${FMNIST_FILES[1]}\ntest_images = ${FMNIST_FILES[2]}\ntest_labels = ${FMNIST_FILES[3]}|" \
    "$c" >"$CONFIGS/$(basename "$c")"
  grep -q "^dir = $RAW_DATA\$" "$CONFIGS/$(basename "$c")" || { echo "lib.sh: $c has no 'dir = $DATA' line to point at $RAW_DATA"; exit 1; }
done
CONFIG=$CONFIGS/fmnist-mlp.ini
passed=0
failed=0
# train.epochs of a run that a test signals, stops or kills while it trains:
# with no max_steps it has no end of its own within any test's horizon,
# however fast the machine, so it is still running when the test acts. (The
# cosine schedule spans all epochs: runs compared bit for bit use the same
# value.) Where such a run must end later, the test sets train.max_steps
# relative to the step it reads from the run's files.
# shellcheck disable=SC2034
LONG=100000

# nps LIST: the rank counts a test repeats its cases at. Under the sanitizers
# (CT_SANITIZED, set by the ASan+UBSan build's ctest) the cases run at 2
# ranks alone: a rank 0 and a rank that is not, the two kinds of code path
# a bad input can take, without the plain build's 1 and 4 again at several
# times the cost.
nps() { if [ -n "${CT_SANITIZED:-}" ]; then echo 2; else echo "$*"; fi; }

# token_shard FILE < BYTES: an llm.c-layout token shard (a header of 256
# little-endian int32: magic 20240520, version 1, token count; then uint16
# tokens) holding the bytes of stdin, one token a byte (data.vocab = 256).
token_shard() {
  python3 -c '
import struct, sys
data = sys.stdin.buffer.read()
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<256i", 20240520, 1, len(data), *([0] * 253)))
    f.write(struct.pack("<%dH" % len(data), *data))' "$1"
}

pass() { passed=$((passed + 1)); echo "ok: $*"; }
fail() { failed=$((failed + 1)); echo "FAIL: $*"; }
# skip REASON: this machine lacks what the test needs (exit 77, which ctest
# counts as skipped), except under CI=true (.ci/run sets it), where a test
# that cannot run is a failure: CI installs everything the tests need.
skip() {
  echo "SKIP: $*"
  if [ "${CI:-}" = true ]; then
    echo "FAIL: CI=true: a test that cannot run here fails"
    exit 1
  fi
  exit 77
}

# need_torch: TORCH_PY (CT_TORCH_PYTHON, default /usr/bin/python3) imports
# torch and numpy, else the test is skipped (a failure under CI=true: CI
# installs python3-torch).
need_torch() {
  TORCH_PY=${CT_TORCH_PYTHON:-/usr/bin/python3}
  "$TORCH_PY" -c 'import torch, numpy' 2>/dev/null ||
    skip "$TORCH_PY cannot import torch and numpy (Debian: python3-torch, python3-numpy)"
}

# run_np N OUT ARGS...: run ctrain-dist on N ranks with a 300 s guard against
# hangs; each rank's exit status goes to OUT.rc.<rank>, stdout+stderr to OUT.log.
# Succeeds when every rank exited 0.
run_np() {
  local np=$1 out=$2 r
  shift 2
  rm -f "$out".rc.*
  # Let every rank finish by itself, so that each rank's own exit status can
  # be checked: Open MPI's mpirun would kill the others as soon as one exits
  # non-zero (orte_abort_on_non_zero_status=0 stops that); hydra already
  # does so by default: it ends the job only when a process exits without
  # MPI_Finalize (or calls MPI_Abort), as Open MPI does then too. (Hydra's
  # -disable-auto-cleanup would go further and leave the others running
  # after such a death, in a collective that never ends.)
  local keep=(--mca orte_abort_on_non_zero_status 0)
  [ "$CT_MPI" != mpich ] || keep=()
  timeout 300 "$CT_MPIEXEC" "${CT_MPIEXEC_ARGS[@]}" "${keep[@]}" -np "$np" \
    bash -c '"$0" "$@"; rc=$?; echo $rc > "'"$out"'.rc.${OMPI_COMM_WORLD_RANK:-$PMI_RANK}"; exit $rc' \
    "$CT_BINARY" "$@" >"$out.log" 2>&1 || true
  for ((r = 0; r < np; r++)); do
    [ "$(cat "$out.rc.$r" 2>/dev/null)" = 0 ] || return 1
  done
}

# every_rank_exited NP OUT WANT: each of NP ranks wrote status WANT.
every_rank_exited() {
  local np=$1 out=$2 want=$3 r
  for ((r = 0; r < np; r++)); do
    [ -f "$out.rc.$r" ] || { echo "  rank $r left no exit status (killed or hung)"; return 1; }
    [ "$(cat "$out.rc.$r")" = "$want" ] || { echo "  rank $r exited $(cat "$out.rc.$r"), want $want"; return 1; }
  done
}

# jsonl FILE LINE KEY...: the values of the KEYs in line LINE (1-based; -1 = last;
# all = every line) of a .jsonl file, parsed as JSON (tests/e2e/jsonl.py says how
# values print); fails with a message when the file or line is missing or malformed.
CT_JSONL=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/jsonl.py
jsonl() { python3 "$CT_JSONL" "$@"; }

# metric FILE LINE KEY: the value of KEY in line LINE (1-based; -1 = last) of a
# metrics.jsonl, as written there (0.8812, true, null, the digest); empty when
# the line lacks KEY.
metric() { jsonl "$1" "$2" "$3"; }

# A run directory's last param_sha256, its per-step losses, its last test
# metrics (each an "no ... in DIR" line when missing, so that two missing
# never compare equal to a present one).
digest() { metric "$1/metrics.jsonl" -1 param_sha256 || echo "no digest in $1"; }
losses() { jsonl "$1/steps.jsonl" all step loss || echo "no losses in $1"; }
evals() { jsonl "$1/metrics.jsonl" -1 test_loss test_acc || echo "no eval in $1"; }

# chain_steps DIR: the steps of DIR's chain.jsonl on one line; one_lineage
# "STEPS": each step once, rising (one job's lineage: a step written twice is
# two checkpoints of one step in the record).
chain_steps() { jsonl "$1/chain.jsonl" all step | tr '\n' ' '; }
one_lineage() { python3 -c 'import sys; s = [int(x) for x in sys.argv[1].split()]; sys.exit(0 if s and s == sorted(set(s)) else 1)' "$1"; }

# same LABEL REF DIR: the run in DIR ended with REF's digest, per-step losses
# and test metrics (the bit-for-bit check of the determinism, resume and
# sharding tests).
same() {
  if [ "$(digest "$3")" = "$(digest "$2")" ] && [ "$(losses "$3")" = "$(losses "$2")" ] &&
     [ "$(evals "$3")" = "$(evals "$2")" ]; then
    pass "$1: digest, losses and test metrics identical"
  else
    fail "$1: differs ($(digest "$2") vs $(digest "$3"))"; diff <(losses "$2") <(losses "$3") | head -5
  fi
}

# ge A B: A >= B for decimals.
ge() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a + 0 >= b + 0) }'; }

# inventory CATEGORY INPUT NP STATUS LOG: one bad input a test tried on NP
# ranks, for the table in tests/README.md (tests/gen_inventory.sh). A no-op
# unless CT_INVENTORY=FILE is set; then appends
# "category|input|status|np|message" to FILE, message being LOG's first
# error line (else its first warning line),
# with this test's temporary paths, process ids and temporary-directory ids
# replaced by placeholders so that the rows are the same from run to run.
inventory() {
  [ -n "${CT_INVENTORY:-}" ] || return 0
  local cat=$1 input=$2 np=$3 status=$4 log=$5 msg
  msg=$(grep -m1 -E 'error:|refused|BROKEN|FAIL' "$log" 2>/dev/null ||
        grep -m1 -E 'warning:' "$log" 2>/dev/null || head -n1 "$log" 2>/dev/null || true)
  local norm='s|'"$WORK"'|WORK|g; s|'"$CT_SOURCE_DIR"'|SRC|g; s/\.tmp-[0-9]+-[0-9a-f]+/.tmp-ID/g; s/at offset [0-9]+/at offset N/g; s/\|/\\|/g'
  msg=$(printf '%s' "$msg" | sed -E "$norm" | cut -c1-240)
  input=$(printf '%s' "$input" | sed -E "$norm")
  printf '%s|%s|%s|%s|%s\n' "$cat" "$input" "$status" "$np" "$msg" >> "$CT_INVENTORY"
}

finish() {
  echo "$passed passed, $failed failed"
  [ "$failed" -eq 0 ]
}
