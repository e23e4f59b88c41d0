#!/usr/bin/env bash
# ctrain-dist data inspect|stats (src/cli/cmd_data.c):
# - Fashion-MNIST's IDX files: inspect gives the header facts (gzip, 60000 x
#   1 x 28 x 28 uint8) of the images and says the labels file is one; stats
#   gives 6000 samples per class, the mean/std of configs/fmnist-mlp.ini
#   (0.2860 / 0.3530) and sha256sum's digests, once, on 2 ranks that all exit 0;
# - a uint8 NHWC (10,4,4,3) .npy and a float32 NCHW (6,2,5,5) .npy made with
#   NumPy: shape, layout, the class histogram and every channel's mean and
#   population std against NumPy's own (exact sums, to 1e-12);
# - two CIFAR-10-format files as one set (a comma list): inspect and the
#   histogram of the label bytes;
# - tokenize --bytes of two text files on 2 ranks: one shard, the bytes in
#   llm.c's layout (checked in Python), its SHA-256 = sha256sum's; inspect
#   (header: token count, windows of --window) and stats (tokens, windows,
#   vocabulary, the most frequent byte) of it, format auto;
# - bad command lines (exit 2) and bad files (exit 1) on 2 ranks: every rank
#   exits with the status, and the message naming the problem comes once.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# Debian's python3 (python3-numpy comes with python3-torch, launch/packages.txt).
PY=${CT_TORCH_PYTHON:-/usr/bin/python3}
B=$CT_BINARY

# show FILE...: print what exists of them (after a failure).
show() { cat "$@" 2>/dev/null || true; }
# has FILE PATTERN LABEL: FILE has a line matching PATTERN (grep -E).
has() {
  if grep -Eq -- "$2" "$1"; then pass "$3"; else fail "$3: no /$2/ in"; show "$1"; fi
}

# 1. Fashion-MNIST, IDX (gzip).
img=$DATA/train-images-idx3-ubyte.gz
lab=$DATA/train-labels-idx1-ubyte.gz
if "$B" data inspect "$img" > "$WORK/inspect.out" 2>&1; then
  pass "inspect $img: exit 0"
  has "$WORK/inspect.out" "^format +idx \(gzip\), uint8 dims 60000 x 28 x 28$" "inspect: idx, gzip, the IDX dims"
  has "$WORK/inspect.out" "^samples +60000$" "inspect: 60000 samples"
  has "$WORK/inspect.out" "^shape +1 x 28 x 28 \(C x H x W\)$" "inspect: 1 x 28 x 28"
  has "$WORK/inspect.out" "^dtype +uint8$" "inspect: uint8"
  has "$WORK/inspect.out" "^layout +nchw" "inspect: nchw"
  has "$WORK/inspect.out" "^file +$img \($(stat -c %s "$img") bytes\)$" "inspect: the file's size"
else
  fail "inspect $img"; show "$WORK/inspect.out"
fi
if "$B" data inspect "$lab" > "$WORK/inspect-labels.out" 2>&1; then
  has "$WORK/inspect-labels.out" "^labels +60000 \(uint8\): a labels file$" "inspect of the labels file says what it is"
else
  fail "inspect $lab"; show "$WORK/inspect-labels.out"
fi

if run_np 2 "$WORK/fm" data stats "$img" "$lab"; then
  pass "stats on 2 ranks: every rank exits 0"
  out=$WORK/fm.log
  [ "$(grep -c '^samples' "$out")" = 1 ] && pass "stats: printed once (rank 0)" || { fail "stats printed $(grep -c '^samples' "$out") times"; show "$out"; }
  n=$(grep -Ec '^  class [0-9]: 6000 \(10\.00%\)$' "$out")
  [ "$n" = 10 ] && pass "stats: 6000 samples in each of the 10 classes" || { fail "histogram: $n classes of 6000"; show "$out"; }
  has "$out" "^mean = 0\.2860$" "stats: mean = 0.2860"
  has "$out" "^std = 0\.3530$" "stats: std = 0.3530"
  for key in mean std; do
    want=$(sed -nE "s/^$key *= *([0-9.,]+).*/\1/p" "$CONFIG")
    got=$(sed -nE "s/^$key = //p" "$out")
    [ "$got" = "$want" ] && pass "stats: $key = configs/fmnist-mlp.ini's ($want)" || fail "stats: $key $got, the config says $want"
  done
  has "$out" "population std \(divided by N\*H\*W = 47040000 values\)" "stats: says the std is the population one, over N*H*W"
  for f in "$img" "$lab"; do
    has "$out" "^sha256 +$(sha256sum "$f" | cut -d' ' -f1)  $f$" "stats: sha256 of $(basename "$f") = sha256sum's"
  done
else
  fail "stats on 2 ranks"; show "$WORK/fm.log"
fi

# 2. NumPy files, checked against NumPy's own numbers.
if ! "$PY" -c 'import numpy' 2>/dev/null; then
  fail "$PY cannot import numpy (Debian: python3-numpy): no .npy cases"
else
  "$PY" - "$WORK" <<'PY'
import sys, numpy as np
w = sys.argv[1]
x = ((np.arange(10 * 4 * 4 * 3) * 37 + 11) % 256).astype(np.uint8).reshape(10, 4, 4, 3)  # NHWC
np.save(w + "/u8.npy", x)
np.save(w + "/u8-labels.npy", (np.arange(10) * 7 % 4).astype(np.int64))
f = np.random.default_rng(7).normal(3.0, 2.0, size=(6, 2, 5, 5)).astype(np.float32)       # NCHW
np.save(w + "/f32.npy", f)
# records of 3073 bytes: a label byte, then 3x32x32 pixels
rng = np.random.default_rng(3)
for name, n in (("c1.bin", 5), ("c2.bin", 3)):
    rec = np.concatenate([rng.integers(0, 10, (n, 1)), rng.integers(0, 256, (n, 3072))], axis=1)
    rec.astype(np.uint8).tofile(w + "/" + name)
PY
  # check.py OUT ARRAY SCALE [LABELS]: the channel lines and histogram of OUT
  # against NumPy on ARRAY (channels last after moving them there).
  cat > "$WORK/check.py" <<'PY'
import re, sys, numpy as np
out, arr, scale = open(sys.argv[1]).read(), np.load(sys.argv[2]), float(sys.argv[3])
nhwc = sys.argv[4] == "nhwc"
v = arr.astype(np.float64) / scale
if not nhwc:
    v = np.moveaxis(v, 1, -1)
axes = tuple(range(v.ndim - 1))
mean, std = v.mean(axis=axes), v.std(axis=axes)  # population std (ddof 0)
got = [(float(m), float(s)) for m, s in re.findall(r"^  channel \d+: mean (\S+)  std (\S+)$", out, re.M)]
ok = len(got) == len(mean)
for c, (m, s) in enumerate(got):
    ok &= abs(m - mean[c]) <= 1e-12 * max(1, abs(mean[c])) and abs(s - std[c]) <= 1e-12 * max(1, std[c])
ok &= ("mean = " + ",".join("%.4f" % m for m in mean)) in out.splitlines()
ok &= ("std = " + ",".join("%.4f" % s for s in std)) in out.splitlines()
if len(sys.argv) > 5:
    hist = [int(n) for n in re.findall(r"^  class \d+: (\d+) ", out, re.M)]
    ok &= hist == np.bincount(np.load(sys.argv[5]), minlength=len(hist)).tolist()
print("numpy: mean", mean.tolist(), "std", std.tolist(), "ours:", got)
sys.exit(0 if ok else 1)
PY
  if "$B" data inspect "$WORK/u8.npy" > "$WORK/u8-inspect.out" 2>&1; then
    has "$WORK/u8-inspect.out" "^format +npy 1\.0, descr '\|u1' \(uint8\), shape \(10, 4, 4, 3\)$" "inspect npy: version, descr, shape"
    has "$WORK/u8-inspect.out" "^shape +3 x 4 x 4 \(C x H x W\)$" "inspect npy: 3 x 4 x 4"
    has "$WORK/u8-inspect.out" "^layout +nhwc" "inspect npy: nhwc (auto: last axis 3)"
  else
    fail "inspect u8.npy"; show "$WORK/u8-inspect.out"
  fi
  if "$B" data stats "$WORK/u8.npy" "$WORK/u8-labels.npy" > "$WORK/u8.out" 2>&1 &&
     "$PY" "$WORK/check.py" "$WORK/u8.out" "$WORK/u8.npy" 255 nhwc "$WORK/u8-labels.npy" > "$WORK/u8.check" 2>&1; then
    pass "stats uint8 NHWC .npy: per-channel mean/std (v/255) and histogram = NumPy's"
  else
    fail "stats uint8 NHWC .npy"; show "$WORK/u8.out" "$WORK/u8.check"
  fi
  if "$B" data stats "$WORK/f32.npy" --layout nchw > "$WORK/f32.out" 2>&1 &&
     "$PY" "$WORK/check.py" "$WORK/f32.out" "$WORK/f32.npy" 1 nchw > "$WORK/f32.check" 2>&1; then
    pass "stats float32 NCHW .npy: per-channel mean/std (as stored) = NumPy's"
  else
    fail "stats float32 NCHW .npy"; show "$WORK/f32.out" "$WORK/f32.check"
  fi

  # 3. CIFAR-10 format, two files as one set.
  cifar=$WORK/c1.bin,$WORK/c2.bin
  if "$B" data inspect --format cifar10 "$cifar" > "$WORK/cifar.out" 2>&1; then
    has "$WORK/cifar.out" "^file +$WORK/c1.bin \(15365 bytes\)$" "inspect cifar10: the first file, 5 records"
    has "$WORK/cifar.out" "^file +$WORK/c2.bin \(9219 bytes\)$" "inspect cifar10: the second file, 3 records"
    has "$WORK/cifar.out" "^samples +8$" "inspect cifar10: 8 samples"
    has "$WORK/cifar.out" "^shape +3 x 32 x 32 \(C x H x W\)$" "inspect cifar10: 3 x 32 x 32"
  else
    fail "inspect cifar10"; show "$WORK/cifar.out"
  fi
  "$PY" -c 'import sys, numpy as np
r = np.concatenate([np.fromfile(f, np.uint8).reshape(-1, 3073) for f in sys.argv[1:]])
np.save(sys.argv[1] + ".labels.npy", r[:, 0].astype(np.int64)); np.save(sys.argv[1] + ".x.npy", r[:, 1:].reshape(-1, 3, 32, 32))' \
    "$WORK/c1.bin" "$WORK/c2.bin"
  if "$B" data stats --format=cifar10 "$cifar" > "$WORK/cifar-stats.out" 2>&1 &&
     "$PY" "$WORK/check.py" "$WORK/cifar-stats.out" "$WORK/c1.bin.x.npy" 255 nchw "$WORK/c1.bin.labels.npy" > "$WORK/cifar.check" 2>&1; then
    pass "stats cifar10: histogram of the label bytes and per-channel mean/std = NumPy's"
  else
    fail "stats cifar10"; show "$WORK/cifar-stats.out" "$WORK/cifar.check"
  fi
fi

# 3b. Token shards: data tokenize --bytes, then inspect and stats.
printf 'hello, world\n' > "$WORK/t1.txt"
printf 'a bee sees the sea' > "$WORK/t2.txt"
shard=$WORK/t.bin
if run_np 2 "$WORK/tok" data tokenize --bytes "$WORK/t1.txt" "$WORK/t2.txt" -o "$shard"; then
  pass "tokenize on 2 ranks: every rank exits 0"
  has "$WORK/tok.log" "^wrote +$shard: 31 tokens \(the bytes of 2 files; data.vocab = 256\), 1086 bytes$" "tokenize: 31 tokens, 1024 + 2 x 31 bytes"
  has "$WORK/tok.log" "^sha256 +$(sha256sum "$shard" | cut -d' ' -f1)  $shard$" "tokenize: the shard's SHA-256 = sha256sum's"
  if python3 -c 'import struct, sys
b = open(sys.argv[1], "rb").read(); text = open(sys.argv[2], "rb").read() + open(sys.argv[3], "rb").read()
sys.exit(b != struct.pack("<256i", 20240520, 1, len(text), *([0] * 253)) + struct.pack("<%dH" % len(text), *text))' \
     "$shard" "$WORK/t1.txt" "$WORK/t2.txt"; then
    pass "tokenize: llm.c's layout, each byte one uint16 token"
  else
    fail "tokenize: the shard is not the texts' bytes in llm.c's layout"; od -A d -t x1 "$shard" | tail -5
  fi
  [ "$(ls "$WORK" | grep -c '^t\.bin')" = 1 ] && pass "tokenize: no temporary file left" || { fail "tokenize left files"; ls "$WORK"; }
else
  fail "tokenize"; show "$WORK/tok.log"
fi
if "$B" data inspect "$shard" --window 4 > "$WORK/tok-inspect.out" 2>&1; then
  has "$WORK/tok-inspect.out" "^format +tokens \(llm.c's shard layout\), version 1" "inspect tokens: format auto, version 1"
  has "$WORK/tok-inspect.out" "^tokens +31$" "inspect tokens: 31 tokens"
  has "$WORK/tok-inspect.out" "^windows +7 of 4 tokens \(model.block 3\), 3 tokens left over" "inspect tokens: 7 windows of 4"
else
  fail "inspect tokens"; show "$WORK/tok-inspect.out"
fi
if "$B" data stats "$shard" --window 4 --vocab 256 > "$WORK/tok-stats.out" 2>&1; then
  has "$WORK/tok-stats.out" "^tokens +31 \(uint16\) in 1 shard$" "stats tokens: 31 tokens in 1 shard"
  has "$WORK/tok-stats.out" "^vocab +256 \(--vocab\); the largest token 119; 14 distinct tokens occur$" "stats tokens: vocabulary, largest, distinct"
  has "$WORK/tok-stats.out" "^  token 101 'e': 7 \(22\.58%\)$" "stats tokens: 'e' the most frequent, 7 of 31"
else
  fail "stats tokens"; show "$WORK/tok-stats.out"
fi

# 4. Bad command lines and files, on 2 ranks.
printf 'hello, world' > "$WORK/hello.bin"
# bad WANT PATTERN ARGS...: every rank exits WANT, the output holds PATTERN
# exactly once (rank 0 prints it).
bad() {
  local want=$1 pat=$2 out=$WORK/bad$RANDOM
  shift 2
  run_np 2 "$out" "$@" && { fail "$*: succeeded"; return; }
  inventory "data tool" "$*" 2 "$(cat "$out.rc.0" 2> /dev/null)" "$out.log"
  if ! every_rank_exited 2 "$out" "$want"; then fail "$*"; show "$out.log"; return; fi
  local n
  n=$(grep -Ec -- "$pat" "$out.log")
  if [ "$n" != 1 ]; then fail "$*: /$pat/ $n times, want once"; show "$out.log"; return; fi
  pass "$* -> $want: $(grep -E -m1 -- "$pat" "$out.log" | cut -c1-150)"
}
bad 2 "error: .*data inspect needs a file \(FILE\)" data inspect
bad 2 "error: .*data stats: unknown option '--bogus'" data stats "$img" --bogus
bad 1 "error: .*$WORK/missing.npy: cannot open: No such file or directory" data inspect "$WORK/missing.npy"
bad 1 "error: .*$WORK/hello.bin: unknown data format: the first bytes are 68 65 6C 6C" data stats "$WORK/hello.bin"
bad 2 "error: .*data tokenize needs one tokenizer: --bytes" data tokenize "$WORK/t1.txt" -o "$WORK/x.bin"
bad 2 "error: .*data tokenize needs -o SHARD" data tokenize --bytes "$WORK/t1.txt"
bad 1 "error: .*$WORK/missing.txt: cannot stat: No such file or directory" data tokenize --bytes "$WORK/t1.txt" "$WORK/missing.txt" -o "$WORK/x.bin"
bad 1 "error: .*$shard: token 0 \(byte offset 1024\) is 104: expected every token below data.vocab = 100" data stats "$shard" --vocab 100
bad 1 "error: .*$shard: 31 tokens, fewer than one window of 64" data stats "$shard" --window 64
bad 1 "error: .*$WORK/hello.bin: 12 bytes, shorter than the 1024-byte header of a token shard" data stats --format tokens "$shard,$WORK/hello.bin"

# 5. Help.
if "$B" data --help > "$WORK/help.out" 2>&1 && grep -q "^usage: ctrain-dist data inspect FILE" "$WORK/help.out" &&
   "$B" --help | grep -Eq "^  data +print a data file's header facts"; then
  pass "data --help, and data in ctrain-dist --help"
else
  fail "help"; show "$WORK/help.out"
fi
# 6. The command line through args.c's tables (src/cli/cmd_data.c): each
# subcommand's own options, values and operands, in its own words.
: > "$WORK/empty.txt"
bad 2 "error: .*data needs a subcommand: inspect, stats or tokenize" data
bad 2 "error: .*unknown data subcommand 'bogus' \(known: inspect, stats, tokenize\)" data bogus
bad 2 "error: .*data inspect: unknown option '--vocab'" data inspect "$shard" --vocab 3
bad 2 "error: .*data inspect: unknown option '--set'" data inspect "$shard" --set a.b=c
bad 2 "error: .*data stats: --window 'x': expected a whole number in 2 \.\. 2147483647" data stats "$shard" --window x
bad 2 "error: .*data stats: --vocab '70000': expected a whole number in 1 \.\. 65536" data stats "$shard" --vocab=70000
bad 2 "error: .*data inspect: --format 'png' \(known: auto, idx, npy, cifar10, tokens\)" data inspect --format png "$shard"
bad 2 "error: .*data inspect: option --layout needs a value" data inspect "$shard" --layout
bad 2 "error: .*data inspect: too many files: '$WORK/t1.txt' \(inspect takes one FILE\)" data inspect "$shard" "$WORK/t1.txt"
bad 2 "error: .*data stats: an empty file name" data stats ""
bad 2 "error: .*data inspect: '$shard,$shard' is a list of files: only cifar10 takes several" data inspect "$shard,$shard"
bad 2 "error: .*data tokenize: unknown option '--format' \(known: --bytes, --gpt2, -o\)" data tokenize --bytes "$WORK/t1.txt" --format npy -o "$WORK/x.bin"
bad 2 "error: .*data tokenize: an empty output file name" data tokenize --bytes "$WORK/t1.txt" -o=
bad 1 "error: .*data tokenize: $WORK/empty.txt holds no bytes: nothing to tokenize" data tokenize --bytes "$WORK/empty.txt" -o "$WORK/x.bin"
# usage after the error line; a shared command does not take data's options
if "$B" data inspect > /dev/null 2> "$WORK/usage.err"; then fail "data inspect with no file succeeded"
elif [ "$(sed -n 1p "$WORK/usage.err" | cut -c1-20)" = "ctrain-dist: error: " ] &&
     grep -q "^usage: ctrain-dist data inspect FILE" "$WORK/usage.err"; then pass "a bad data command line: the error, then the usage"
else fail "data usage"; show "$WORK/usage.err"; fi
"$B" train --window 4 > /dev/null 2> "$WORK/train-window.err" && rc=0 || rc=$?
[ "$rc" = 2 ] && grep -q "unknown option '--window' (see ctrain-dist --help)" "$WORK/train-window.err" &&
  pass "train --window: data's option is unknown to a shared command" || { fail "train --window (exit $rc)"; show "$WORK/train-window.err"; }
# -o=SHARD, and the options before the files
if "$B" data tokenize -o="$WORK/y.bin" "$WORK/t1.txt" --bytes "$WORK/t2.txt" > "$WORK/tok2.out" 2>&1 && cmp -s "$shard" "$WORK/y.bin"; then
  pass "tokenize -o=SHARD with the options anywhere: the same shard"
else fail "tokenize -o="; show "$WORK/tok2.out"; fi
# help anywhere on a data line: data's help with its own exit statuses
if "$B" data stats "$shard" --help > "$WORK/help2.out" 2>&1 &&
   grep -q "^Exit status: 0 success, 1 a bad data file, 2 a bad command line.$" "$WORK/help2.out"; then
  pass "data stats FILE --help: data's help and exit statuses"
else fail "data stats --help"; show "$WORK/help2.out"; fi
finish
