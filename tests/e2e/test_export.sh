#!/usr/bin/env bash
# ctrain-dist export and predict. export: a trained mlp and cnn (with BatchNorm running
# statistics) exported as npz and safetensors, loaded by PyTorch into the
# twin model (tests/e2e/torch_load_export.py: strict names, every shape), give
# the test accuracy and loss that `ctrain-dist eval` reports for the same
# checkpoint; bad command lines and bad checkpoints are clear errors that
# leave no file behind. predict: the CSV agrees with eval's accuracy and
# confusion matrix; predict, eval and export give the same bytes at 1 rank x
# 1 thread, 1 x 2 and 2 x 1; and --data/--labels predict
# another IDX pair (the first 100 test samples: the same rows).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
TORCH_PY=${CT_TORCH_PYTHON:-/usr/bin/python3}
LOADER=$CT_SOURCE_DIR/tests/e2e/torch_load_export.py
"$TORCH_PY" -c 'import torch, numpy' || { fail "$TORCH_PY cannot import torch and numpy (Debian: python3-torch)"; finish; }

# Every export first, then one PyTorch process loads them all (its import
# alone takes seconds).
exports=()
declare -A eval_of
for model in mlp cnn; do
  run=$WORK/$model
  # The cnn small (channels 4, 8; hidden 16): the same modules, names and
  # BatchNorm buffers at a tenth of the cost (PyTorch's evaluation of the
  # full one on one thread took most of this test's time).
  size=()
  [ $model = mlp ] || size=(--set model.channels=4,8 --set model.hidden=16)
  if ! run_np 2 "$WORK/train-$model" --config "$CONFIGS/fmnist-$model.ini" --run-dir "$run" \
       --set train.max_steps=40 --set train.eval_every=1000 "${size[@]}"; then
    fail "$model: training"; cat "$WORK/train-$model.log"; continue
  fi
  ck=$run/ckpt-40
  run_np 1 "$WORK/eval-$model" eval --checkpoint "$ck" || { fail "$model: eval"; cat "$WORK/eval-$model.log"; continue; }
  eval_of[$model]=$(sed -n 's/.*test_loss \([0-9.]*\) test_acc \([0-9.]*\).*/\2 \1/p' "$WORK/eval-$model.log")
  for fmt in npz safetensors; do
    out=$WORK/$model.$fmt
    if run_np 2 "$WORK/export-$model-$fmt" export "$ck" --format "$fmt" -o "$out"; then
      exports+=("$out")
    else
      fail "$model $fmt: export"; cat "$WORK/export-$model-$fmt.log"
    fi
  done
done
if [ ${#exports[@]} -gt 0 ] && ! "$TORCH_PY" "$LOADER" "${exports[@]}" "$RAW_DATA" > "$WORK/torch.out" 2>&1; then
  fail "PyTorch could not load every export: $(cat "$WORK/torch.out")"
fi
for out in "${exports[@]}"; do
  name=${out##*/}
  model=${name%.*} fmt=${name##*.}
  read -r acc loss <<<"${eval_of[$model]}"
  if ! read -r _ _ tacc _ tloss < <(grep -F "$out " "$WORK/torch.out"); then
    fail "$model $fmt: PyTorch printed nothing for it"; continue
  fi
  if awk -v a="$acc" -v b="$tacc" -v l="$loss" -v m="$tloss" \
       'BEGIN { d = a - b; e = (l - m) / l; exit !(d <= 0.001 && d >= -0.001 && e <= 1e-4 && e >= -1e-4) }'; then
    pass "$model $fmt: PyTorch test_acc $tacc loss $tloss, ctrain-dist eval $acc $loss"
  else
    fail "$model $fmt: PyTorch test_acc $tacc loss $tloss, ctrain-dist eval $acc $loss"
  fi
done

# expect_error NP STATUS PATTERN OUT ARGS...: fails on every rank with STATUS,
# says PATTERN, and leaves no OUT.
expect_error() {
  local np=$1 want=$2 pat=$3 out=$4 log=$WORK/err$RANDOM
  shift 4
  if run_np "$np" "$log" "$@"; then fail "$*: succeeded"; return; fi
  inventory "export, predict" "$*" "$np" "$(cat "$log.rc.0" 2> /dev/null)" "$log.log"
  if every_rank_exited "$np" "$log" "$want" && grep -Eq -- "$pat" "$log.log" && [ ! -e "$out" ]; then
    pass "$* -> $want: $(grep -E -m1 -- "$pat" "$log.log" | cut -c1-140)"
  else
    fail "$*: want status $want, /$pat/ and no $out"; cat "$log.log"
  fi
}
ck=$WORK/mlp/ckpt-40
expect_error 1 2 "export needs --format npz\|safetensors and -o FILE" "$WORK/x.npz" export "$ck" -o "$WORK/x.npz"
expect_error 2 2 "--format 'zip': expected npz or safetensors" "$WORK/x.npz" export "$ck" --format zip -o "$WORK/x.npz"
expect_error 1 2 "-o belongs to the export, predict and report commands" "$WORK/x.npz" eval --checkpoint "$ck" -o "$WORK/x.npz"
expect_error 2 1 "$WORK/nothing/manifest.pb: no manifest \(not a committed checkpoint\)" "$WORK/x.npz" export "$WORK/nothing" --format npz -o "$WORK/x.npz"
expect_error 1 1 "$WORK/no/such/dir/x.npz" "$WORK/no/such/dir/x.npz" export "$ck" --format npz -o "$WORK/no/such/dir/x.npz"
# A corrupted checkpoint is refused before anything is written.
bad=$WORK/bad-ckpt
cp -r "$ck" "$bad"
printf '\xff' | dd of="$bad/data.bin" bs=1 seek=100 conv=notrunc status=none
expect_error 2 1 "bad-ckpt.*(sha256|digest)" "$WORK/bad.npz" export "$bad" --format npz -o "$WORK/bad.npz"
# predict, eval and export of one checkpoint at (ranks, threads) = (1, 1),
# (1, 2) and (2, 1): the same bytes. eval_batch 500: the same batches at 1
# and 2 ranks (shards of 5000). The products must not depend on the thread
# count (core/gemm.h): before stop 19 a rank with 2 threads took OpenBLAS's
# gemm and computed other bits than ranks with 1.
ck=$WORK/cnn/ckpt-40
for nt in "1 1" "1 2" "2 1"; do
  read -r np th <<<"$nt"
  tag=$np-$th
  run_np "$np" "$WORK/predict$tag" predict --checkpoint "$ck" --set train.eval_batch=500 \
    --set dist.threads="$th" -o "$WORK/p$tag.csv" || { fail "predict $np x $th"; cat "$WORK/predict$tag.log"; }
  run_np "$np" "$WORK/eval$tag" eval --checkpoint "$ck" --set train.eval_batch=500 --set dist.threads="$th" ||
    { fail "eval $np x $th"; cat "$WORK/eval$tag.log"; }
  run_np "$np" "$WORK/export$tag" export "$ck" --format npz -o "$WORK/cnn$tag.npz" ||
    { fail "export $np x $th"; cat "$WORK/export$tag.log"; }
  # The run is what was asked for: eval names its ranks and threads.
  grep -q "on 10000 samples, $np rank[s]* x $th thread" "$WORK/eval$tag.log" ||
    fail "eval $np x $th: the log does not say '$np rank(s) x $th thread(s)': $(grep -m1 test_loss "$WORK/eval$tag.log")"
  # eval's numbers without the line's ranks-and-threads tail.
  sed 's/ on 10000 samples, .*//' "$WORK/eval$tag.log" >"$WORK/evalnums$tag"
done
for tag in 1-2 2-1; do
  if cmp -s "$WORK/p1-1.csv" "$WORK/p$tag.csv"; then pass "predict: the same CSV, bit for bit, at 1 x 1 and $tag (ranks-threads)"
  else fail "predict: CSVs differ between 1 x 1 and $tag (ranks-threads)"; fi
  if cmp -s "$WORK/evalnums1-1" "$WORK/evalnums$tag"; then pass "eval: the same numbers at 1 x 1 and $tag"
  else fail "eval: numbers differ between 1 x 1 and $tag"; diff "$WORK/evalnums1-1" "$WORK/evalnums$tag" | head; fi
  if cmp -s "$WORK/cnn1-1.npz" "$WORK/cnn$tag.npz"; then pass "export: the same npz at 1 x 1 and $tag"
  else fail "export: npz files differ between 1 x 1 and $tag"; fi
done
cp "$WORK/p1-1.csv" "$WORK/p1.csv"
run_np 2 "$WORK/evalcm" eval --checkpoint "$ck" --set train.eval_batch=500 || fail "eval of the cnn"
if python3 - "$WORK/p1.csv" "$WORK/evalcm.log" <<'PY'
import csv, re, sys
rows = list(csv.DictReader(open(sys.argv[1])))
log = open(sys.argv[2]).read()
acc = float(re.search(r"test_acc ([0-9.]+)", log).group(1))
C = len([k for k in rows[0] if re.fullmatch(r"p[0-9]+", k)])
cm = [[0] * C for _ in range(C)]
for r in rows:
    probs = [float(r["p%d" % k]) for k in range(C)]
    assert abs(sum(probs) - 1) < 1e-5, r
    assert max(range(C), key=lambda k: probs[k]) == int(r["predicted"]), r
    cm[int(r["label"])][int(r["predicted"])] += 1
mine = sum(cm[k][k] for k in range(C)) / len(rows)
assert len(rows) == 10000 and abs(mine - acc) < 5e-5, (len(rows), mine, acc)
printed = [list(map(int, l.split()[1:])) for l in re.findall(r"^ +[0-9]+: [ 0-9]+$", log, re.M)]
assert printed == cm, (printed, cm)
PY
then pass "predict: CSV accuracy, argmax and confusion matrix agree with eval's"; else fail "predict CSV against eval"; fi
python3 - "$DATA" "$WORK" <<'PY'
import gzip, sys
d, w = sys.argv[1], sys.argv[2]
for name, head, size in (("t10k-images-idx3-ubyte.gz", 16, 784), ("t10k-labels-idx1-ubyte.gz", 8, 1)):
    b = gzip.open("%s/%s" % (d, name)).read()
    h = bytearray(b[:head]); h[4:8] = (100).to_bytes(4, "big")
    open("%s/small-%s" % (w, name[:-3]), "wb").write(bytes(h) + b[head:head + 100 * size])
PY
if run_np 2 "$WORK/predsmall" predict --checkpoint "$ck" --data "$WORK/small-t10k-images-idx3-ubyte" \
     --labels "$WORK/small-t10k-labels-idx1-ubyte" -o "$WORK/small.csv" &&
   python3 - "$WORK/p1.csv" "$WORK/small.csv" <<'PY'
# The same rows up to rounding: a sample's logits come from products over
# batches of other sizes here, which may round differently.
import csv, sys
full, small = list(csv.reader(open(sys.argv[1])))[:101], list(csv.reader(open(sys.argv[2])))
assert len(small) == 101 and small[0] == full[0]
for a, b in zip(full[1:], small[1:]):
    assert a[:3] == b[:3], (a, b)
    assert max(abs(float(x) - float(y)) for x, y in zip(a[3:], b[3:])) < 1e-5, (a, b)
PY
then
  pass "predict --data/--labels: the first 100 test samples give the same rows"
else
  fail "predict --data/--labels"; cat "$WORK/predsmall.log"
fi
expect_error 1 2 "predict needs -o FILE" "$WORK/none.csv" predict --checkpoint "$ck"
expect_error 2 2 "--data IMAGES and --labels LABELS go together" "$WORK/none.csv" predict --checkpoint "$ck" --data "$WORK/x" -o "$WORK/none.csv"
expect_error 2 1 "$WORK/missing-images: cannot open" "$WORK/none.csv" predict --checkpoint "$ck" --data "$WORK/missing-images" --labels "$WORK/small-t10k-labels-idx1-ubyte" -o "$WORK/none.csv"
finish
