#!/usr/bin/env bash
# train.init_from (issue 35): starting from weights made elsewhere.
# - PyTorch draws a tiny gpt's weights (tests/e2e/make_init_weights.py: 2
#   blocks, width 32, block 16, nanoGPT's names) and writes them as
#   safetensors F32 and BF16 and npz (compressed '<f4', plain '<f2'); ours
#   starts from each at N = 2 (one step at lr 1e-30, which leaves the weights
#   as they are) and `eval` gives PyTorch's val loss with those values to
#   1e-5; run.json and the checkpoint's manifest name the file by SHA-256;
# - fine-tuning: 6 steps from the F32 file, export, PyTorch loads the export
#   (strict names) and gets `eval`'s val loss to 1e-5; the same export is a
#   start for ours again (eval to 1e-6); a resume needs the file unchanged;
# - bad files refused on every rank, naming the file and what is wrong,
#   before a record or checkpoint is written to the run directory: missing, not weights, a
#   shape of another width, a tensor missing, one too many, F64, cut short,
#   a CRC error, lm_head.weight not wte's, a NaN.
# Needs torch and numpy under /usr/bin/python3 (CT_TORCH_PYTHON): skipped
# without them, a failure under CI=true (CI installs python3-torch).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
need_torch
PEER=$CT_SOURCE_DIR/tests/bench/torch_gpt_peer.py

head -c 9000 "$CT_SOURCE_DIR/README.md" | token_shard "$WORK/train.bin"
tail -c 4000 "$CT_SOURCE_DIR/README.md" | token_shard "$WORK/val.bin"
SETS=(--set data.dir="$WORK" --set data.train_images=train.bin --set data.vocab=256
      --set model.depth=2 --set model.width=32 --set model.heads=2 --set model.block=16
      --set train.global_batch=32 --set train.epochs=4 --set schedule.warmup_steps=2)
CFG=(--config "$CT_SOURCE_DIR/configs/moby-gpt.ini")
KV=()
for ((i = 1; i < ${#SETS[@]}; i += 2)); do KV+=("${SETS[i]}"); done
if ! "$TORCH_PY" "$CT_SOURCE_DIR/tests/e2e/make_init_weights.py" "$WORK" "${CFG[1]}" "${KV[@]}" \
     >"$WORK/make.log" 2>&1; then
  fail "PyTorch making the weights"; cat "$WORK/make.log"; finish
fi
torch_loss() { python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$WORK/losses.json" "$1"; }
close() { awk -v a="$1" -v b="$2" -v t="$3" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= t) }'; }
eval_loss() { sed -n 's/^val_loss \([0-9.]*\) nats per token.*/\1/p' "$1"; }

# ---- PyTorch's weights in, four ways.
for f in torch.safetensors torch.npz torch-bf16.safetensors torch-f16.npz; do
  run=$WORK/run-$f
  if ! run_np 2 "$WORK/init-$f" "${CFG[@]}" "${SETS[@]}" --run-dir "$run" --set train.init_from="$WORK/$f" \
       --set train.max_steps=1 --set optim.lr=1e-30 --set schedule.min_lr=0; then
    fail "$f: training from it"; cat "$WORK/init-$f.log"; continue
  fi
  run_np 2 "$WORK/eval-$f" eval --checkpoint "$run/ckpt-1" || { fail "$f: eval"; cat "$WORK/eval-$f.log"; continue; }
  got=$(eval_loss "$WORK/eval-$f.log") want=$(torch_loss "$f")
  if [ -n "$got" ] && close "$got" "$want" 1e-5; then
    pass "$f: eval $got, PyTorch $want"
  else
    fail "$f: eval '$got', PyTorch $want"; cat "$WORK/eval-$f.log"
  fi
  sha=$(sha256sum "$WORK/$f" | cut -d' ' -f1)
  if grep -q "\"init_from_sha256\": \"$sha\"" "$run/run.json" &&
     "$CT_BINARY" inspect "$run/ckpt-1" 2>&1 | grep -A1 "$WORK/$f" | grep -q "$sha"; then
    pass "$f: run.json and the manifest name it by SHA-256"
  else
    fail "$f: its SHA-256 $sha not in run.json or the manifest"; cat "$run/run.json"
    "$CT_BINARY" inspect "$run/ckpt-1" 2>&1 | grep -B2 -A2 init_from || true
  fi
done
grep -q "initialized from $WORK/torch.npz" "$WORK/init-torch.npz.log" ||
  fail "no 'initialized from' line in the log"

# ---- Fine-tuning, and the export back to PyTorch and to ours.
run=$WORK/tune
if run_np 2 "$WORK/tune" "${CFG[@]}" "${SETS[@]}" --run-dir "$run" --set train.init_from="$WORK/torch.safetensors" \
     --set train.max_steps=6 --set checkpoint.every_steps=3 --set log.every_steps=1 &&
   run_np 2 "$WORK/tune-eval" eval --checkpoint "$run/ckpt-6" &&
   run_np 1 "$WORK/tune-export" export "$run/ckpt-6" --format safetensors -o "$WORK/tuned.safetensors"; then
  val=$(eval_loss "$WORK/tune-eval.log")
  first=$(jsonl "$run/steps.jsonl" 1 loss)
  start=$(torch_loss torch.safetensors)
  if awk -v a="$first" -v b="$start" 'BEGIN { exit !(a < b + 0.5 && a > b - 0.5) }'; then
    pass "fine-tuning starts where PyTorch's weights are: step 1 loss $first, their val loss $start"
  else
    fail "fine-tuning's step 1 loss $first is far from the weights' val loss $start"
  fi
  out=$("$TORCH_PY" - "$PEER" "$WORK/tuned.safetensors" "${CFG[1]}" "${KV[@]}" <<'PY' 2>&1
import os, sys
peer, path, config, sets = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
sys.path.insert(0, os.path.dirname(peer))
import torch
import torch_gpt_peer as P
torch.set_num_threads(1)
r = P.Recipe(config, sets)
train = P.TokenShards([r.path_of(f) for f in r.train_files], r.block, r.seed)
vset = P.TokenShards([r.path_of(f) for f in r.val_files], r.block, r.seed)
m = P.GPT.from_recipe(r, P.vocab_size(r, train, vset))
P.load_export(m, path)
total, n = P.val_loss_sums(m, vset, 64)
print(total / n)
PY
  ) || true
  if close "$out" "$val" 1e-5 2>/dev/null; then
    pass "fine-tuned export loaded by PyTorch (strict): val loss $out, eval $val"
  else
    fail "fine-tuned export in PyTorch: '$out', eval $val"
  fi
  if run_np 1 "$WORK/again" "${CFG[@]}" "${SETS[@]}" --run-dir "$WORK/again-run" \
       --set train.init_from="$WORK/tuned.safetensors" --set train.max_steps=1 --set optim.lr=1e-30 \
       --set schedule.min_lr=0 && run_np 1 "$WORK/again-eval" eval --checkpoint "$WORK/again-run/ckpt-1" &&
     close "$(eval_loss "$WORK/again-eval.log")" "$val" 1e-6; then
    pass "our own export as train.init_from: eval $(eval_loss "$WORK/again-eval.log") = $val"
  else
    fail "our own export as train.init_from"; tail -5 "$WORK/again.log" "$WORK/again-eval.log"
  fi
  # A resume takes the checkpoint's weights, but the file is recorded: changed, refused.
  cp "$WORK/torch.safetensors" "$WORK/keep.safetensors"
  printf 'x' | dd of="$WORK/torch.safetensors" bs=1 seek=2000 conv=notrunc status=none
  rc=0
  run_np 2 "$WORK/resume-changed" "${CFG[@]}" "${SETS[@]}" --run-dir "$run" \
    --set train.init_from="$WORK/torch.safetensors" --set train.max_steps=9 --set checkpoint.every_steps=3 \
    --resume auto || rc=$?
  if [ $rc -ne 0 ] && every_rank_exited 2 "$WORK/resume-changed" 2 &&
     grep -q "data file $WORK/torch.safetensors has changed" "$WORK/resume-changed.log" && [ ! -e "$run/ckpt-9" ]; then
    pass "a resume with the init_from file changed is refused, naming it"
  else
    fail "a changed init_from file and a resume"; tail -5 "$WORK/resume-changed.log"
  fi
  inventory checkpoint "resume with train.init_from's file changed since" 2 2 "$WORK/resume-changed.log"
  mv "$WORK/keep.safetensors" "$WORK/torch.safetensors"
  if run_np 2 "$WORK/resume" "${CFG[@]}" "${SETS[@]}" --run-dir "$run" \
       --set train.init_from="$WORK/torch.safetensors" --set train.max_steps=9 --set checkpoint.every_steps=3 \
       --resume auto && [ -d "$run/ckpt-9" ] && ! grep -q 'initialized from' "$WORK/resume.log"; then
    pass "with the file as it was, the resume continues from the checkpoint (not the file)"
  else
    fail "resume of a fine-tuning run"; tail -5 "$WORK/resume.log"
  fi
else
  fail "fine-tuning from torch.safetensors"; tail -20 "$WORK/tune.log" "$WORK/tune-eval.log" "$WORK/tune-export.log" 2>/dev/null
fi

# ---- Bad files: every rank exits 1 naming the file and what is wrong, before
# the run directory holds anything (its heartbeat directory aside).
"$TORCH_PY" - "$WORK" <<'PY'
import json, sys, zipfile
w = sys.argv[1]
blob = open(f"{w}/torch.safetensors", "rb").read()
n = int.from_bytes(blob[:8], "little")
header = json.loads(blob[8:8 + n])
def write(name, hdr, data=blob[8 + n:]):
    h = json.dumps(hdr).encode()
    h += b" " * (-len(h) % 8)
    open(f"{w}/{name}", "wb").write(len(h).to_bytes(8, "little") + h + data)
drop = dict(header); del drop["transformer.ln_f.bias"]
write("missing.safetensors", drop)
extra = dict(header); extra["transformer.h.0.attn.bias"] = header["transformer.ln_f.bias"]
write("extra.safetensors", extra)
head = dict(header); head["lm_head.weight"] = dict(header["transformer.wpe.weight"])
head["lm_head.weight"]["shape"] = header["transformer.wte.weight"]["shape"]
b, e = header["transformer.wte.weight"]["data_offsets"]
head["lm_head.weight"]["data_offsets"] = [e - (e - b), e]  # wte's own bytes ...
data = bytearray(blob[8 + n:]); data += bytes(data[b:e]); data[-4:] = b"\x00\x00\x80\x3f"  # ... but one value 1.0
head["lm_head.weight"]["data_offsets"] = [len(data) - (e - b), len(data)]
write("head.safetensors", head, bytes(data))
nan = bytearray(blob[8 + n:]); b, e = header["transformer.h.1.mlp.c_fc.weight"]["data_offsets"]
nan[b + 40:b + 44] = b"\x00\x00\xc0\x7f"
write("nan.safetensors", header, bytes(nan))
open(f"{w}/cut.safetensors", "wb").write(blob[:len(blob) // 2])
z = bytearray(open(f"{w}/torch-f16.npz", "rb").read())
i = z.find(b"transformer.wpe.weight.npy") + 26 + 200  # inside that entry's stored data
z[i] ^= 0xff
open(f"{w}/crc.npz", "wb").write(bytes(z))
open(f"{w}/text.safetensors", "w").write("not weights\n")
PY
bad() { # NAME FILE WANT...: refused with each WANT in the log.
  local name=$1 file=$2 rc=0
  shift 2
  run_np 2 "$WORK/bad-$name" "${CFG[@]}" "${SETS[@]}" --run-dir "$WORK/bad-run-$name" \
    --set train.init_from="$file" --set train.max_steps=1 || rc=$?
  local ok=1 w
  for w in "$file" "$@"; do grep -qF -- "$w" "$WORK/bad-$name.log" || { ok=0; echo "  missing: $w"; }; done
  if [ $rc -ne 0 ] && [ $ok = 1 ] && every_rank_exited 2 "$WORK/bad-$name" 1 &&
     [ ! -e "$WORK/bad-run-$name/run.json" ] && ! ls -d "$WORK/bad-run-$name"/ckpt-* >/dev/null 2>&1; then
    pass "refused: $name ($(grep -m1 'error:' "$WORK/bad-$name.log" | cut -c1-160))"
  else
    fail "$name: not refused as it should be (status $rc)"; tail -5 "$WORK/bad-$name.log"
    every_rank_exited 2 "$WORK/bad-$name" 1 || true
    ls -la "$WORK/bad-run-$name" 2>/dev/null || true
  fi
  inventory config "train.init_from = $name" 2 1 "$WORK/bad-$name.log"
}
bad "a missing file" "$WORK/nothing.safetensors" "train.init_from = $WORK/nothing.safetensors" "No such file"
bad "not weights" "$WORK/text.safetensors" "neither an npz"
bad "another width" "$WORK/wide.safetensors" "tensor 'transformer.wte.weight' has shape (256, 48), the model's is (256, 32)"
bad "a tensor missing" "$WORK/missing.safetensors" "transformer.ln_f.bias missing from the file"
bad "a tensor too many" "$WORK/extra.safetensors" "transformer.h.0.attn.bias in the file, not in the model"
bad "F64" "$WORK/f64.safetensors" "has dtype F64"
bad "cut short" "$WORK/cut.safetensors" "data_offsets"
bad "a CRC error" "$WORK/crc.npz" "entry 'transformer.wpe.weight.npy': CRC-32"
bad "lm_head not wte" "$WORK/head.safetensors" "lm_head.weight differs from transformer.wte.weight"
bad "a NaN" "$WORK/nan.safetensors" "tensor 'transformer.h.1.mlp.c_fc.weight' holds NaN at element 10"
finish
