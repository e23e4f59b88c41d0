#!/usr/bin/env bash
# ctrain-dist export: a trained mlp and cnn (with BatchNorm running
# statistics) exported as npz and safetensors, loaded by PyTorch into the
# twin model (tests/e2e/torch_load_export.py: strict names, every shape), give
# the test accuracy and loss that `ctrain-dist eval` reports for the same
# checkpoint; bad command lines and bad checkpoints are clear errors that
# leave no file behind.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
TORCH_PY=${CT_TORCH_PYTHON:-/usr/bin/python3}
LOADER=$CT_SOURCE_DIR/tests/e2e/torch_load_export.py
"$TORCH_PY" -c 'import torch, numpy' || { fail "$TORCH_PY cannot import torch and numpy (Debian: python3-torch)"; finish; }

for model in mlp cnn; do
  run=$WORK/$model
  if ! run_np 2 "$WORK/train-$model" --config "$CT_SOURCE_DIR/configs/fmnist-$model.ini" --run-dir "$run" \
       --set train.max_steps=40 --set train.eval_every=1000; then
    fail "$model: training"; cat "$WORK/train-$model.log"; continue
  fi
  ck=$run/ckpt-40
  run_np 1 "$WORK/eval-$model" eval --checkpoint "$ck" || { fail "$model: eval"; cat "$WORK/eval-$model.log"; continue; }
  read -r acc loss < <(sed -n 's/.*test_loss \([0-9.]*\) test_acc \([0-9.]*\).*/\2 \1/p' "$WORK/eval-$model.log")
  for fmt in npz safetensors; do
    out=$WORK/$model.$fmt
    if ! run_np 2 "$WORK/export-$model-$fmt" export "$ck" --format "$fmt" -o "$out"; then
      fail "$model $fmt: export"; cat "$WORK/export-$model-$fmt.log"; continue
    fi
    got=$("$TORCH_PY" "$LOADER" "$out" "$DATA" 2>&1) || { fail "$model $fmt: PyTorch could not load it: $got"; continue; }
    read -r _ tacc _ tloss <<<"$got"
    if awk -v a="$acc" -v b="$tacc" -v l="$loss" -v m="$tloss" \
         'BEGIN { d = a - b; e = (l - m) / l; exit !(d <= 0.001 && d >= -0.001 && e <= 1e-4 && e >= -1e-4) }'; then
      pass "$model $fmt: PyTorch test_acc $tacc loss $tloss, ctrain-dist eval $acc $loss"
    else
      fail "$model $fmt: PyTorch test_acc $tacc loss $tloss, ctrain-dist eval $acc $loss"
    fi
  done
done

# expect_error NP STATUS PATTERN OUT ARGS...: fails on every rank with STATUS,
# says PATTERN, and leaves no OUT.
expect_error() {
  local np=$1 want=$2 pat=$3 out=$4 log=$WORK/err$RANDOM
  shift 4
  if run_np "$np" "$log" "$@"; then fail "$*: succeeded"; return; fi
  if every_rank_exited "$np" "$log" "$want" && grep -Eq -- "$pat" "$log.log" && [ ! -e "$out" ]; then
    pass "$* -> $want: $(grep -E -m1 -- "$pat" "$log.log" | cut -c1-140)"
  else
    fail "$*: want status $want, /$pat/ and no $out"; cat "$log.log"
  fi
}
ck=$WORK/mlp/ckpt-40
expect_error 1 2 "export needs --format npz\|safetensors and -o FILE" "$WORK/x.npz" export "$ck" -o "$WORK/x.npz"
expect_error 2 2 "--format 'zip': expected npz or safetensors" "$WORK/x.npz" export "$ck" --format zip -o "$WORK/x.npz"
expect_error 1 2 "--format and -o belong to the export command" "$WORK/x.npz" eval --checkpoint "$ck" -o "$WORK/x.npz"
expect_error 2 1 "$WORK/nothing/manifest.pb: no manifest \(not a committed checkpoint\)" "$WORK/x.npz" export "$WORK/nothing" --format npz -o "$WORK/x.npz"
expect_error 1 1 "$WORK/no/such/dir/x.npz" "$WORK/no/such/dir/x.npz" export "$ck" --format npz -o "$WORK/no/such/dir/x.npz"
# A corrupted checkpoint is refused before anything is written.
bad=$WORK/bad-ckpt
cp -r "$ck" "$bad"
printf '\xff' | dd of="$bad/data.bin" bs=1 seek=100 conv=notrunc status=none
expect_error 2 1 "bad-ckpt.*(sha256|digest)" "$WORK/bad.npz" export "$bad" --format npz -o "$WORK/bad.npz"
finish
