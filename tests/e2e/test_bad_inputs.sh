#!/usr/bin/env bash
# Every bad input -- command line, config, data file -- ends the run on every
# rank with a non-zero status and one clear message that names the file and
# the problem; no hang (each run has a 300 s guard), no crash, and nothing an
# earlier run saved is lost.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# The .gz files (lib.sh: CONFIG_GZ): the data cases below replace one of
# them with a truncated, lying or missing one.
CONFIG=$CONFIG_GZ

# expect NP WANT_STATUS "PATTERN" ARGS...: run, then check every rank's status
# and that the output contains PATTERN (grep -E) exactly... at least once.
expect() {
  local np=$1 want=$2 pat=$3 label
  shift 3
  label="np=$np $*"
  local out=$WORK/run$RANDOM
  run_np "$np" "$out" "$@" && { fail "$label: succeeded"; return; }
  inventory "$CAT" "${CT_SIMD:+CT_SIMD=$CT_SIMD }$*" "$np" "$(cat "$out.rc.0" 2> /dev/null)" "$out.log"
  if ! every_rank_exited "$np" "$out" "$want"; then fail "$label"; cat "$out.log"; return; fi
  if ! grep -Eq -- "$pat" "$out.log"; then fail "$label: no /$pat/ in output"; cat "$out.log"; return; fi
  if grep -Eq "Segmentation|Aborted|AddressSanitizer|runtime error|MPI_ABORT|MPI_Abort" "$out.log"; then fail "$label: crashed"; cat "$out.log"; return; fi
  pass "$label -> $want: $(grep -E -m1 -- "$pat" "$out.log" | cut -c1-150)"
}

cfg() { # cfg NAME CONTENT: write a config file
  printf '%s\n' "$2" > "$WORK/$1"
  echo "$WORK/$1"
}

base=$(cat "$CONFIG")
for np in $(nps 1 2 4); do
  CAT="command line"
  expect $np 2 "unknown option '--frobnicate'" --config "$CONFIG" --frobnicate
  expect $np 2 "--config FILE is required" --run-dir "$WORK/x"
  expect $np 2 "unknown command 'trian'" trian --config "$CONFIG"
  CAT=environment
  CT_SIMD=avx9000 expect $np 2 "CT_SIMD: unknown value 'avx9000' \(expected auto or portable\)" --config "$CONFIG"
  CAT=config
  expect $np 1 "$WORK/missing.ini: cannot open" --config "$WORK/missing.ini"
  c=$(cfg typo.ini "${base/epochs = 5/epochz = 5}")
  expect $np 2 "typo.ini:[0-9]+: unknown key 'epochz' in section \[train\] \(did you mean 'epochs'\?\)" --config "$c"
  c=$(cfg section.ini "${base/\[train\]/[trian]}")
  expect $np 2 "section.ini:[0-9]+: unknown section \[trian\] \(did you mean \[train\]\?\)" --config "$c"
  c=$(cfg type.ini "${base/global_batch = 256/global_batch = lots}")
  expect $np 2 "type.ini:[0-9]+: train.global_batch: expected an integer, found 'lots'" --config "$c"
  c=$(cfg range.ini "${base/lr = 0.05/lr = -1}")
  expect $np 2 "range.ini:[0-9]+: optim.lr: .*out of range" --config "$c"
  c=$(cfg required.ini "${base/seed = 0/}")
  expect $np 2 "required.ini: missing required key train.seed" --config "$c"
  expect $np 2 "--set train.epochs=0: .*out of range" --config "$CONFIG" --set train.epochs=0
  expect $np 2 "--set optim.lrr=1: unknown key 'lrr' in section \[optim\] \(did you mean 'lr'\?\)" --config "$CONFIG" --set optim.lrr=1
done
# The commands with options of their own (audit, summary, data: args.c's
# own-option tables): their options are unknown to the shared commands, and
# theirs to them, each refusal in the command's own words.
CAT="command line"
expect 2 2 "audit replay: unknown option '--bogus'" audit replay "$WORK/a" "$WORK/b" --bogus x
expect 2 2 "audit replay: option --out=x needs a value" audit replay "$WORK/a" "$WORK/b" --out=x
expect 2 2 "audit verify takes one run directory" audit verify "$WORK/a" "$WORK/b"
expect 2 2 "summary: unknown option '-q'" summary "$WORK/a" -q
expect 2 2 "unknown option '--gemm' \(see ctrain-dist --help\)" report "$WORK/a" --gemm own
expect 2 2 "data inspect: unknown option '--config'" data inspect "$WORK/a" --config "$CONFIG"
# a global batch that 4 ranks do not divide
CAT=config
expect 4 2 "train.global_batch = 258 is not divisible by the number of ranks \(4\)" --config "$CONFIG" --set train.global_batch=258
# bf16 gradient compression has no reproducible sum: the deterministic mode refuses it
expect 2 2 "train.deterministic = true refuses dist.grad_compress = bf16" --config "$CONFIG" --set train.deterministic=true --set dist.grad_compress=bf16

# data files: a directory with three good files and one bad one
mkdata() { # mkdata NAME: a data dir of symlinks to the real files
  local d=$WORK/$1
  mkdir -p "$d"
  for f in train-images-idx3-ubyte.gz train-labels-idx1-ubyte.gz t10k-images-idx3-ubyte.gz t10k-labels-idx1-ubyte.gz; do
    ln -sf "$DATA/$f" "$d/$f"
  done
  echo "$d"
}
CAT=data
d=$(mkdata truncated); rm "$d/train-images-idx3-ubyte.gz"
head -c 100000 "$DATA/train-images-idx3-ubyte.gz" > "$d/train-images-idx3-ubyte.gz"
expect 2 1 "truncated/train-images-idx3-ubyte.gz: .*truncated" --config "$CONFIG" --set data.dir="$d"

d=$(mkdata magic); rm "$d/t10k-labels-idx1-ubyte.gz"
printf '\x12\x34\x08\x01\x00\x00\x27\x10' | gzip > "$d/t10k-labels-idx1-ubyte.gz"
expect 2 1 "magic/t10k-labels-idx1-ubyte.gz: not an IDX file" --config "$CONFIG" --set data.dir="$d"

d=$(mkdata lying); rm "$d/t10k-labels-idx1-ubyte.gz"
# The header promises 10000 labels; the file holds 10.
{ printf '\x00\x00\x08\x01\x00\x00\x27\x10'; head -c 10 /dev/zero; } > "$d/t10k-labels-idx1-ubyte.gz"
expect 2 1 "lying/t10k-labels-idx1-ubyte.gz: truncated: header promises 10000 bytes" --config "$CONFIG" --set data.dir="$d"

# An images header the file cannot hold, raw and gzip: the node-shared loader
# sizes its window from the header, so it must refuse before allocating (the
# 16 bytes below promise 10 x 65536 x 6553 = 4 GiB).
d=$(mkdata lyingimages); rm "$d/t10k-images-idx3-ubyte.gz"
printf '\x00\x00\x08\x03\x00\x00\x00\x0a\x00\x01\x00\x00\x00\x00\x19\x99' > "$d/t10k-images-idx3-ubyte.gz"
expect 2 1 "lyingimages/t10k-images-idx3-ubyte.gz: truncated: header promises 4294574080 bytes .*the file holds 0" --config "$CONFIG" --set data.dir="$d"
printf '\x00\x00\x08\x03\x00\x00\x00\x0a\x00\x01\x00\x00\x00\x00\x19\x99' | gzip > "$d/t10k-images-idx3-ubyte.gz"
expect 2 1 "lyingimages/t10k-images-idx3-ubyte.gz: truncated: header promises 4294574080 bytes .*at most 1032:1" --config "$CONFIG" --set data.dir="$d"

d=$(mkdata count); rm "$d/t10k-labels-idx1-ubyte.gz"
{ printf '\x00\x00\x08\x01\x00\x00\x27\x0f'; head -c 9999 /dev/zero; } > "$d/t10k-labels-idx1-ubyte.gz"
expect 2 1 "9999 labels but .*t10k-images-idx3-ubyte.gz has 10000 images" --config "$CONFIG" --set data.dir="$d"

d=$(mkdata missing); rm "$d/train-labels-idx1-ubyte.gz"
expect 4 1 "missing/train-labels-idx1-ubyte.gz: cannot open" --config "$CONFIG" --set data.dir="$d"

# config --check validates as training would, config --list shows the schema
CAT="config command"
for np in $(nps 1 2); do
  expect $np 2 "config needs exactly one of --list or --check FILE" config
  expect $np 2 "config needs exactly one of --list or --check FILE" config --list --check "$CONFIG"
  expect $np 2 "--list, --tsv and --check belong to the config command" --config "$CONFIG" --list
  expect $np 2 "--set needs --config FILE" config --list --set train.epochs=2
  c=$(cfg checktypo.ini "${base/epochs = 5/epochz = 5}")
  expect $np 2 "checktypo.ini:[0-9]+: unknown key 'epochz' in section \[train\]" config --check "$c"
  expect $np 1 "nowhere/.*: cannot open" config --check "$CONFIG" --set data.dir="$WORK/nowhere"
done
expect 4 2 "train.global_batch = 258 is not divisible by the number of ranks \(4\)" config --check "$CONFIG" --set train.global_batch=258
if run_np 2 "$WORK/check" config --check "$CONFIG" &&
   grep -q "fmnist-mlp.ini: ok: model mlp, 235146 parameters, 60000 training and 10000 test samples, 2 ranks x 128 samples per step, 234 steps per epoch" "$WORK/check.log"; then
  pass "config --check of a good config at np=2"
else
  fail "config --check of a good config"; cat "$WORK/check.log"
fi
if run_np 1 "$WORK/list" config --list --config "$CONFIG" --set train.epochs=7 &&
   grep -Eq '^  epochs +int +1\.\.100000 +default \(required\), changes the experiment$' "$WORK/list.log" &&
   grep -Eq '^  \* +value 7$' "$WORK/list.log"; then
  pass "config --list --config shows types, ranges, defaults and the resolved values"
else
  fail "config --list"; cat "$WORK/list.log"
fi

# --help lists every command; CMD --help gives that command's synopsis, exit 0,
# and the man page has an entry for it.
if run_np 1 "$WORK/help" --help; then
  cmds=$(sed -n 's/^  \([a-z]*\)  .*/\1/p' "$WORK/help.log")
  [ "$(echo $cmds)" != "" ] || fail "--help lists no commands"
  for c in $cmds; do
    if run_np 1 "$WORK/help-$c" "$c" --help && grep -q "^usage: ctrain-dist \(\[\)\?$c" "$WORK/help-$c.log" &&
       grep -Eq "^\.B[IR]* \"?$c( |\"|\$)" "$CT_SOURCE_DIR/src/cli/ctrain-dist.1" &&
       grep -q "^Exit status" "$WORK/help-$c.log" && ! grep -q "^      ctrain-dist" "$WORK/help-$c.log"; then
      pass "$c --help: $(head -1 "$WORK/help-$c.log" | cut -c1-100)"
    else
      fail "$c --help"; cat "$WORK/help-$c.log"
    fi
  done
else
  fail "--help"; cat "$WORK/help.log"
fi

# .npy and CIFAR-10 files (src/data/npy.c, cifar.c): each refusal names the
# file and the reason, on every rank, and an earlier run's files stay.
PY=${CT_TORCH_PYTHON:-/usr/bin/python3}
npy=$WORK/npy
mkdir -p "$npy"
"$PY" - "$npy" <<'PYEOF'
import sys, numpy as np
d = sys.argv[1]
x = np.zeros((64, 8, 8), np.uint8); y = np.arange(64) % 10
np.save(d + "/x.npy", x); np.save(d + "/y.npy", y.astype(np.int64))
np.save(d + "/fortran.npy", np.asfortranarray(np.zeros((64, 8, 8), np.uint8)))
np.save(d + "/bigendian.npy", np.zeros((64, 8, 8), ">f4"))
np.save(d + "/object.npy", np.array([None] * 64, dtype=object), allow_pickle=True)
np.save(d + "/float64.npy", np.zeros((64, 8, 8), np.float64))
np.save(d + "/y63.npy", y[:63].astype(np.int64))
np.save(d + "/yneg.npy", np.where(np.arange(64) == 5, -1, y).astype(np.int32))
np.save(d + "/ybig.npy", np.where(np.arange(64) == 7, 65536, y).astype(np.int64))
f = np.zeros((64, 1, 8, 8), np.float32); f[9, 0, 2, 3] = np.nan
np.save(d + "/nan.npy", f)
open(d + "/short.npy", "wb").write(open(d + "/x.npy", "rb").read()[:-10])
open(d + "/cifar.bin", "wb").write(bytes(3073 * 2 + 5))
PYEOF
run=$WORK/keepnpy
mkdir -p "$run"
echo '{"epoch": 1, "earlier": true}' > "$run/metrics.jsonl"
CAT=data
npyrun() { # npyrun NP PATTERN IMAGES LABELS [ARGS...]
  local np=$1 pat=$2 im=$3 lb=$4
  shift 4
  expect "$np" 1 "$pat" --config "$CONFIG" --run-dir "$run" --set data.dir="$npy" --set data.train_images="$im" \
    --set data.train_labels="$lb" --set data.test_images=x.npy --set data.test_labels=y.npy --set model.hidden=16 "$@"
}
npyrun 2 "fortran.npy: .*[Ff]ortran" fortran.npy y.npy
npyrun 2 "bigendian.npy: .*big-endian" bigendian.npy y.npy
npyrun 2 "object.npy: .*(object|dtype)" object.npy y.npy
npyrun 2 "float64.npy: .*dtype" float64.npy y.npy
npyrun 2 "y63.npy.*63.*64|64.*63.*y63.npy" x.npy y63.npy
npyrun 2 "yneg.npy: .*(-1|negative)" x.npy yneg.npy
npyrun 2 "ybig.npy: .*65536" x.npy ybig.npy
npyrun 2 "nan.npy: .*sample 9" nan.npy y.npy
npyrun 2 "short.npy: .*(size|bytes)" short.npy y.npy
npyrun 2 "cifar.bin: .*3073" cifar.bin "" --set data.format=cifar10 --set data.test_images=cifar.bin --set data.test_labels=
npyrun 2 "must be empty|labels" cifar.bin y.npy --set data.format=cifar10
# (heartbeat/ is the hang watchdog's, made before the data are read.)
if grep -q earlier "$run/metrics.jsonl" && [ "$(ls "$run" | grep -v '^heartbeat$')" = metrics.jsonl ]; then
  pass "the refused .npy/CIFAR runs kept the earlier run's files"
else
  fail "a refused .npy/CIFAR run touched the earlier run's files"; ls -R "$run"
fi

# Token shards (src/data/tokens.c) under a small gpt (window = model.block + 1
# = 17): each refusal names the shard and the header field, the token or the
# window, on every rank, and an earlier run's files stay.
tok=$WORK/tokens
mkdir -p "$tok"
"$PY" - "$tok" <<'PYEOF'
import struct, sys
d = sys.argv[1]
def shard(name, toks, magic=20240520, version=1, count=None, extra=b""):
    n = len(toks) if count is None else count
    with open(d + "/" + name, "wb") as f:
        f.write(struct.pack("<256i", magic, version, n, *([0] * 253)))
        f.write(struct.pack("<%dH" % len(toks), *toks) + extra)
ok = [i % 200 for i in range(400)]
shard("ok.bin", ok)
shard("magic.bin", ok, magic=20240521)
shard("v2.bin", ok, version=2)
shard("count.bin", ok, count=500)
shard("big.bin", ok[:123] + [300] + ok[124:])
shard("small.bin", ok[:10])
PYEOF
run=$WORK/keeptok
mkdir -p "$run"
echo '{"epoch": 1, "earlier": true}' > "$run/metrics.jsonl"
tokrun() { # tokrun NP PATTERN TRAIN_SHARDS [ARGS...]
  local np=$1 pat=$2 im=$3
  shift 3
  expect "$np" 1 "$pat" --config "$CT_SOURCE_DIR/configs/moby-gpt.ini" --run-dir "$run" --set data.dir="$tok" \
    --set data.train_images="$im" --set data.test_images=ok.bin --set model.depth=1 --set model.width=32 \
    --set model.heads=2 --set model.block=16 "$@"
}
tokrun 2 "magic.bin: not a token shard: header\[0\] \(magic\) is 20240521 .*expected 20240520" magic.bin
tokrun 2 "v2.bin: token shard header\[1\] \(version\) is 2, expected 1" ok.bin,v2.bin
tokrun 2 "count.bin: token shard header\[2\] \(token count\) is 500, but the file has 1824 bytes" count.bin
tokrun 2 "big.bin: token 123 \(byte offset 1270\) is 300: expected every token below data.vocab = 256" big.bin
tokrun 2 "small.bin: 10 tokens, fewer than one window of 17" small.bin
tokrun 2 "must be empty for tokens" ok.bin --set data.train_labels=ok.bin
if grep -q earlier "$run/metrics.jsonl" && [ "$(ls "$run" | grep -v '^heartbeat$')" = metrics.jsonl ]; then
  pass "the refused token-shard runs kept the earlier run's files"
else
  fail "a refused token-shard run touched the earlier run's files"; ls -R "$run"
fi

# The Slurm templates (run here as plain scripts: the check comes before any
# launcher): a program that is not there is named, exit 127, not a launcher's
# status that reads like a signal (Open MPI's mpirun exits 132, hydra 255).
CAT=environment
for t in train.sbatch train-srun.sbatch; do
  out=$WORK/sbatch-$t
  CTRAIN_BINARY=$WORK/no/ctrain-dist bash "$CT_SOURCE_DIR/cluster/slurm/$t" "$CONFIG" "$WORK/sb" > "$out.log" 2>&1 &&
    rc=0 || rc=$?
  inventory "$CAT" "sbatch $t with CTRAIN_BINARY=WORK/no/ctrain-dist" 1 "$rc" "$out.log"
  if [ "$rc" = 127 ] && grep -q "failed: the program $WORK/no/ctrain-dist is not an executable file here" "$out.log" &&
     [ ! -e "$WORK/sb" ]; then
    pass "$t without the program: exit 127, $(grep -m1 -o 'the program .* here' "$out.log")"
  else
    fail "$t without the program: exit $rc"; cat "$out.log"
  fi
done

# Nothing already saved is lost: a failed run leaves the earlier run's files
# untouched; a new successful run moves them to previous-*/ first.
run=$WORK/keep
mkdir -p "$run"
echo '{"epoch": 1, "earlier": true}' > "$run/metrics.jsonl"
CAT=data
expect 2 1 "cannot open" --config "$CONFIG" --run-dir "$run" --set data.dir="$WORK/nowhere"
if grep -q earlier "$run/metrics.jsonl"; then pass "failed run kept the earlier metrics"; else fail "earlier metrics lost"; fi
if run_np 2 "$WORK/keep2" --config "$CONFIG" --run-dir "$run" --set train.max_steps=5 &&
   grep -q earlier "$run"/previous-*/metrics.jsonl && ! grep -q earlier "$run/metrics.jsonl"; then
  pass "a new run moved the earlier run's files to previous-*/"
else
  fail "earlier run's files not preserved"; ls -R "$run"
fi
finish
