#!/usr/bin/env bash
# Side-by-side benchmark of all four models (mlp, cnn, resnet, vit): ctrain-dist,
# in one or more variants (sets of --set overrides, e.g. dist.grad_sync=blocking),
# against the PyTorch DDP peer, same recipe, environment and launcher. The peer is
# ../shared/bench/torch_ddp_fmnist.py for mlp and cnn and tests/bench/torch_peer_zoo.py
# (same protocol) for resnet and vit. Run by hand, never by CI; see tests/bench/README.md.
# What it is not: a replacement for bench_mlp.sh (one model, one variant, its own
# summarize.py); this script summarises with the Python block at its end.
set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$SCRIPT_DIR/../.." && pwd)
PROG=$(basename "$0")

# ----------------------------------------------------------------- defaults
MODELS="mlp cnn resnet vit"
WORLDS="1 2 4"
EPOCHS=3
REPS=1
GLOBAL_BATCH=256
SEED=0
BIN="$ROOT/build/ctrain-dist"
SHARED_PEER="$ROOT/../shared/bench/torch_ddp_fmnist.py"
ZOO_PEER="$SCRIPT_DIR/torch_peer_zoo.py"
PEER_PY=/usr/bin/python3
OUT=""
RUN_TIMEOUT=3600
MPIRUN_EXTRA=""
KEEP=0
NO_PEER=0
DRY=0
declare -a VARIANTS=() OURS_SET=()

usage() {
    cat <<EOF
usage: $PROG [options]

For each model, each world size N and each repetition: the peer once, then ours
once per variant, all under 'mpirun --allow-run-as-root --oversubscribe -np N',
global batch $GLOBAL_BATCH, seed $SEED, E epochs. Prints one table (also OUT/results.md):
samples/s, ours' per-epoch allreduce and data-wait seconds, peak RSS per rank and
final test accuracy of each side, the ratio ours/peer, one row per model, N and variant.

options:
  -m, --models "LIST"    models (default "$MODELS"); configs/fmnist-MODEL.ini
  -w, --worlds "LIST"    world sizes (default "$WORLDS")
  -e, --epochs E         epochs per run (default $EPOCHS)
  -r, --reps R           repetitions (default $REPS); the order of the sides alternates
      --variant "K=V,..." one variant of ours: these --set overrides (repeatable;
                         default: one variant, the config as it is). Example:
                         --variant dist.grad_sync=overlap --variant dist.grad_sync=blocking
      --ours-set K=V     a --set override for every variant of ours (repeatable)
  -o, --out DIR          output directory (default \${TMPDIR:-/tmp}/ctrain-zoo-DATE)
      --bin PATH         ctrain-dist binary (default build/ctrain-dist)
      --peer-python P    interpreter with torch (default $PEER_PY)
      --mpirun-args "A"  extra mpirun arguments, for both sides (default none)
      --timeout S        kill a run after S seconds, and fail (default $RUN_TIMEOUT)
      --no-peer          ours only (the table then has no peer columns filled)
      --dry-run          print the commands, run nothing
      --keep             keep ours' run directories
  -h, --help             this text

Keys such as dist.grad_sync, data.prefetch and data.shared are passed through as
they are: a binary that does not know a key stops with its config error (the log
tail is printed). Threads per rank: ours picks them (dist.threads = auto, unless
a variant sets it); the peer gets --threads = what ours' first variant used.
Samples/s: median over all epochs but the first (when E > 1) of all repetitions.
OPENBLAS_* variables are neither set nor unset; they are printed with both cores.
EOF
}

die() { echo "$PROG: error: $*" >&2; exit 1; }
# env_list REGEX: the matching environment variables on one line, or "(none set)".
env_list() { local e; e=$(env | grep -E "$1" | sort | paste -sd' ' || true); echo "${e:-(none set)}"; }
log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*"; }

fail_run() {
    local what=$1 logf=$2 rc=$3
    echo "---- last lines of $logf ----" >&2
    tail -n 30 "$logf" >&2 || true
    echo "----" >&2
    [[ $rc -eq 124 || $rc -eq 137 ]] && die "$what timed out after ${RUN_TIMEOUT}s (log: $logf)"
    die "$what failed with exit status $rc (log: $logf)"
}

json_get() {
    python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$1" "$2"
}

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

parse_args() {
    while [[ $# -gt 0 ]]; do
        case $1 in
            -m|--models) MODELS=${2:?}; shift 2 ;;
            -w|--worlds) WORLDS=${2:?}; shift 2 ;;
            -e|--epochs) EPOCHS=${2:?}; shift 2 ;;
            -r|--reps) REPS=${2:?}; shift 2 ;;
            --variant) VARIANTS+=("${2?}"); shift 2 ;;
            --ours-set) OURS_SET+=("${2:?}"); shift 2 ;;
            -o|--out) OUT=${2:?}; shift 2 ;;
            --bin) BIN=${2:?}; shift 2 ;;
            --peer-python) PEER_PY=${2:?}; shift 2 ;;
            --mpirun-args) MPIRUN_EXTRA=${2?}; shift 2 ;;
            --timeout) RUN_TIMEOUT=${2:?}; shift 2 ;;
            --no-peer) NO_PEER=1; shift ;;
            --dry-run) DRY=1; shift ;;
            --keep) KEEP=1; shift ;;
            -h|--help) usage; exit 0 ;;
            *) usage >&2; die "unknown argument: $1" ;;
        esac
    done
    [[ $EPOCHS =~ ^[1-9][0-9]*$ ]] || die "--epochs must be a positive integer, not '$EPOCHS'"
    [[ $REPS =~ ^[1-9][0-9]*$ ]] || die "--reps must be a positive integer, not '$REPS'"
    [[ $RUN_TIMEOUT =~ ^[1-9][0-9]*$ ]] || die "--timeout must be a positive integer, not '$RUN_TIMEOUT'"
    read -r -a MODEL_LIST <<<"$MODELS"
    read -r -a WORLD_LIST <<<"$WORLDS"
    [[ ${#MODEL_LIST[@]} -gt 0 ]] || die "--models is empty"
    [[ ${#WORLD_LIST[@]} -gt 0 ]] || die "--worlds is empty"
    local x kv
    for x in "${MODEL_LIST[@]}"; do
        [[ -f $ROOT/configs/fmnist-$x.ini ]] || die "no config for model '$x': configs/fmnist-$x.ini"
    done
    for x in "${WORLD_LIST[@]}"; do
        [[ $x =~ ^[1-9][0-9]*$ ]] || die "world size '$x' is not a positive integer"
        (( GLOBAL_BATCH % x == 0 )) || die "global batch $GLOBAL_BATCH is not divisible by world size $x"
    done
    [[ ${#VARIANTS[@]} -gt 0 ]] || VARIANTS=("")
    for x in "${VARIANTS[@]}" "${OURS_SET[@]}"; do
        IFS=, read -r -a kvs <<<"$x"
        for kv in "${kvs[@]}"; do
            [[ $kv =~ ^[a-z_]+\.[a-z_0-9]+=[^,[:space:]]+$ ]] || die "not SECTION.KEY=VALUE: '$kv' (in '$x')"
        done
    done
    OUT=${OUT:-${TMPDIR:-/tmp}/ctrain-zoo-$(date +%Y%m%d-%H%M%S)}
}

peer_for() {
    case $1 in
        mlp|cnn) echo "$SHARED_PEER" ;;
        *) echo "$ZOO_PEER" ;;
    esac
}

check_prereqs() {
    local t m p
    for t in mpirun python3 timeout; do command -v "$t" >/dev/null || die "'$t' not found on PATH"; done
    [[ $DRY -eq 1 || -x $BIN ]] || die "$BIN missing; build it (see tests/bench/README.md) or pass --bin"
    [[ $NO_PEER -eq 1 || $DRY -eq 1 ]] && return 0
    [[ -x $PEER_PY ]] || die "peer interpreter not found: $PEER_PY (use --peer-python)"
    "$PEER_PY" -c 'import torch' 2>/dev/null || die "$PEER_PY cannot import torch (Debian: apt-get install python3-torch)"
    for m in "${MODEL_LIST[@]}"; do
        p=$(peer_for "$m")
        [[ -f $p ]] || die "peer script not found: $p"
        "$PEER_PY" "$p" --help | grep -q -- "--model {[^}]*\b$m\b" || die "$p has no --model $m"
    done
}

mpi() {
    local n=$1
    shift
    # MPIRUN_EXTRA is split on whitespace on purpose.
    # shellcheck disable=SC2086
    timeout -k 30 "$RUN_TIMEOUT" mpirun --allow-run-as-root --oversubscribe -np "$n" $MPIRUN_EXTRA "$@"
}

# run_ours MODEL N VARIANT_INDEX REP
run_ours() {
    local m=$1 n=$2 v=$3 rep=$4 tag="ours-$1-N$2-v$3-r$4"
    local run_dir="$TMP/$tag" logf="$OUT/logs/$tag.log" rc=0 kv
    local -a sets=(--set "train.epochs=$EPOCHS" --set "train.global_batch=$GLOBAL_BATCH" --set "train.seed=$SEED")
    for kv in "${OURS_SET[@]}"; do sets+=(--set "$kv"); done
    if [[ -n ${VARIANTS[$v]} ]]; then
        IFS=, read -r -a kvs <<<"${VARIANTS[$v]}"
        for kv in "${kvs[@]}"; do sets+=(--set "$kv"); done
    fi
    local -a cmd=("$BIN" --config "$ROOT/configs/fmnist-$m.ini" --run-dir "$run_dir" "${sets[@]}")
    if [[ $DRY -eq 1 ]]; then
        echo "mpirun --allow-run-as-root --oversubscribe -np $n $MPIRUN_EXTRA ${cmd[*]}"
        OURS_THREADS[$m.$n]=1
        return 0
    fi
    log "$tag: ctrain-dist ${VARIANTS[$v]:-(config as is)}"
    mpi "$n" "${cmd[@]}" >"$logf" 2>&1 || rc=$?
    [[ $rc -eq 0 ]] || fail_run "$tag" "$logf" "$rc"
    [[ -s $run_dir/metrics.jsonl && -s $run_dir/run.json ]] || fail_run "$tag (no metrics.jsonl/run.json)" "$logf" 1
    local lines
    lines=$(grep -c . "$run_dir/metrics.jsonl")
    [[ $lines -eq $EPOCHS ]] || fail_run "$tag ($lines epoch line(s) in metrics.jsonl, $EPOCHS expected)" "$logf" 1
    mkdir -p "$OUT/raw/$tag"
    cp "$run_dir/metrics.jsonl" "$run_dir/run.json" "$run_dir/config.ini" "$OUT/raw/$tag/"
    printf '%s\n' "${VARIANTS[$v]}" >"$OUT/raw/$tag/variant.txt"
    [[ -n ${OURS_THREADS[$m.$n]:-} ]] || OURS_THREADS[$m.$n]=$(json_get "$run_dir/run.json" 'd["blas_threads"]')
    log "$tag: done; $(tail -n 1 "$logf")"
}

# run_peer MODEL N REP THREADS
run_peer() {
    local m=$1 n=$2 rep=$3 threads=$4 tag="peer-$1-N$2-r$3" peer
    peer=$(peer_for "$m")
    local json="$OUT/raw/$tag.json" logf="$OUT/logs/$tag.log" rc=0
    local -a cmd=("$PEER_PY" "$peer" --model "$m" --world "$n" --threads "$threads" --epochs "$EPOCHS"
                  --seed "$SEED" --global-batch "$GLOBAL_BATCH" --port "$(free_port)" --json-out "$json")
    if [[ $DRY -eq 1 ]]; then
        echo "mpirun --allow-run-as-root --oversubscribe -np $n $MPIRUN_EXTRA ${cmd[*]}"
        return 0
    fi
    log "$tag: torch DDP ($(basename "$peer")), $n rank(s) x $threads thread(s)"
    mpi "$n" "${cmd[@]}" >"$logf" 2>&1 || rc=$?
    [[ $rc -eq 0 ]] || fail_run "$tag" "$logf" "$rc"
    [[ -s $json ]] || fail_run "$tag (no --json-out file)" "$logf" 1
    [[ $(json_get "$json" 'len(d["epochs"])') -eq $EPOCHS ]] || fail_run "$tag (wrong epoch count in $json)" "$logf" 1
    [[ $(json_get "$json" 'd["ranks_agree"]') == True ]] || fail_run "$tag (peer ranks ended with different parameters)" "$logf" 1
    PEER_TORCH=$(json_get "$json" 'd["torch"]')
    log "$tag: done; $(grep '^epoch' "$logf" | tail -n 1)"
}

write_header() {
    local rev v
    rev=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo "?")
    [[ -z $(git -C "$ROOT" status --porcelain --untracked-files=no 2>/dev/null) ]] || rev="$rev (working tree modified)"
    {
        echo "# ctrain-dist vs PyTorch DDP: ${MODEL_LIST[*]}"
        echo
        echo "- date: $(date -u '+%Y-%m-%d %H:%M UTC')"
        echo "- host: $(hostname), $(nproc) CPUs, lscpu model name: $(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -n 1)"
        echo "- load average (1/5/15 min) before: $LOAD_BEFORE; after: $(cut -d' ' -f1-3 /proc/loadavg)"
        echo "- ctrain-dist: git $rev; \`$(head -n 1 <<<"$VERSION_TEXT")\`; binary $BIN"
        echo "- peers: torch_ddp_fmnist.py (mlp, cnn), torch_peer_zoo.py (resnet, vit); torch ${PEER_TORCH:-n/a}, $PEER_PY"
        echo "- recipe: global batch $GLOBAL_BATCH, seed $SEED, $EPOCHS epoch(s), $REPS repetition(s), N: ${WORLD_LIST[*]}"
        echo "- launcher (both): \`mpirun --allow-run-as-root --oversubscribe -np N${MPIRUN_EXTRA:+ $MPIRUN_EXTRA}\`"
        echo "- ours, every variant: ${OURS_SET[*]:-(nothing added)}"
        for v in "${!VARIANTS[@]}"; do echo "- variant v$v: ${VARIANTS[$v]:-(config as is)}"; done
        echo "- \`env | grep OPENBLAS\`: $(env_list OPENBLAS)"
        echo "- other BLAS/OpenMP variables: $(env_list '^(CT_[A-Z_]*|OMP_[A-Z_]*|GOTO_[A-Z_]*)=')"
    } >"$OUT/header.md"
}

main() {
    parse_args "$@"
    check_prereqs
    declare -gA OURS_THREADS=()
    PEER_TORCH=""
    if [[ $DRY -eq 0 ]]; then
        mkdir -p "$OUT/raw" "$OUT/logs"
        TMP=$(mktemp -d "${TMPDIR:-/tmp}/ctrain-zoo-runs.XXXXXX")
        if [[ $KEEP -eq 1 ]]; then trap 'echo "run dirs kept in $TMP" >&2' EXIT; else trap 'rm -rf "$TMP"' EXIT; fi
        VERSION_TEXT=$("$BIN" --version) || die "$BIN --version failed"
        LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
        log "output: $OUT"
        echo "$VERSION_TEXT" | head -n 1
        echo "lscpu: $(lscpu | sed -n 's/^Model name: *//p' | head -n 1); env | grep OPENBLAS: $(env_list OPENBLAS)"
    else
        TMP=/tmp/ctrain-zoo-dry
    fi
    local m n rep v
    for m in "${MODEL_LIST[@]}"; do
        for ((rep = 1; rep <= REPS; rep++)); do
            for n in "${WORLD_LIST[@]}"; do
                # The peer needs ours' thread count: ours goes first the first
                # time for each (model, N), then the order alternates.
                if [[ $NO_PEER -eq 1 ]]; then
                    for v in "${!VARIANTS[@]}"; do run_ours "$m" "$n" "$v" "$rep"; done
                elif [[ -z ${OURS_THREADS[$m.$n]:-} || $((rep % 2)) -eq 1 ]]; then
                    for v in "${!VARIANTS[@]}"; do run_ours "$m" "$n" "$v" "$rep"; done
                    run_peer "$m" "$n" "$rep" "${OURS_THREADS[$m.$n]}"
                else
                    run_peer "$m" "$n" "$rep" "${OURS_THREADS[$m.$n]}"
                    for v in "${!VARIANTS[@]}"; do run_ours "$m" "$n" "$v" "$rep"; done
                fi
            done
        done
    done
    [[ $DRY -eq 0 ]] || return 0
    write_header
    summarize "$OUT" "$EPOCHS" || die "summary failed"
    log "table written to $OUT/results.md (raw results in $OUT/raw, logs in $OUT/logs)"
}

# summarize OUT EPOCHS: the table, from OUT/raw (rerun by hand: source nothing, just
# call this script's Python block: see README).
summarize() {
    python3 - "$1" "$2" <<'PY'
import glob, json, os, re, statistics, sys
out, epochs = sys.argv[1], int(sys.argv[2])
raw = os.path.join(out, "raw")

def steady(v):
    return v[1:] if len(v) > 1 else v

def metric(e, *names):
    # metrics.jsonl keys changed during the step rewrite (allreduce_s/data_s, then
    # per-rank lists exposed_comm_s/data_wait_s with *_max): the first present, max over ranks.
    for k in names:
        if k in e:
            return max(e[k]) if isinstance(e[k], list) else e[k]
    return None

def med(v):
    return statistics.median(v) if v else None

ours, peer = {}, {}
for d in sorted(glob.glob(os.path.join(raw, "ours-*-N*-v*-r*"))):
    m = re.fullmatch(r"ours-([a-z]+)-N(\d+)-v(\d+)-r(\d+)", os.path.basename(d))
    if not m:
        continue
    with open(os.path.join(d, "metrics.jsonl")) as f:
        ep = [json.loads(x) for x in f if x.strip()]
    with open(os.path.join(d, "run.json")) as f:
        run = json.load(f)
    with open(os.path.join(d, "variant.txt")) as f:
        variant = f.read().strip()
    ours.setdefault((m[1], int(m[2]), int(m[3])), []).append(dict(ep=ep, run=run, variant=variant))
for p in sorted(glob.glob(os.path.join(raw, "peer-*-N*-r*.json"))):
    m = re.fullmatch(r"peer-([a-z]+)-N(\d+)-r(\d+)\.json", os.path.basename(p))
    if m:
        with open(p) as f:
            peer.setdefault((m[1], int(m[2])), []).append(json.load(f))
if not ours:
    sys.exit(f"no runs of ours under {raw}")

head = ["model", "N", "thr/rank", "variant", "ours samples/s", "peer samples/s", "ours/peer",
        "ours comm s/epoch", "ours data wait s/epoch", "ours RSS MiB", "peer RSS MiB", "ours test_acc", "peer test_acc"]
rows = []
def fmt(x, f="{:,.0f}"):
    return "n/a" if x is None else f.format(x)
for (model, n, v) in sorted(ours, key=lambda k: (["mlp", "cnn", "resnet", "vit"].index(k[0])
                                                  if k[0] in ("mlp", "cnn", "resnet", "vit") else 9, k[1], k[2])):
    rs = ours[(model, n, v)]
    for r in rs:
        if len(r["ep"]) != epochs:
            sys.exit(f"{model} N={n} v{v}: {len(r['ep'])} epochs recorded, {epochs} expected")
    o_sps = med([e["samples_per_s"] for r in rs for e in steady(r["ep"])])
    o_ar = med([x for r in rs for e in steady(r["ep"]) for x in [metric(e, "exposed_comm_s_max", "allreduce_s")] if x is not None])
    o_data = med([x for r in rs for e in steady(r["ep"]) for x in [metric(e, "data_wait_s_max", "data_s")] if x is not None])
    o_rss = max(e["peak_rss_mib"] for r in rs for e in r["ep"])
    o_acc = sorted({r["ep"][-1]["test_acc"] for r in rs})
    ps = peer.get((model, n), [])
    p_sps = med([e["samples_per_s"] for s in ps for e in steady(s["epochs"])])
    p_rss = max((max(s["peak_rss_mib"]) for s in ps), default=None)
    p_acc = sorted({s["epochs"][-1]["test_acc"] for s in ps})
    thr = sorted({r["run"].get("blas_threads") for r in rs} | {s.get("threads") for s in ps})
    acc = lambda a: "n/a" if not a else (f"{a[0]:.4f}" if len(a) == 1 else f"{a[0]:.4f}-{a[-1]:.4f}")
    rows.append([model, str(n), "/".join(str(t) for t in thr), f"v{v}: {rs[0]['variant'] or '(config)'}",
                 fmt(o_sps), fmt(p_sps), fmt(o_sps / p_sps if p_sps else None, "{:.2f}"),
                 fmt(o_ar, "{:.3f}"), fmt(o_data, "{:.3f}"), fmt(o_rss), fmt(p_rss), acc(o_acc), acc(p_acc)])
table = "\n".join(["| " + " | ".join(head) + " |", "|" + "---|" * len(head)] + ["| " + " | ".join(r) + " |" for r in rows])
reps = max(len(v) for v in ours.values())
legend = (f"samples/s: global, median over {reps} repetition(s) x "
          f"{'epochs 2..' + str(epochs) if epochs > 1 else 'epoch 1'}; both sides time the training loop only. "
          "comm / data wait s/epoch: ours' metrics.jsonl exposed_comm_s_max (older binaries: allreduce_s) and "
          "data_wait_s_max (data_s), slowest rank, n/a if not reported. "
          "RSS: ru_maxrss, max over ranks and repetitions. test_acc: after the last epoch.")
print(table + "\n\n" + legend)
hp = os.path.join(out, "header.md")
header = open(hp).read().rstrip() + "\n\n" if os.path.exists(hp) else ""
with open(os.path.join(out, "results.md"), "w") as f:
    f.write(header + table + "\n\n" + legend + "\n")
PY
}

if [[ ${1:-} == --summarize-only ]]; then
    [[ $# -eq 3 ]] || die "usage: $PROG --summarize-only OUT EPOCHS"
    summarize "$2" "$3"
    exit 0
fi
main "$@"
