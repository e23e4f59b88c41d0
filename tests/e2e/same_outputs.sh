#!/usr/bin/env bash
# By hand (not a ctest test): run two ctrain-dist binaries over one set of
# command lines and show where their stdout, stderr, exit status and files
# differ, once the values that differ between any two runs are masked
# (timings, rates, memory, dates, job ids, the code version). A checkpoint's
# manifest records its date and the code version, so its digest, and every
# digest chained to it, differ between any two runs: digests are masked, the
# manifests are compared through `inspect`'s output, and data.bin (the
# tensors and rank records) byte for byte.
#
#   tests/e2e/same_outputs.sh OLD_BINARY NEW_BINARY [OUT_DIR]
#
# A restructuring that must not change behaviour (issue 32) is shown by an
# empty diff. Each binary runs in its own directory (OUT_DIR/old, OUT_DIR/new)
# with the same relative paths, so the paths in messages read the same.
# Needs data/moby-dick (launch/get-data.sh moby-dick) for the gpt lines.
set -uo pipefail
old=$(readlink -f "$1") new=$(readlink -f "$2")
src=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
out=${3:-$(mktemp -d /tmp/ct-same-XXXXXX)}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
mpi=(mpirun --oversubscribe --bind-to none)
fm=/usr/share/datasets/fashion-mnist
moby=$src/data/moby-dick
# One deterministic mlp run of 30 steps with checkpoints every 10, the base of
# most lines below.
mlp=(--config "$src/configs/fmnist-mlp.ini" --set train.epochs=1 --set train.max_steps=30
     --set checkpoint.every_steps=10 --set log.every_steps=5 --set train.deterministic=true
     --set train.micro_batch=64)
gpt=(--config "$src/configs/moby-gpt.ini" --set data.dir="$moby" --set train.max_steps=4
     --set train.epochs=1 --set log.every_steps=1 --set model.depth=1 --set model.width=32
     --set model.heads=2 --set model.block=16 --set train.global_batch=4)

# case NAME RANKS ARGS...: RANKS 0 = no mpirun
lines() {
  echo "help 0 --help"; echo "version 0 --version"
  for c in train eval predict generate inspect export config audit data summary report; do
    echo "help-$c 0 $c --help"
  done
  echo "nocmd 0 trian --config x"
  echo "noopt 0 --config $src/configs/fmnist-mlp.ini --frobnicate"
  echo "noconfig 0 --run-dir x"
  echo "wrongcmd-opt 0 eval --checkpoint x --labels y"
  echo "badset 0 --config $src/configs/fmnist-mlp.ini --set train.epochs=zero"
  echo "config-list 0 config --list"
  echo "config-tsv 0 config --list --tsv"
  for c in "$src"/configs/*.ini; do echo "config-check-$(basename "$c" .ini) 0 config --check $c"; done
  echo "data-noarg 0 data"
  echo "data-badsub 0 data frob x"
  echo "data-inspect 0 data inspect $fm/train-images-idx3-ubyte.gz"
  echo "data-inspect-labels 0 data inspect $fm/t10k-labels-idx1-ubyte.gz"
  echo "data-inspect-tokens 0 data inspect $moby/val.bin --window 129"
  echo "data-inspect-badwin 0 data inspect $moby/val.bin --window x"
  echo "data-stats 0 data stats $fm/t10k-images-idx3-ubyte.gz $fm/t10k-labels-idx1-ubyte.gz"
  echo "data-stats-tokens 0 data stats $moby/val.bin --window 129 --vocab 256"
  echo "data-stats-badvocab 0 data stats $moby/val.bin --vocab 10"
  echo "data-tok 0 data tokenize --bytes /usr/share/common-licenses/GPL-3 /usr/share/common-licenses/Apache-2.0 -o tok.bin"
  echo "data-tok-noout 0 data tokenize --bytes /usr/share/common-licenses/GPL-3"
  echo "data-tok-nobytes 0 data tokenize /usr/share/common-licenses/GPL-3 -o x.bin"
  echo "train 2 ${mlp[*]} --run-dir run"
  echo "train-exists 2 ${mlp[*]} --run-dir run"
  echo "resume 2 ${mlp[*]} --set train.max_steps=40 --run-dir run --resume auto"
  echo "train-1 1 ${mlp[*]} --set train.max_steps=20 --run-dir run1"
  echo "seeds 1 ${mlp[*]} --set train.max_steps=10 --run-dir seeds --seeds 1,2"
  echo "gpt 2 ${gpt[*]} --run-dir gpt"
}
# The commands that read what training wrote: both binaries read the same
# files (those the old binary's training wrote, copied for each side), so
# their outputs must agree byte for byte, measured values included.
readers() {
  echo "inspect 0 inspect run/ckpt-30"
  echo "inspect-none 0 inspect run/ckpt-99"
  echo "eval 1 eval --checkpoint run/ckpt-30"
  echo "eval-2 2 eval --checkpoint run/ckpt-40"
  echo "predict 1 predict --checkpoint run/ckpt-30 -o pred.csv"
  echo "export-npz 0 export run/ckpt-30 --format npz -o w.npz"
  echo "export-st 0 export run/ckpt-30 --format safetensors -o w.safetensors"
  echo "export-bad 0 export run/ckpt-30 --format pt -o w.pt"
  echo "verify 0 audit verify run"
  echo "verify-none 0 audit verify nope"
  echo "audit-noarg 0 audit"
  echo "audit-badsub 0 audit frob run"
  echo "diff 0 audit diff run/ckpt-20 run/ckpt-30"
  echo "replay 2 audit replay run/ckpt-20 run/ckpt-30 --out replay"
  echo "summary 0 summary seeds/seed-1 seeds/seed-2"
  echo "summary-none 0 summary"
  echo "summary-bad 0 summary nope"
  echo "report 0 report seeds/seed-1 seeds/seed-2 run -o report.html"
  echo "report-csv 0 report seeds/seed-1 seeds/seed-2 run --format csv -o report.csv"
  echo "generate 1 generate --checkpoint gpt/ckpt-4 --prompt Call -n 20 --seed 1"
  echo "generate-mlp 1 generate --checkpoint run/ckpt-30"
}

# Mask what differs between any two runs: durations, rates, memory, dates,
# the code version, MPI's job ids, the temporary checkpoint ids.
mask() {
  sed -E \
    -e 's/"(git|date|time|started|ended|start_time|end_time|code_version)": "[^"]*"/"\1": "X"/g' \
    -e 's/"([a-z_]*(_s|_s_max|per_s|_mib|gflops|mfu|_bytes_per_s))": (\[[^]]*\]|[-0-9.e+null]+)/"\1": T/g' \
    -e 's/"(achieved_gflops|peak_gflops|mfu|samples_per_s|tokens_per_s)": (\[[^]]*\]|[-0-9.e+null]+)/"\1": T/g' \
    -e 's/"(slowest_rank)": [0-9]+/"\1": T/g' \
    -e 's/\(([0-9a-f]{7,})(-dirty)?\)/(GIT)/g' \
    -e 's/[0-9][0-9,]*(\.[0-9]+)? (samples|tokens)\/s/N \2\/s/g' \
    -e 's/mfu [0-9.]+/mfu N/g; s/in [0-9.]+ s/in N s/g; s/[0-9.]+ s of/N s of/g' \
    -e 's/ETA [0-9:]+ epoch, [0-9:]+ run/ETA/g; s/rss [0-9]+ MiB pss [0-9]+ MiB/rss N/g' \
    -e 's/  [0-9.]+ s  /  N s  /g; s/peak [0-9.]+ GFLOP/peak N GFLOP/g' \
    -e 's/\[\[[0-9]+,[0-9]+\],[0-9]+\]/[[JOB]]/g; s/\.tmp-[A-Za-z0-9]+/.tmp-ID/g' \
    -e 's/[0-9]{4}-[0-9]{2}-[0-9]{2}[T ][0-9:.]+( UTC|Z)?/DATE/g; s/previous-[0-9]{8}T[0-9]{6}Z/previous-X/g' \
    -e 's/\b[0-9a-f]{16}([0-9a-f]{48})?\b/HEX/g'
}

run_lines() { # DIR BINARY < LINES
  local d=$1 bin=$2 name ranks args rc
  while read -r name ranks args; do
    # shellcheck disable=SC2086
    if [ "$ranks" = 0 ]; then
      (cd "$d" && timeout 300 "$bin" $args >"$name.out" 2>"$name.err" </dev/null); rc=$?
    else
      (cd "$d" && timeout 300 "${mpi[@]}" -np "$ranks" "$bin" $args >"$name.out" 2>"$name.err" </dev/null); rc=$?
    fi
    echo "$rc" >"$d/$name.rc"
  done
  # The binary's own path shows in usage lines and mpirun's messages.
  find "$d" -maxdepth 1 -type f \( -name '*.out' -o -name '*.err' \) -exec sed -i "s|$bin|BINARY|g" {} +
  for p in "$d"/*/previous-2*; do [ -e "$p" ] && mv "$p" "$(dirname "$p")/previous-X"; done
}

run_side() { # SIDE BINARY
  rm -rf "${out:?}/$1"; mkdir -p "$out/$1"
  run_lines "$out/$1" "$2" < <(lines)
}
run_side old "$old"
run_side new "$new"
for side in old new; do
  d=$out/$side/readers
  mkdir -p "$d"
  (cd "$out/old" && cp -a run run1 seeds gpt "$d/")
  run_lines "$d" "$(eval echo "\$$side")" < <(readers)
done

# Compare every file both sides wrote, masked; binary files byte for byte.
n_same=0 n_diff=0
while IFS= read -r f; do
  a=$out/old/$f b=$out/new/$f
  if [ ! -e "$b" ]; then echo "only old: $f"; n_diff=$((n_diff + 1)); continue; fi
  if [[ $f == ./readers/* ]]; then # the same inputs: the same bytes
    if cmp -s "$a" "$b"; then n_same=$((n_same + 1))
    elif diff <(mask <"$a") <(mask <"$b") >/dev/null; then # a replay's own timings and date
      echo "masked: $f"; n_same=$((n_same + 1))
    else echo "== $f"; diff "$a" "$b" | head -20; n_diff=$((n_diff + 1)); fi
  elif grep -Iq . "$a" 2>/dev/null || [ ! -s "$a" ]; then
    if diff <(mask <"$a") <(mask <"$b") >"$out/diff.tmp"; then n_same=$((n_same + 1))
    else echo "== $f"; head -20 "$out/diff.tmp"; n_diff=$((n_diff + 1)); fi
  elif cmp -s "$a" "$b"; then n_same=$((n_same + 1))
  else echo "== $f (binary) differs"; n_diff=$((n_diff + 1)); fi
done < <(cd "$out/old" && find . -type f ! -path './*/heartbeat/*' ! -name 'manifest.*' | sort)
(cd "$out/new" && find . -type f ! -path './*/heartbeat/*' ! -name 'manifest.*' | sort) | while IFS= read -r f; do
  [ -e "$out/old/$f" ] || echo "only new: $f"
done
rm -f "$out/diff.tmp"
echo "same_outputs: $n_same files the same, $n_diff different ($(( $(lines | wc -l) + $(readers | wc -l) )) command lines; $out)"
[ "$n_diff" -eq 0 ]
