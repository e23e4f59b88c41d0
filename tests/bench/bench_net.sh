#!/bin/bash
# bench_net.sh: gradient traffic on the test cluster (tests/net/lib.sh), by
# hand, as root, never in CI. For each cell (model x network x
# dist.grad_compress x dist.shard_optimizer x dist.allreduce) it runs a
# short training REPS times and prints one TSV line per run and, at the end,
# the median of each cell:
#   samples/s          metrics.jsonl's samples_per_s
#   exposed_ms         exposed communication per step: the smaller of the two
#                      ranks' exposed_comm_s / steps (the rank that arrives
#                      last waits only for the transfer; the other also waits
#                      for it, i.e. for the ranks' skew)
#   share              exposed_ms / (epoch_s / steps)
#   wire_B             bytes through h1's eth0 per step (rx + tx, net_bytes)
#   line_ms            the time one direction of the link needs for its half:
#                      wire_B / 2 / rate (a full-duplex link: both directions at once)
#   ratio              exposed_ms / line_ms (issue 33's target: <= 1.15 at 1 Gbit/s)
# Networks: host1 (both ranks on h0: shared memory), open (2 hosts, links
# unshaped), 10gbit, 1gbit (net_rate). dist.threads = 1: the two "hosts"
# share this machine's cores, and 2 BLAS threads per rank oversubscribe them.
#
#   sudo CT_SOURCE_DIR=$PWD tests/bench/bench_net.sh                 # the whole matrix
#   MODELS=mlp NETS=1gbit ALLREDUCE="mpi ring" REPS=3 STEPS=200 tests/bench/bench_net.sh
set -u
CT_SOURCE_DIR=${CT_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
export CT_SOURCE_DIR
source "$CT_SOURCE_DIR/tests/net/lib.sh"
set +e
MODELS=${MODELS:-mlp gpt}
NETS=${NETS:-host1 open 10gbit 1gbit}
COMPRESS=${COMPRESS:-none bf16}
SHARD=${SHARD:-false true}
ALLREDUCE=${ALLREDUCE:-auto}
REPS=${REPS:-3}
STEPS=${STEPS:-200}
OUT=${OUT:-/tmp/bench_net.tsv}

net_up 2
{
  echo "# $(date -u +%FT%TZ) $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cpus," \
       "bf16 flags: $(grep -o 'avx512_bf16\|amx_bf16' /proc/cpuinfo | sort -u | tr '\n' ' ')," \
       "$(env | grep '^OPENBLAS_' | tr '\n' ' ')"
  printf 'model\tnet\tcompress\tshard\tallreduce\trep\tsamples_s\texposed_ms\tshare\twire_B\tline_ms\tratio\tload1\n'
} | tee "$OUT"

rate_bytes() { case $1 in 1gbit) echo 125000000 ;; 10gbit) echo 1250000000 ;; *) echo 0 ;; esac; }

for model in $MODELS; do
  cfg=$CT_SOURCE_DIR/configs/fmnist-mlp.ini data=()
  # The ranks' working directory is not the source tree (rsh): an absolute data.dir.
  [ "$model" = gpt ] && cfg=$CT_SOURCE_DIR/configs/moby-gpt.ini data=(--set "data.dir=$CT_SOURCE_DIR/data/moby-dick")
  for net in $NETS; do
    hosts=h0:1,h1:1
    case $net in host1) hosts=h0:2; net_rate off ;; open) net_rate off ;; *) net_rate "$net" ;; esac
    for comp in $COMPRESS; do for shard in $SHARD; do for ar in $ALLREDUCE; do
      for ((rep = 1; rep <= REPS; rep++)); do
        b0=$(net_bytes h1)
        (cd "$CT_SOURCE_DIR" && net_mpirun "$hosts" 2 "$CT_BINARY" --config "$cfg" --run-dir "$WORK/run" \
          --set train.max_steps="$STEPS" --set log.every_steps=0 --set dist.threads=1 \
          --set dist.grad_compress="$comp" --set dist.shard_optimizer="$shard" \
          --set dist.allreduce="$ar" --set checkpoint.every_epochs=0 "${data[@]}") >"$WORK/log" 2>&1 ||
          { echo "# failed: $model $net $comp $shard $ar"; tail -3 "$WORK/log"; continue; }
        b1=$(net_bytes h1)
        python3 - "$WORK/run/metrics.jsonl" "$STEPS" $((b1 - b0)) "$(rate_bytes "$net")" \
          "$model" "$net" "$comp" "$shard" "$ar" "$rep" "$(cut -d' ' -f1 /proc/loadavg)" <<'PY' | tee -a "$OUT"
import json, sys
m = [json.loads(l) for l in open(sys.argv[1])][-1]
steps, wire, rate = int(sys.argv[2]), int(sys.argv[3]) / int(sys.argv[2]), int(sys.argv[4])
ex = min(m["exposed_comm_s"]) / steps * 1e3
step_ms = m["epoch_s"] / steps * 1e3
line = wire / 2 / rate * 1e3 if rate else float("nan")
print("\t".join(sys.argv[5:11] + [f"{m['samples_per_s']:.0f}", f"{ex:.2f}", f"{ex / step_ms:.2f}",
                                   f"{wire:.0f}", f"{line:.2f}", f"{ex / line:.2f}" if rate else "-",
                                   sys.argv[11]]))
PY
      done
    done; done; done
  done
done
echo "# medians of $REPS"
python3 - "$OUT" <<'PY'
import sys, statistics as st
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if not l.startswith(("#", "model"))]
cells = {}
for r in rows:
    cells.setdefault(tuple(r[:5]), []).append(r)
print("| model | network | compress | shard | allreduce | samples/s | exposed ms/step | exposed share | wire B/step | line ms | exposed/line |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
for k, rs in cells.items():
    med = lambda i: st.median(float(r[i]) for r in rs) if rs[0][i] not in ("-", "nan") else None
    f = lambda v, d: "-" if v is None else f"{v:.{d}f}"
    print(f"| {' | '.join(k)} | {f(med(6),0)} | {f(med(7),2)} | {f(med(8),2)} | {f(med(9),0)} | {f(med(10),2)} | {f(med(11),2)} |")
PY
