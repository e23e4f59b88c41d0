#!/usr/bin/env bash
# Side-by-side benchmark of the gpt (configs/moby-gpt.ini): ctrain-dist against
# its PyTorch DDP peer tests/bench/torch_gpt_peer.py (same architecture, init
# scheme, data windows and order, batch, AdamW, schedule and clipping), the
# same number of steps, the same launcher and environment. Run by hand, never
# by CI; see tests/bench/README.md.
#
# Before measuring, the peer's batches are checked against ours
# (tests/bench/gpt_batches.c, built from the binary's libctrain.a): the first
# steps of every N must give the same sample indices and token digests.
# What it is not: a test (tests/e2e/test_gpt_export.sh checks the peer's
# numbers against ours), nor a tuner of either side.
set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$SCRIPT_DIR/../.." && pwd)
PROG=$(basename "$0")

WORLDS="1 2"
STEPS=0
REPS=1
CONFIG="$ROOT/configs/moby-gpt.ini"
BIN="$ROOT/build/ctrain-dist"
PEER="$SCRIPT_DIR/torch_gpt_peer.py"
PEER_PY=/usr/bin/python3
OUT=""
RUN_TIMEOUT=3600
MPIRUN_EXTRA=""
PEER_THREADS=""
CHECK=1
KEEP=0
declare -a SETS=()

usage() {
    cat <<EOF
usage: $PROG [options]

For each world size N (and repetition): ours, then the peer (the order
alternates on even repetitions), each as 'mpirun --allow-run-as-root
--oversubscribe -np N', on CONFIG for the same steps. Prints one table (also
OUT/results.md): tokens/s of the training loop, peak RSS per rank, val loss
at the last step of each side and the ratios; then the val loss at every
evaluation both made (epoch ends, the last step).

options:
  -w, --worlds "LIST"    world sizes (default "$WORLDS")
  -s, --steps S          train.max_steps for both (default 0: the config's whole run)
  -r, --reps R           repetitions (default $REPS)
  -c, --config FILE      default configs/moby-gpt.ini (data: launch/get-data.sh moby-dick)
      --set S.K=V        an override for both sides (repeatable), e.g. train.eval_every=1000
  -o, --out DIR          output directory (default \${TMPDIR:-/tmp}/ctrain-gpt-DATE)
      --bin PATH         ctrain-dist binary (default build/ctrain-dist; its libctrain.a
                         beside it builds the batch check)
      --peer-python P    interpreter with torch (default $PEER_PY)
      --peer-threads T   the peer's threads per rank (default: what ours used, from run.json)
      --mpirun-args "A"  extra mpirun arguments, both sides (default none)
      --timeout S        kill a run after S seconds, and fail (default $RUN_TIMEOUT)
      --no-check         skip the batch check
      --keep             keep ours' run directories
  -h, --help             this text

tokens/s: global, steps x global batch x block / training time (ours: the
epochs' epoch_s, slowest rank; the peer: rank 0's clock between barriers);
evaluation excluded on both sides. RSS: ru_maxrss, max over ranks.
OPENBLAS_* variables are neither set nor unset; they are printed, with the CPU
model, its bf16/AMX flags, ours' gemm and both sides' OpenBLAS cores.
EOF
}

die() { echo "$PROG: error: $*" >&2; exit 1; }
log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*"; }
env_list() { local e; e=$(env | grep -E "$1" | sort | paste -sd' ' || true); echo "${e:-(none set)}"; }
json_get() { python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$1" "$2"; }
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
cpu_model() { lscpu | sed -n 's/^Model name: *//p' | head -n 1; }
cpu_bf16() {
    local f
    f=$(lscpu | sed -n 's/^Flags: *//p' | tr ' ' '\n' | grep -E 'bf16|amx' | sort | paste -sd' ' || true)
    echo "${f:-(none)}"
}

fail_run() {
    echo "---- last lines of $2 ----" >&2
    tail -n 30 "$2" >&2 || true
    [[ $3 -eq 124 || $3 -eq 137 ]] && die "$1 timed out after ${RUN_TIMEOUT}s (log: $2)"
    die "$1 failed with exit status $3 (log: $2)"
}

parse_args() {
    while [[ $# -gt 0 ]]; do
        case $1 in
            -w|--worlds) WORLDS=${2:?}; shift 2 ;;
            -s|--steps) STEPS=${2:?}; shift 2 ;;
            -r|--reps) REPS=${2:?}; shift 2 ;;
            -c|--config) CONFIG=${2:?}; shift 2 ;;
            --set) SETS+=("${2:?}"); shift 2 ;;
            -o|--out) OUT=${2:?}; shift 2 ;;
            --bin) BIN=${2:?}; shift 2 ;;
            --peer-python) PEER_PY=${2:?}; shift 2 ;;
            --peer-threads) PEER_THREADS=${2:?}; shift 2 ;;
            --mpirun-args) MPIRUN_EXTRA=${2?}; shift 2 ;;
            --timeout) RUN_TIMEOUT=${2:?}; shift 2 ;;
            --no-check) CHECK=0; shift ;;
            --keep) KEEP=1; shift ;;
            -h|--help) usage; exit 0 ;;
            *) usage >&2; die "unknown argument: $1" ;;
        esac
    done
    [[ $STEPS =~ ^[0-9]+$ ]] || die "--steps must be a non-negative integer, not '$STEPS'"
    [[ $REPS =~ ^[1-9][0-9]*$ ]] || die "--reps must be a positive integer, not '$REPS'"
    [[ $RUN_TIMEOUT =~ ^[1-9][0-9]*$ ]] || die "--timeout must be a positive integer, not '$RUN_TIMEOUT'"
    [[ -z $PEER_THREADS || $PEER_THREADS =~ ^[1-9][0-9]*$ ]] || die "--peer-threads must be a positive integer"
    read -r -a WORLD_LIST <<<"$WORLDS"
    [[ ${#WORLD_LIST[@]} -gt 0 ]] || die "--worlds is empty"
    local x
    for x in "${WORLD_LIST[@]}"; do [[ $x =~ ^[1-9][0-9]*$ ]] || die "world size '$x' is not a positive integer"; done
    for x in "${SETS[@]}"; do [[ $x =~ ^[a-z_]+\.[a-z_0-9]+=[^[:space:]]+$ ]] || die "not SECTION.KEY=VALUE: '$x'"; done
    [[ -f $CONFIG ]] || die "no config $CONFIG"
    OUT=${OUT:-${TMPDIR:-/tmp}/ctrain-gpt-$(date +%Y%m%d-%H%M%S)}
}

check_prereqs() {
    local t
    for t in mpirun python3 timeout lscpu; do command -v "$t" >/dev/null || die "'$t' not found on PATH"; done
    [[ -x $BIN ]] || die "$BIN missing; build it (see tests/bench/README.md) or pass --bin"
    [[ -x $PEER_PY ]] || die "peer interpreter not found: $PEER_PY (use --peer-python)"
    "$PEER_PY" -c 'import torch, numpy' 2>/dev/null || die "$PEER_PY cannot import torch and numpy (Debian: python3-torch)"
    # The data: the config's shards must exist (moby-dick: launch/get-data.sh moby-dick).
    "$PEER_PY" "$PEER" --config "$CONFIG" "${SET_ARGS[@]}" --dump-batches 1 >/dev/null ||
        die "the peer cannot read $CONFIG's data (for moby-gpt.ini: launch/get-data.sh moby-dick)"
}

mpi() {
    local n=$1
    shift
    # shellcheck disable=SC2086
    timeout -k 30 "$RUN_TIMEOUT" mpirun --allow-run-as-root --oversubscribe -np "$n" $MPIRUN_EXTRA "$@"
}

# The config's seed, block, global batch and train shards (comma list), as
# the peer reads them, on one line.
recipe_fields() {
    "$PEER_PY" - "$PEER" "$CONFIG" "${SETS[@]}" <<'PY'
import os, sys
sys.path.insert(0, os.path.dirname(sys.argv[1]))
from torch_gpt_peer import Recipe
r = Recipe(sys.argv[2], sys.argv[3:])
print(r.seed, r.block, r.global_batch, ",".join(r.path_of(x) for x in r.train_files))
PY
}

# batch_check N: ours' and the peer's batches of the first 6 steps agree at N ranks.
batch_check() {
    local n=$1 helper=$OUT/gpt_batches lib
    if [[ ! -x $helper ]]; then
        lib=$(dirname "$BIN")/libctrain.a
        [[ -f $lib && -d $(dirname "$BIN")/generated ]] || die "batch check: no $lib (or generated/) beside $BIN; --no-check skips it"
        # shellcheck disable=SC2046
        gcc -std=c11 -O2 -D_POSIX_C_SOURCE=200809L -I"$ROOT/src" -I"$(dirname "$BIN")/generated" \
            "$SCRIPT_DIR/gpt_batches.c" "$lib" -o "$helper" $(pkg-config --cflags --libs openblas) \
            -lcrypto -lz -lhwloc -lm -lpthread || die "batch check: gpt_batches.c did not build"
    fi
    local seed block gb shards k=6
    read -r seed block gb shards < <(recipe_fields)
    [[ -n $shards ]] || die "batch check: cannot read $CONFIG's recipe"
    "$helper" "$seed" "$block" "$gb" "$n" "$k" "$shards" >"$OUT/logs/batches-ours-N$n.txt" ||
        die "batch check: gpt_batches failed"
    "$PEER_PY" "$PEER" --config "$CONFIG" "${SET_ARGS[@]}" --world "$n" --dump-batches "$k" \
        >"$OUT/logs/batches-peer-N$n.txt" || die "batch check: the peer's --dump-batches failed"
    cmp -s "$OUT/logs/batches-ours-N$n.txt" "$OUT/logs/batches-peer-N$n.txt" ||
        die "batch check at N=$n: the peer's batches differ from ours (diff $OUT/logs/batches-{ours,peer}-N$n.txt)"
    log "batch check N=$n: the first $k steps' $((k * n)) rank batches are the same (indices, token digests)"
}

run_ours() {
    local n=$1 rep=$2 tag="ours-N$1-r$2" rc=0
    local run_dir="$TMP/$tag" logf="$OUT/logs/$tag.log"
    log "$tag: ctrain-dist, $n rank(s)"
    mpi "$n" "$BIN" --config "$CONFIG" --run-dir "$run_dir" --set train.max_steps="$STEPS" "${SET_ARGS[@]}" \
        >"$logf" 2>&1 || rc=$?
    [[ $rc -eq 0 ]] || fail_run "$tag" "$logf" "$rc"
    [[ -s $run_dir/metrics.jsonl && -s $run_dir/run.json ]] || fail_run "$tag (no metrics.jsonl/run.json)" "$logf" 1
    mkdir -p "$OUT/raw/$tag"
    cp "$run_dir/metrics.jsonl" "$run_dir/run.json" "$run_dir/config.ini" "$OUT/raw/$tag/"
    [[ -n ${THREADS[$n]:-} ]] || THREADS[$n]=${PEER_THREADS:-$(json_get "$run_dir/run.json" 'd["blas_threads"]')}
    log "$tag: done; $(grep '^done:' "$logf" | tail -n 1)"
}

run_peer() {
    local n=$1 rep=$2 tag="peer-N$1-r$2" rc=0
    local json="$OUT/raw/$tag.json" logf="$OUT/logs/$tag.log"
    local threads=${THREADS[$n]:-${PEER_THREADS:-1}}
    log "$tag: torch DDP, $n rank(s) x $threads thread(s)"
    mpi "$n" "$PEER_PY" "$PEER" --config "$CONFIG" --set train.max_steps="$STEPS" "${SET_ARGS[@]}" \
        --world "$n" --threads "$threads" --port "$(free_port)" --json-out "$json" --log-every 100 \
        >"$logf" 2>&1 || rc=$?
    [[ $rc -eq 0 ]] || fail_run "$tag" "$logf" "$rc"
    [[ -s $json ]] || fail_run "$tag (no --json-out file)" "$logf" 1
    [[ $(json_get "$json" 'd["ranks_agree"]') == True ]] || fail_run "$tag (ranks ended with different parameters)" "$logf" 1
    log "$tag: done; $(grep -E '^[0-9]+ steps' "$logf" | tail -n 1)"
}

write_header() {
    local rev
    rev=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo "?")
    [[ -z $(git -C "$ROOT" status --porcelain --untracked-files=no 2>/dev/null) ]] || rev="$rev (working tree modified)"
    {
        echo "# ctrain-dist vs PyTorch DDP: gpt ($(basename "$CONFIG"))"
        echo
        echo "- date: $(date -u '+%Y-%m-%d %H:%M UTC')"
        echo "- host: $(hostname), $(nproc) CPUs, lscpu model name: $(cpu_model)"
        echo "- bf16/AMX CPU flags: $(cpu_bf16)"
        echo "- load average (1/5/15 min) before: $LOAD_BEFORE; after: $(cut -d' ' -f1-3 /proc/loadavg)"
        echo "- ctrain-dist: git $rev; \`$(head -n 1 <<<"$VERSION_TEXT")\`; binary $BIN"
        echo "- peer: torch_gpt_peer.py, torch $("$PEER_PY" -c 'import torch; print(torch.__version__)'), $PEER_PY"
        echo "- steps: $([[ $STEPS -gt 0 ]] && echo "$STEPS" || echo "the config's whole run"); overrides: ${SETS[*]:-(none)}; N: ${WORLD_LIST[*]}; $REPS repetition(s)"
        echo "- launcher (both): \`mpirun --allow-run-as-root --oversubscribe -np N${MPIRUN_EXTRA:+ $MPIRUN_EXTRA}\`"
        echo "- batch check: $([[ $CHECK -eq 1 ]] && echo "passed (first 6 steps, every N)" || echo skipped)"
        echo "- \`env | grep OPENBLAS\`: $(env_list ^OPENBLAS_)"
        echo "- other BLAS/OpenMP variables: $(env_list '^(CT_[A-Z_]*|OMP_[A-Z_]*|GOTO_[A-Z_]*)=')"
    } >"$OUT/header.md"
}

main() {
    parse_args "$@"
    SET_ARGS=()
    local kv
    for kv in "${SETS[@]}"; do SET_ARGS+=(--set "$kv"); done
    check_prereqs
    declare -gA THREADS=()
    mkdir -p "$OUT/raw" "$OUT/logs"
    TMP=$(mktemp -d "${TMPDIR:-/tmp}/ctrain-gpt-runs.XXXXXX")
    if [[ $KEEP -eq 1 ]]; then trap 'echo "run dirs kept in $TMP" >&2' EXIT; else trap 'rm -rf "$TMP"' EXIT; fi
    VERSION_TEXT=$("$BIN" --version) || die "$BIN --version failed"
    LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
    log "output: $OUT"
    echo "lscpu: $(cpu_model); bf16/AMX flags: $(cpu_bf16); env | grep OPENBLAS: $(env_list ^OPENBLAS_)"
    local n rep
    if [[ $CHECK -eq 1 ]]; then
        for n in "${WORLD_LIST[@]}"; do batch_check "$n"; done
    fi
    for ((rep = 1; rep <= REPS; rep++)); do
        for n in "${WORLD_LIST[@]}"; do
            # The peer takes ours' thread count: ours goes first the first time.
            if [[ -z ${THREADS[$n]:-} || $((rep % 2)) -eq 1 ]]; then
                run_ours "$n" "$rep"
                run_peer "$n" "$rep"
            else
                run_peer "$n" "$rep"
                run_ours "$n" "$rep"
            fi
        done
    done
    write_header
    summarize "$OUT" || die "summary failed"
    log "table written to $OUT/results.md (raw results in $OUT/raw, logs in $OUT/logs)"
}

# summarize OUT: the tables, from OUT/raw (standard library only).
summarize() {
    python3 - "$1" <<'PY'
import glob, json, os, re, statistics, sys
out = sys.argv[1]
raw = os.path.join(out, "raw")
ours, peer = {}, {}
for d in sorted(glob.glob(os.path.join(raw, "ours-N*-r*"))):
    n = int(re.search(r"ours-N(\d+)-r", d)[1])
    ep = [json.loads(x) for x in open(os.path.join(d, "metrics.jsonl")) if x.strip()]
    run = json.load(open(os.path.join(d, "run.json")))
    ours.setdefault(n, []).append(dict(ep=ep, run=run))
for p in sorted(glob.glob(os.path.join(raw, "peer-N*-r*.json"))):
    n = int(re.search(r"peer-N(\d+)-r", p)[1])
    peer.setdefault(n, []).append(json.load(open(p)))
if not ours:
    sys.exit(f"no runs of ours under {raw}")

def ours_tps(r):
    # total tokens / total training time over the epochs (each line: tokens_per_s * epoch_s tokens)
    tok = sum(e["tokens_per_s"] * e["epoch_s"] for e in r["ep"])
    return tok / sum(e["epoch_s"] for e in r["ep"])

def fmt(x, f="{:,.0f}"):
    return "n/a" if x is None else f.format(x)

med = lambda v: statistics.median(v) if v else None
head = ["N", "thr/rank", "steps", "ours tokens/s", "peer tokens/s", "ours/peer", "ours RSS MiB/rank",
        "peer RSS MiB/rank", "ours/peer RSS", "ours val_loss", "peer val_loss", "difference"]
rows, evrows = [], []
for n in sorted(ours):
    rs, ps = ours[n], peer.get(n, [])
    o_tps, p_tps = med([ours_tps(r) for r in rs]), med([p["tokens_per_s"] for p in ps])
    o_rss = max(e["peak_rss_mib"] for r in rs for e in r["ep"])
    p_rss = max((max(p["peak_rss_mib"]) for p in ps), default=None)
    o_val = rs[-1]["ep"][-1]["test_loss"]
    p_val = ps[-1]["evals"][-1]["val_loss"] if ps else None
    steps = rs[-1]["ep"][-1]["step"]
    if ps and ps[-1]["steps"] != steps:
        sys.exit(f"N={n}: ours ran {steps} steps, the peer {ps[-1]['steps']}")
    thr = sorted({r["run"].get("blas_threads") for r in rs} | {p.get("threads") for p in ps})
    rows.append([str(n), "/".join(map(str, thr)), str(steps), fmt(o_tps), fmt(p_tps),
                 fmt(o_tps / p_tps if p_tps else None, "{:.2f}"), fmt(o_rss, "{:.1f}"), fmt(p_rss, "{:.1f}"),
                 fmt(o_rss / p_rss if p_rss else None, "{:.3f}"), fmt(o_val, "{:.4f}"), fmt(p_val, "{:.4f}"),
                 fmt(o_val - p_val if p_val is not None and o_val is not None else None, "{:+.4f}")])
    pe = {e["step"]: e["val_loss"] for e in (ps[-1]["evals"] if ps else [])}
    for e in rs[-1]["ep"]:
        if e.get("test_loss") is not None:
            pv = pe.get(e["step"])
            evrows.append([str(n), str(e["step"]), f"{e['test_loss']:.4f}", fmt(pv, "{:.4f}"),
                           fmt(e["test_loss"] - pv if pv is not None else None, "{:+.4f}")])
md = lambda h, rr: "\n".join(["| " + " | ".join(h) + " |", "|" + "---|" * len(h)] + ["| " + " | ".join(r) + " |" for r in rr])
t1 = md(head, rows)
t2 = md(["N", "step", "ours val_loss", "peer val_loss", "difference"], evrows)
r0 = ours[min(ours)][-1]["run"]
p0 = next(iter(peer.values()))[-1] if peer else {}
reps = max(len(v) for v in ours.values())
legend = (f"tokens/s: global, training loop only (evaluation excluded), median of {reps} repetition(s); ours: "
          f"the epochs' tokens over their epoch_s (slowest rank); the peer: rank 0's clock between barriers. "
          f"RSS: ru_maxrss, max over ranks. val_loss: nats per token over every val window, at the last step "
          f"(last repetition). Ours' gemm: {r0.get('gemm', 'n/a')}; ours' OpenBLAS: {r0.get('blas', 'n/a')}; "
          f"the peer's OpenBLAS core: {p0.get('openblas', {}).get('corename', 'n/a')}.")
text = t1 + "\n\n" + legend + "\n\nval loss at every evaluation both sides made (same steps):\n\n" + t2
print(text)
hp = os.path.join(out, "header.md")
header = open(hp).read().rstrip() + "\n\n" if os.path.exists(hp) else ""
with open(os.path.join(out, "results.md"), "w") as f:
    f.write(header + text + "\n")
PY
}

if [[ ${1:-} == --summarize-only ]]; then
    [[ $# -eq 2 ]] || die "usage: $PROG --summarize-only OUT"
    summarize "$2"
    exit 0
fi
main "$@"
