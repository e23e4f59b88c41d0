#!/usr/bin/env bash
# Regenerate the seed corpora of the fuzz harnesses (tests/fuzz/corpus/<harness>/)
# from real files, in each harness's input encoding (tests/fuzz/README.md):
#   ckpt    the golden checkpoint (tests/fixtures/ckpt-v1) and a checkpoint of a
#           tiny MLP (hidden 2, 2 steps, 2 ranks) that the binary writes
#   record  the rank records of those checkpoints (offsets from `inspect`)
#   idx     Fashion-MNIST test images and labels cut to a few items: raw,
#           gzip made here, and through the harness's gzip flags
#   config  the shipped configs/*.ini, some with --set overrides; and
#           config.dict, the schema's words for libFuzzer's -dict
#   json    that tiny run's run.json, metrics/steps/chain lines and files
#   npy     .npy files numpy writes and CIFAR-10 records (make_corpus_npy.py)
#   tokens  small llm.c-layout token shards (make_corpus_tokens.py)
#   bpe     a small GPT-2-format vocabulary, texts and broken files (make_corpus_bpe.py)
#
#   tests/fuzz/make_corpus.sh [CTRAIN_DIST]     (default: build/ctrain-dist)
#
# Needs mpirun (Open MPI), the Fashion-MNIST package (dataset-fashion-mnist) and
# python3-numpy.
# The seeds are small on purpose (about 80 KiB in all): libFuzzer sets its
# -max_len from the largest seed, and every exec writes the input to disk.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
bin=${1:-$root/build/ctrain-dist}
data=${CT_FMNIST_DIR:-/usr/share/datasets/fashion-mnist}
py=/usr/bin/python3
[ -x "$bin" ] || { echo "make_corpus: $bin: no ctrain-dist binary (build it, or pass its path)" >&2; exit 2; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpirun --oversubscribe --bind-to none -np 2 "$bin" --config "$root/configs/fmnist-mlp.ini" \
  --set model.hidden=2 --set train.epochs=1 --set train.max_steps=2 --set train.global_batch=16 \
  --set dist.threads=1 --set log.every_steps=1 --set data.dir="$data" --run-dir "$tmp/run" -q
tiny=$tmp/run/ckpt-2
"$bin" inspect "$tiny" >"$tmp/tiny.txt"
"$bin" inspect "$root/tests/fixtures/ckpt-v1" >"$tmp/golden.txt"

rm -rf "$here/corpus"
mkdir -p "$here/corpus"/{ckpt,record,idx,config,json,npy,tokens,bpe}
"$py" "$here/make_corpus_npy.py" "$here/corpus/npy"
"$py" "$here/make_corpus_tokens.py" "$here/corpus/tokens"
"$py" "$here/make_corpus_bpe.py" "$here/corpus/bpe"
"$py" - "$here/corpus" "$root" "$data" "$tiny" "$tmp" <<'PY'
import gzip, os, re, struct, sys
out, root, data, tiny, tmp = sys.argv[1:]
run = os.path.join(tmp, "run")

def put(harness, name, blob):
    with open(os.path.join(out, harness, name), "wb") as f:
        f.write(blob)

def part(b):
    return struct.pack("<I", len(b)) + b

# ckpt: flags, [manifest.pb], [manifest.sha256], data.bin
for name, d, txt in (("golden-v1", os.path.join(root, "tests/fixtures/ckpt-v1"), "golden.txt"),
                     ("tiny-mlp-np2", tiny, "tiny.txt")):
    m = open(os.path.join(d, "manifest.pb"), "rb").read()
    s = open(os.path.join(d, "manifest.sha256"), "rb").read()
    b = open(os.path.join(d, "data.bin"), "rb").read()
    put("ckpt", name, bytes([0x00]) + part(m) + part(s) + b)
    put("ckpt", name + "-fixed-inspect", bytes([0x27]) + part(m) + part(b"") + b)
    # record: each rank record, as `inspect` locates it
    for line in open(os.path.join(tmp, txt)):
        r = re.match(r"\s+OK\s+rank (\d+): (\d+) B at (\d+)", line)
        if r:
            k, n, off = map(int, r.groups())
            put("record", "%s-rank%d" % (name, k), b[off:off + n])

# idx: flags, file bytes
def cut(path, items):
    raw = gzip.open(path, "rb").read()
    rank = raw[3]
    dims = list(struct.unpack(">%dI" % rank, raw[4:4 + 4 * rank]))
    per = 1
    for x in dims[1:]:
        per *= x
    dims[0] = items
    return raw[:4] + struct.pack(">%dI" % rank, *dims) + raw[4 + 4 * rank:4 + 4 * rank + items * per]
img = cut(os.path.join(data, "t10k-images-idx3-ubyte.gz"), 2)
lab = cut(os.path.join(data, "t10k-labels-idx1-ubyte.gz"), 16)
put("idx", "images2-raw", bytes([0x00]) + img)
put("idx", "images2-gzip-flag", bytes([0x05]) + img)
put("idx", "labels16-raw", bytes([0x04]) + lab)
put("idx", "labels16-gzip-2members", bytes([0x07]) + lab)
put("idx", "labels16-gzip-bytes", bytes([0x04]) + gzip.compress(lab, mtime=0))
put("idx", "images2-gzip-bytes", bytes([0x00]) + gzip.compress(img, mtime=0))

# config: flags, [INI text], override\0override...
cfgs = sorted(f for f in os.listdir(os.path.join(root, "configs")) if f.endswith(".ini"))
for f in cfgs:
    t = open(os.path.join(root, "configs", f), "rb").read()
    stem = f[:-4]
    put("config", stem, bytes([0x00]) + part(t))
put("config", "fmnist-mlp-sets-file",
    bytes([0x03]) + part(open(os.path.join(root, "configs/fmnist-mlp.ini"), "rb").read())
    + b"train.epochs=1\0model.hidden=64,32\0optim.name=adamw\0dist.placement=core\0checkpoint.keep_last=2")
# json: flags, text (0x01 metrics line, 0x02 steps line, 0x04 chain line,
# 0x08 the text as files, max step = flags >> 4)
rd = lambda f: open(os.path.join(run, f), "rb").read()
put("json", "run-json", bytes([0x08]) + rd("run.json"))
put("json", "metrics-line", bytes([0x01]) + rd("metrics.jsonl").splitlines()[0])
put("json", "steps-line", bytes([0x02]) + rd("steps.jsonl").splitlines()[0])
put("json", "chain-line", bytes([0x04]) + rd("chain.jsonl").splitlines()[0])
put("json", "chain-file", bytes([0x18]) + rd("chain.jsonl"))
put("json", "steps-file-trim1", bytes([0x18]) + rd("steps.jsonl"))
put("json", "latest-and-dirs", b"\x0fckpt-5\nckpt-5\nckpt-007\n..\nckpt-9999999999999999999999\n")
put("config", "fmnist-cnn-sets",
    bytes([0x00]) + part(open(os.path.join(root, "configs/fmnist-cnn.ini"), "rb").read())
    + b"schedule.name=step\0schedule.step_size=100\0train.deterministic=true\0model.dropout=0.25")
PY
# config.dict: libFuzzer dictionary of the config schema (sections, keys,
# their allowed words) as `config --list --tsv` prints it, and number forms.
"$bin" config --list --tsv >"$tmp/keys.tsv"
"$py" - "$tmp/keys.tsv" >"$here/config.dict" <<'PY'
import sys
words = set()
for line in list(open(sys.argv[1]))[1:]:
    key, typ, allowed = line.split("\t")[:3]
    sec, name = key.split(".", 1)
    words |= {"[%s]" % sec, "%s = " % name, key + "="}
    if typ in ("string", "choice", "bool"):
        words |= {w for w in allowed.split("|") if w and w != "text"}
words |= {"auto", "true", "false", "0", "-1", "1e308", "-0", "nan", "inf", "0x10", "1,2,3",
          "18446744073709551615", "9223372036854775808", "2147483648", "65537", " ; ", "# ", "\n"}
# libFuzzer's dictionary syntax: "word", with \\, \" and \xNN escapes
esc = lambda w: "".join("\\x%02X" % ord(c) if c < " " or c in "\\\"" else c for c in w)
for w in sorted(words):
    print('"%s"' % esc(w))
PY
du -sh "$here/corpus"
for d in "$here/corpus"/*/; do echo "$(basename "$d"): $(ls "$d" | wc -l) seeds, $(du -sb "$d" | cut -f1) bytes"; done
