#!/usr/bin/env bash
# The data formats (src/data/dataset.h) in whole runs:
# - Fashion-MNIST converted to .npy, uint8 (N,28,28) and float32 (N,1,28,28)
#   pre-divided by 255 (tests/e2e/make_data.py, NumPy), trains the mlp to the
#   SAME param_sha256 as the IDX files, at N = 1 and 2; run.json and the
#   manifest say which format read them;
# - a small CIFAR-10-format set made by the test (two train batches, a test
#   batch) trains the cnn with crop_flip and per-channel normalization, and a
#   run stopped at step 4 and resumed ends with the straight run's digest;
# - crop_flip in deterministic mode: the same digest at N = 1, 2, 4, and
#   stopped at N = 2, resumed at N = 4;
# - configs/cifar10-resnet.ini passes config --check on that set;
# - an augmented run differs from an unaugmented one (the augmentation does
#   something).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
MAKE=$CT_SOURCE_DIR/tests/e2e/make_data.py
# Debian's python3 (python3-numpy comes with python3-torch, launch/packages.txt).
PY=${CT_TORCH_PYTHON:-/usr/bin/python3}
"$PY" -c 'import numpy' || { fail "$PY cannot import numpy (Debian: python3-numpy)"; finish; }
"$PY" "$MAKE" fmnist-npy "$DATA" "$WORK/npy" || { fail "converting Fashion-MNIST to .npy"; finish; }
"$PY" "$MAKE" cifar "$WORK/cifar" || { fail "making the CIFAR-format set"; finish; }

S=30
short=(--set train.max_steps=$S --set checkpoint.every_epochs=0 --set train.eval_every=1000)

# 1. npy = IDX, bit for bit.
for np in 1 2; do
  run_np $np "$WORK/idx$np" --config "$CONFIG" --run-dir "$WORK/idx$np" "${short[@]}" ||
    { fail "idx np=$np"; cat "$WORK/idx$np.log"; continue; }
  ref=$(digest "$WORK/idx$np")
  for kind in u8 f32; do
    out=$WORK/npy-$kind-$np
    if ! run_np $np "$out" --config "$CONFIG" --run-dir "$out" "${short[@]}" --set data.dir="$WORK/npy" \
         --set data.train_images=train-$kind.npy --set data.train_labels=train-labels.npy \
         --set data.test_images=test-$kind.npy --set data.test_labels=test-labels.npy; then
      fail "npy $kind np=$np"; cat "$out.log"; continue
    fi
    if [ "$(digest "$out")" = "$ref" ] && grep -q '"data_format": "npy"' "$out/run.json"; then
      pass "npy $kind np=$np: the IDX run's param_sha256 ($ref), run.json says npy"
    else
      fail "npy $kind np=$np: $(digest "$out") vs IDX $ref"; grep -o '"data_format": "[a-z0-9]*"' "$out/run.json"
    fi
  done
done
if "$CT_BINARY" inspect "$WORK/npy-u8-1/ckpt-$S" | grep -q "train-u8.npy (.*, npy)"; then
  pass "the manifest names the format of each data file"
else
  fail "inspect does not show the npy format"; "$CT_BINARY" inspect "$WORK/npy-u8-1/ckpt-$S" | grep -A4 "data files"
fi

# 2. CIFAR-10 binaries: the cnn with crop_flip, resumed bit for bit.
CIFAR=(--config "$CT_SOURCE_DIR/configs/fmnist-cnn.ini" --set data.dir="$WORK/cifar" --set data.format=cifar10
       --set data.train_images=data_batch_1.bin,data_batch_2.bin --set data.train_labels=
       --set data.test_images=test_batch.bin --set data.test_labels=
       --set data.mean=0.49,0.48,0.45 --set data.std=0.25,0.24,0.26 --set data.augment=crop_flip
       --set model.channels=4,8 --set model.hidden=16 --set train.global_batch=32 --set train.eval_every=1000
       --set checkpoint.every_epochs=0)
run_np 2 "$WORK/cifar-a" "${CIFAR[@]}" --run-dir "$WORK/cifar-a" --set train.max_steps=8 ||
  { fail "cifar cnn np=2"; cat "$WORK/cifar-a.log"; }
if run_np 2 "$WORK/cifar-b1" "${CIFAR[@]}" --run-dir "$WORK/cifar-b" --set train.max_steps=4 \
     --set checkpoint.every_steps=4 &&
   run_np 2 "$WORK/cifar-b2" "${CIFAR[@]}" --run-dir "$WORK/cifar-b" --set train.max_steps=8 --resume auto; then
  if [ "$(digest "$WORK/cifar-b")" = "$(digest "$WORK/cifar-a")" ] && grep -q '"data_format": "cifar10"' "$WORK/cifar-a/run.json"; then
    pass "cifar10 cnn with crop_flip: stopped at 4, resumed: the straight run's digest"
  else
    fail "cifar10 resume: $(digest "$WORK/cifar-b") vs $(digest "$WORK/cifar-a")"
  fi
else
  fail "cifar10 stop/resume runs"; cat "$WORK/cifar-b1.log" "$WORK/cifar-b2.log"
fi
run_np 1 "$WORK/cifar-noaug" "${CIFAR[@]}" --run-dir "$WORK/cifar-noaug" --set train.max_steps=8 \
  --set data.augment=none --set dist.threads=1 || fail "cifar without augmentation"
run_np 1 "$WORK/cifar-aug1" "${CIFAR[@]}" --run-dir "$WORK/cifar-aug1" --set train.max_steps=8 \
  --set dist.threads=1 || fail "cifar with augmentation, np=1"
if [ "$(digest "$WORK/cifar-noaug")" != "$(digest "$WORK/cifar-aug1")" ]; then
  pass "crop_flip changes the run (digests differ from data.augment = none)"
else
  fail "crop_flip left the run unchanged"
fi

# 3. Deterministic mode with crop_flip: N = 1, 2, 4 and a resume at another N.
DET=("${CIFAR[@]}" --set train.deterministic=true --set train.micro_batch=8 --set log.every_steps=1)
run_np 1 "$WORK/det1" "${DET[@]}" --run-dir "$WORK/det1" --set train.max_steps=6 --set dist.threads=1 ||
  { fail "deterministic np=1"; cat "$WORK/det1.log"; }
for np in 2 4; do
  if run_np $np "$WORK/det$np" "${DET[@]}" --run-dir "$WORK/det$np" --set train.max_steps=6; then
    if [ "$(digest "$WORK/det$np")" = "$(digest "$WORK/det1")" ]; then
      pass "deterministic crop_flip np=$np: the np=1 digest"
    else
      fail "deterministic crop_flip np=$np: $(digest "$WORK/det$np") vs $(digest "$WORK/det1")"
    fi
  else
    fail "deterministic np=$np"; cat "$WORK/det$np.log"
  fi
done
if run_np 2 "$WORK/detr1" "${DET[@]}" --run-dir "$WORK/detr" --set train.max_steps=3 --set checkpoint.every_steps=3 &&
   run_np 4 "$WORK/detr2" "${DET[@]}" --run-dir "$WORK/detr" --set train.max_steps=6 --resume auto &&
   [ "$(digest "$WORK/detr")" = "$(digest "$WORK/det1")" ]; then
  pass "deterministic crop_flip: stopped at 3 with np=2, resumed with np=4: the np=1 digest"
else
  fail "deterministic crop_flip resume at another N: $(digest "$WORK/detr") vs $(digest "$WORK/det1")"
fi

# 4. The shipped CIFAR-10 config, pointed at a CIFAR-format directory.
if run_np 2 "$WORK/check" config --check "$CT_SOURCE_DIR/configs/cifar10-resnet.ini" \
     --set data.dir="$WORK/cifar" --set data.train_images=data_batch_1.bin,data_batch_2.bin &&
   grep -q "cifar10-resnet.ini: ok: model resnet" "$WORK/check.log"; then
  pass "configs/cifar10-resnet.ini: $(grep -m1 ': ok:' "$WORK/check.log" | cut -c1-120)"
else
  fail "config --check configs/cifar10-resnet.ini"; cat "$WORK/check.log"
fi
finish
