#!/usr/bin/env bash
# Throughput / memory / accuracy benchmark: ctrain-dist against the PyTorch DDP
# peer (shared/bench/torch_ddp_fmnist.py) on Fashion-MNIST, same recipe, same
# environment, same launcher. Run by hand, never by CI. See tests/bench/README.md.
set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$SCRIPT_DIR/../.." && pwd)
PROG=$(basename "$0")

# ----------------------------------------------------------------- defaults
WORLDS="1 2 4"
EPOCHS=3
REPS=1
MODEL=mlp
GLOBAL_BATCH=256
SEED=0
BIN="$ROOT/build/ctrain-dist"
PEER="$ROOT/../shared/bench/torch_ddp_fmnist.py"
PEER_PY=/usr/bin/python3
OUT=""
RUN_TIMEOUT=1800
MPIRUN_EXTRA=""
KEEP=0
BLAS_AUTO=1

usage() {
    cat <<EOF
usage: $PROG [options]

Trains the same model with ctrain-dist and with the PyTorch DDP peer for each
world size N (both under 'mpirun --allow-run-as-root --oversubscribe -np N'),
same recipe (global batch $GLOBAL_BATCH, seed $SEED, same epochs), same environment,
and prints a table: samples/s, peak RSS per rank and final test accuracy of
each side, with ratios ours/peer. The table also goes to OUT/results.md.

options:
  -w, --worlds "LIST"   world sizes (default "$WORLDS")
  -e, --epochs E        epochs per run (default $EPOCHS)
  -r, --reps R          repetitions of every run (default $REPS)
  -m, --model NAME      mlp or cnn: uses configs/fmnist-NAME.ini and the
                        peer's --model NAME (default $MODEL)
  -o, --out DIR         output directory (default \${TMPDIR:-/tmp}/ctrain-bench-MODEL-DATE)
      --bin PATH        ctrain-dist binary (default build/ctrain-dist)
      --peer PATH       peer script (default ../shared/bench/torch_ddp_fmnist.py)
      --peer-python P   interpreter with torch (default $PEER_PY)
      --mpirun-args "A" extra mpirun arguments, given to both sides (default none)
      --timeout S       kill a run after S seconds, and fail (default $RUN_TIMEOUT)
      --no-blas-auto    run ours with CT_BLAS_CORETYPE_AUTO=0, so that it keeps the
                        OpenBLAS kernels OpenBLAS picks itself, as the peer does
                        (by default ctrain-dist switches from generic kernels to
                        AVX2/AVX-512 ones by setting OPENBLAS_CORETYPE for itself)
      --keep            keep the temporary run directories
  -h, --help            this text

Samples/s is the median over all epochs but the first (when E > 1) of all
repetitions, for both sides. Threads per rank: ours picks cores/ranks itself
(dist.threads = auto, capped by the CPUs the rank may run on); the peer gets
--threads set to the number ours used. Note that mpirun binds each rank to one
core when N <= 2, so N=1 runs 1 thread unless --mpirun-args "--bind-to none".
OPENBLAS_* variables are neither set nor unset: they are printed, with the
OpenBLAS core each side reports. Exit status is non-zero if any run fails.
EOF
}

die() {
    echo "$PROG: error: $*" >&2
    exit 1
}

log() {
    printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*"
}

# Print the tail of a failed run's log, then die.
fail_run() {
    local what=$1 logf=$2 rc=$3
    echo "---- last lines of $logf ----" >&2
    tail -n 30 "$logf" >&2 || true
    echo "----" >&2
    if [[ $rc -eq 124 || $rc -eq 137 ]]; then
        die "$what timed out after ${RUN_TIMEOUT}s (log: $logf)"
    fi
    die "$what failed with exit status $rc (log: $logf)"
}

# json_get FILE PYEXPR: evaluate PYEXPR on the parsed JSON object 'd'.
json_get() {
    python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$1" "$2"
}

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# ----------------------------------------------------------------- arguments
parse_args() {
    while [[ $# -gt 0 ]]; do
        case $1 in
            -w|--worlds) WORLDS=${2:?}; shift 2 ;;
            -e|--epochs) EPOCHS=${2:?}; shift 2 ;;
            -r|--reps) REPS=${2:?}; shift 2 ;;
            -m|--model) MODEL=${2:?}; shift 2 ;;
            -o|--out) OUT=${2:?}; shift 2 ;;
            --bin) BIN=${2:?}; shift 2 ;;
            --peer) PEER=${2:?}; shift 2 ;;
            --peer-python) PEER_PY=${2:?}; shift 2 ;;
            --mpirun-args) MPIRUN_EXTRA=${2?}; shift 2 ;;
            --timeout) RUN_TIMEOUT=${2:?}; shift 2 ;;
            --keep) KEEP=1; shift ;;
            --no-blas-auto) BLAS_AUTO=0; shift ;;
            -h|--help) usage; exit 0 ;;
            *) usage >&2; die "unknown argument: $1" ;;
        esac
    done
    [[ $EPOCHS =~ ^[1-9][0-9]*$ ]] || die "--epochs must be a positive integer, not '$EPOCHS'"
    [[ $REPS =~ ^[1-9][0-9]*$ ]] || die "--reps must be a positive integer, not '$REPS'"
    [[ $RUN_TIMEOUT =~ ^[1-9][0-9]*$ ]] || die "--timeout must be a positive integer, not '$RUN_TIMEOUT'"
    [[ $MODEL =~ ^[a-z0-9_]+$ ]] || die "bad --model '$MODEL'"
    read -r -a WORLD_LIST <<<"$WORLDS"
    [[ ${#WORLD_LIST[@]} -gt 0 ]] || die "--worlds is empty"
    local n
    for n in "${WORLD_LIST[@]}"; do
        [[ $n =~ ^[1-9][0-9]*$ ]] || die "world size '$n' is not a positive integer"
        (( GLOBAL_BATCH % n == 0 )) || die "global batch $GLOBAL_BATCH is not divisible by world size $n"
    done
    CONFIG="$ROOT/configs/fmnist-$MODEL.ini"
    OUT=${OUT:-${TMPDIR:-/tmp}/ctrain-bench-$MODEL-$(date +%Y%m%d-%H%M%S)}
}

check_prereqs() {
    local t
    for t in mpirun python3 timeout; do
        command -v "$t" >/dev/null || die "'$t' not found on PATH"
    done
    [[ -x $BIN ]] || die "$BIN missing; build it: cmake -S . -B build -DCT_WERROR=ON && cmake --build build -j2"
    [[ -f $CONFIG ]] || die "no config for model '$MODEL': $CONFIG"
    [[ -f $PEER ]] || die "peer script not found: $PEER (use --peer)"
    [[ -x $PEER_PY ]] || die "peer interpreter not found: $PEER_PY (use --peer-python)"
    "$PEER_PY" -c 'import torch' 2>/dev/null || die "$PEER_PY cannot import torch (Debian: apt-get install python3-torch)"
    "$PEER_PY" "$PEER" --help | grep -q -- "--model {[^}]*\b$MODEL\b" \
        || die "the peer has no --model $MODEL"
}

# ----------------------------------------------------------------- runs
mpi() {
    local n=$1
    shift
    # MPIRUN_EXTRA is split on whitespace on purpose.
    # shellcheck disable=SC2086
    timeout -k 30 "$RUN_TIMEOUT" mpirun --allow-run-as-root --oversubscribe -np "$n" $MPIRUN_EXTRA "$@"
}

# run_ours N REP: train, copy the run dir's files to OUT/raw/ours-N<N>-r<REP>/.
run_ours() {
    local n=$1 rep=$2 tag="ours-N$1-r$2"
    local run_dir="$TMP/$tag" logf="$OUT/logs/$tag.log" rc=0
    log "$tag: ctrain-dist, $n rank(s), $EPOCHS epoch(s)"
    (
        [[ $BLAS_AUTO -eq 1 ]] || export CT_BLAS_CORETYPE_AUTO=0
        mpi "$n" "$BIN" --config "$CONFIG" --run-dir "$run_dir" \
            --set "train.epochs=$EPOCHS" --set "train.global_batch=$GLOBAL_BATCH" --set "train.seed=$SEED"
    ) >"$logf" 2>&1 || rc=$?
    [[ $rc -eq 0 ]] || fail_run "$tag" "$logf" "$rc"
    [[ -s $run_dir/metrics.jsonl && -s $run_dir/run.json ]] || fail_run "$tag (no metrics.jsonl/run.json)" "$logf" 1
    local lines
    lines=$(grep -c . "$run_dir/metrics.jsonl")
    [[ $lines -eq $EPOCHS ]] || fail_run "$tag ($lines epoch line(s) in metrics.jsonl, $EPOCHS expected)" "$logf" 1
    mkdir -p "$OUT/raw/$tag"
    cp "$run_dir/metrics.jsonl" "$run_dir/run.json" "$run_dir/config.ini" "$OUT/raw/$tag/"
    OURS_THREADS[$n]=$(json_get "$run_dir/run.json" 'd["blas_threads"]')
    OURS_BLAS=$(json_get "$run_dir/run.json" 'd["blas"]')
    OURS_CORE=$(sed -n 's/.*(core \([^)]*\)).*/\1/p' <<<"$OURS_BLAS")
    log "$tag: done; $(tail -n 1 "$logf")"
}

# run_peer N REP THREADS: the peer under mpirun; its --json-out goes to OUT/raw.
run_peer() {
    local n=$1 rep=$2 threads=$3 tag="peer-N$1-r$2"
    local json="$OUT/raw/$tag.json" logf="$OUT/logs/$tag.log" rc=0
    log "$tag: torch DDP, $n rank(s) x $threads thread(s), $EPOCHS epoch(s)"
    mpi "$n" "$PEER_PY" "$PEER" --model "$MODEL" --world "$n" --threads "$threads" \
        --epochs "$EPOCHS" --seed "$SEED" --global-batch "$GLOBAL_BATCH" --port "$(free_port)" \
        --json-out "$json" >"$logf" 2>&1 || rc=$?
    [[ $rc -eq 0 ]] || fail_run "$tag" "$logf" "$rc"
    [[ -s $json ]] || fail_run "$tag (no --json-out file)" "$logf" 1
    local got agree
    got=$(json_get "$json" 'len(d["epochs"])')
    [[ $got -eq $EPOCHS ]] || fail_run "$tag ($got epoch(s) in $json, $EPOCHS expected)" "$logf" 1
    agree=$(json_get "$json" 'd["ranks_agree"]')
    [[ $agree == True ]] || fail_run "$tag (peer ranks ended with different parameters)" "$logf" 1
    PEER_CORE=$(json_get "$json" 'd["openblas"].get("corename", d["openblas"])')
    PEER_TORCH=$(json_get "$json" 'd["torch"]')
    log "$tag: done; $(grep '^epoch' "$logf" | tail -n 1)"
}

# ----------------------------------------------------------------- report
openblas_env() {
    env | grep OPENBLAS | sort || echo "(no OPENBLAS_* variables set)"
}

# Other variables that change which kernels or how many threads either side uses.
other_env() {
    env | grep -E '^(CT_BLAS_CORETYPE_AUTO|OMP_[A-Z_]*|GOTO_[A-Z_]*)=' | sort || echo "(none)"
}

# generic_core_warning SIDE CORE: a warning when CORE is an old generic target.
generic_core_warning() {
    local side=$1 core=$2
    if [[ $core =~ Prescott|Core2|Penryn|Dunnington|Katmai|Coppermine|Northwood|Banias|Atom|[Gg]eneric ]]; then
        echo "WARNING: $side: OpenBLAS uses its '$core' kernels, an old generic (SSE-class) target, not"
        echo "         AVX2/AVX-512, so its numbers are far below what this CPU can do. OpenBLAS 0.3.21 falls"
        echo "         back to it on CPUs it does not know; OPENBLAS_CORETYPE=Haswell or SkylakeX, set by hand"
        echo "         outside this script, selects better kernels."
    fi
}

write_header() {
    local f="$OUT/header.md" rev
    rev=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo "?")
    if [[ -n $(git -C "$ROOT" status --porcelain --untracked-files=no 2>/dev/null) ]]; then rev="$rev (working tree modified)"; fi
    {
        echo "# ctrain-dist vs PyTorch DDP: fmnist-$MODEL"
        echo
        echo "- date: $(date -u '+%Y-%m-%d %H:%M UTC')"
        echo "- host: $(hostname), $(nproc) CPUs, $(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -n 1)"
        echo "- load average (1/5/15 min) before the runs: $LOAD_BEFORE; after: $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo "?")"
        echo "- ctrain-dist: git $rev; \`$(head -n 1 <<<"$VERSION_TEXT")\`"
        echo "- peer: $(basename "$PEER"), torch $PEER_TORCH, $PEER_PY"
        echo "- recipe: global batch $GLOBAL_BATCH, seed $SEED, $EPOCHS epoch(s), $REPS repetition(s), world sizes: ${WORLD_LIST[*]}"
        echo "- launcher (both): \`mpirun --allow-run-as-root --oversubscribe -np N${MPIRUN_EXTRA:+ $MPIRUN_EXTRA}\`"
        echo "- OpenBLAS core: ours \`$OURS_CORE\`, peer \`$PEER_CORE\` (ours: \`$OURS_BLAS\`)"
        echo "- \`env | grep OPENBLAS\`:"
        echo
        echo '```'
        openblas_env
        echo '```'
        echo "- other BLAS/OpenMP variables: $(other_env | paste -sd' ')"
        if [[ $BLAS_AUTO -eq 0 ]]; then echo "- ours ran with CT_BLAS_CORETYPE_AUTO=0 (--no-blas-auto)"; fi
        if [[ $OURS_CORE != "$PEER_CORE" ]]; then
            echo "- **The two sides used different OpenBLAS kernels** (ours $OURS_CORE, peer $PEER_CORE):"
            echo "  the samples/s ratio mixes framework and kernel differences."
        fi
        local w
        w=$(generic_core_warning ours "$OURS_CORE"; generic_core_warning peer "$PEER_CORE")
        [[ -z $w ]] || { echo; echo '```'; echo "$w"; echo '```'; }
    } >"$f"
}

# ----------------------------------------------------------------- main
main() {
    parse_args "$@"
    check_prereqs
    mkdir -p "$OUT/raw" "$OUT/logs"
    TMP=$(mktemp -d "${TMPDIR:-/tmp}/ctrain-bench-runs.XXXXXX")
    if [[ $KEEP -eq 1 ]]; then
        trap 'echo "run dirs kept in $TMP" >&2' EXIT
    else
        trap 'rm -rf "$TMP"' EXIT
    fi
    declare -gA OURS_THREADS=()
    OURS_BLAS="?" OURS_CORE="?" PEER_CORE="?" PEER_TORCH="?"
    LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo "?")
    VERSION_TEXT=$("$BIN" --version) || die "$BIN --version failed"

    log "output: $OUT"
    echo "$VERSION_TEXT"
    echo "env | grep OPENBLAS:"
    openblas_env | sed 's/^/  /'
    echo "other: $(other_env | paste -sd' ')"
    echo "load average: $LOAD_BEFORE"

    local rep n
    for ((rep = 1; rep <= REPS; rep++)); do
        for n in "${WORLD_LIST[@]}"; do
            # Alternate which side goes first, so slow drift on a shared machine
            # does not always favour the same side. The peer needs the thread
            # count ours chose, so ours goes first the first time for each N.
            if [[ -z ${OURS_THREADS[$n]:-} || $((rep % 2)) -eq 1 ]]; then
                run_ours "$n" "$rep"
                run_peer "$n" "$rep" "${OURS_THREADS[$n]}"
            else
                run_peer "$n" "$rep" "${OURS_THREADS[$n]}"
                run_ours "$n" "$rep"
            fi
        done
    done

    echo "OpenBLAS core: ours '$OURS_CORE', peer '$PEER_CORE'"
    generic_core_warning ours "$OURS_CORE" >&2
    generic_core_warning peer "$PEER_CORE" >&2
    if [[ $OURS_CORE != "$PEER_CORE" ]]; then
        echo "WARNING: the sides used different OpenBLAS kernels (ours $OURS_CORE, peer $PEER_CORE)." >&2
        echo "         Run with --no-blas-auto, or with OPENBLAS_CORETYPE set for both, for like-for-like kernels." >&2
    fi
    write_header
    echo
    python3 "$SCRIPT_DIR/summarize.py" "$OUT" --epochs "$EPOCHS" --md "$OUT/results.md" \
        || die "summarize.py failed"
    echo
    log "table written to $OUT/results.md (raw results in $OUT/raw, logs in $OUT/logs)"
}

main "$@"
