#!/usr/bin/env bash
# log.tensorboard = true: rank 0's TensorBoard event files in RUN_DIR/tb,
# read back by an independent reader (below, in Python: the TFRecord framing
# and CRC-32C by hand, the Event messages by a hand-written protobuf wire
# decoder of the few fields; no TensorFlow, protoc or python3-protobuf).
# - a 2-rank run of two epochs: one file; every record's CRCs right, the
#   first record file_version "brain.Event:2", and every scalar equal (as a
#   float32) to its steps.jsonl / metrics.jsonl value, no more and no fewer;
# - stopped at max_steps then --resume auto: a second file, no (tag, step)
#   twice across the files, the union equal to the logs, the parameters
#   those of the straight run;
# - a run that fails at step 15 (an injected non-finite loss) after its
#   checkpoint at 10, then --resume auto: the events past step 10 of the first
#   file are cut (the steps are redone), and again equal to the logs;
# - a disk that fills under tb/ (CT_TB_FAILPOINT: the file becomes /dev/full,
#   so the real write fails with ENOSPC) and a tb/ that cannot be made (a
#   file of that name, at a resume in place): one warning, training ends with
#   the same parameters as a run without event files.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
base=(--config "$CONFIG" --set model.hidden=32 --set train.global_batch=3000 --set train.epochs=2
      --set log.every_steps=5 --set checkpoint.every_epochs=0 --set train.eval_batch=auto)
tb=(--set log.tensorboard=true)

# check RUN_DIR: the reader; prints what it checked, or what is wrong (exit 1).
check() {
  python3 - "$1" <<'PY'
import glob, json, math, os, struct, sys

run = sys.argv[1]

def crc32c(data, table=[]):
    if not table:
        for i in range(256):
            c = i
            for _ in range(8):
                c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
            table.append(c)
    c = 0xFFFFFFFF
    for b in data:
        c = table[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF

def masked(c):
    return ((((c >> 15) | (c << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF

def varint(b, i):
    v = s = 0
    while True:
        x = b[i]; i += 1
        v |= (x & 0x7F) << s; s += 7
        if not x & 0x80:
            return v, i

def fields(b):
    i = 0
    while i < len(b):
        key, i = varint(b, i)
        num, wt = key >> 3, key & 7
        if wt == 0:
            v, i = varint(b, i)
        elif wt == 1:
            v = b[i:i + 8]; i += 8
        elif wt == 5:
            v = b[i:i + 4]; i += 4
        elif wt == 2:
            n, i = varint(b, i); v = b[i:i + n]; i += n
        else:
            raise ValueError("wire type %d" % wt)
        yield num, wt, v

def event(b):
    ev = {"values": []}
    for num, wt, v in fields(b):
        if num == 1 and wt == 1: ev["wall_time"] = struct.unpack("<d", v)[0]
        elif num == 2 and wt == 0: ev["step"] = v - (1 << 64) if v >> 63 else v
        elif num == 3 and wt == 2: ev["file_version"] = v.decode()
        elif num == 5 and wt == 2:
            ev["summary"] = True
            for n2, w2, val in fields(v):
                assert n2 == 1 and w2 == 2, "Summary field %d" % n2
                tag = fv = None
                for n3, w3, x in fields(val):
                    if n3 == 1 and w3 == 2: tag = x.decode()
                    elif n3 == 2 and w3 == 5: fv = struct.unpack("<f", x)[0]
                ev["values"].append((tag, fv))
        else:
            raise ValueError("unexpected field %d (wire type %d)" % (num, wt))
    return ev

files = sorted(glob.glob(os.path.join(run, "tb", "events.out.tfevents.*")))
if not files:
    sys.exit("no event files in %s/tb" % run)
seen, records = {}, 0
for f in files:
    b = open(f, "rb").read()
    i, first = 0, True
    while i < len(b):
        assert len(b) - i >= 16, "%s: %d bytes left at %d" % (f, len(b) - i, i)
        (n,) = struct.unpack("<Q", b[i:i + 8])
        (lc,) = struct.unpack("<I", b[i + 8:i + 12])
        assert lc == masked(crc32c(b[i:i + 8])), "%s: length CRC at %d" % (f, i)
        data = b[i + 12:i + 12 + n]
        (dc,) = struct.unpack("<I", b[i + 12 + n:i + 16 + n])
        assert len(data) == n and dc == masked(crc32c(data)), "%s: data CRC at %d" % (f, i)
        ev = event(data)
        assert ev.get("wall_time", 0) > 1.5e9, "%s: wall_time %r" % (f, ev.get("wall_time"))
        if first:
            assert ev.get("file_version") == "brain.Event:2" and "summary" not in ev, "%s: first %r" % (f, ev)
        else:
            assert "file_version" not in ev and "summary" in ev and "step" in ev, "%s: %r" % (f, ev)
            for tag, v in ev["values"]:
                k = (tag, ev["step"])
                assert k not in seen, "%s: %s at step %d written twice" % (f, tag, ev["step"])
                seen[k] = v
        first = False
        records += 1
        i += 16 + n

f32 = lambda x: struct.unpack("<f", struct.pack("<f", x))[0]
STEP = [("train/loss", "loss"), ("train/acc", "acc"), ("lr", "lr"), ("throughput/tokens_per_s", "tokens_per_s")]
EPOCH = [("epoch/train_loss", "train_loss"), ("epoch/train_acc", "train_acc"), ("test/loss", "test_loss"),
         ("test/acc", "test_acc"), ("test/bpb", "val_bpb"), ("epoch/lr", "lr"),
         ("throughput/samples_per_s", "samples_per_s"), ("throughput/epoch_tokens_per_s", "tokens_per_s"),
         ("mfu", "mfu"), ("time/epoch_s", "epoch_s"), ("time/eval_s", "eval_s"),
         ("phase/data_wait_s", "data_wait_s_max"), ("phase/forward_backward_s", "forward_backward_s_max"),
         ("phase/exposed_comm_s", "exposed_comm_s_max"), ("phase/optim_s", "optim_s_max"),
         ("memory/peak_rss_mib", "peak_rss_mib"), ("memory/pss_mib", "pss_mib")]
want = {}
for name, tags in (("steps.jsonl", STEP), ("metrics.jsonl", EPOCH)):
    for line in open(os.path.join(run, name)):
        row = json.loads(line)
        for tag, key in tags:
            if row.get(key) is not None:
                k = (tag, row["step"])
                assert k not in want, "%s: step %d twice" % (name, row["step"])
                want[k] = f32(row[key])
missing = sorted(set(want) - set(seen))
extra = sorted(set(seen) - set(want))
wrong = sorted(k for k in want if k in seen and seen[k] != want[k])
if missing or extra or wrong:
    sys.exit("missing %s; extra %s; differ %s" % (missing[:5], extra[:5],
             [(k, seen[k], want[k]) for k in wrong[:5]]))
tags = sorted({t for t, _ in seen})
print("%d files, %d records, %d scalars equal to the logs (%s)" % (len(files), records, len(seen), " ".join(tags)))
PY
}
digest() { jsonl "$1/metrics.jsonl" -1 param_sha256 2>/dev/null || echo "none in $1"; }

# A straight 2-rank run of two epochs (20 steps each).
run=$WORK/a
if run_np 2 "$WORK/a" "${base[@]}" "${tb[@]}" --run-dir "$run" && out=$(check "$run"); then
  if [ "$(ls "$run/tb" | wc -l)" = 1 ] && grep -q "test/acc" <<<"$out" && grep -q "phase/optim_s" <<<"$out"; then
    pass "2 ranks, 2 epochs: $out"
  else
    fail "2 ranks: $(ls "$run/tb") / $out"
  fi
else
  fail "2 ranks: ${out:-run failed}"; tail -20 "$WORK/a.log"
fi

# The reader is not blind: one flipped bit of the event data is seen.
bad=$WORK/bad
mkdir -p "$bad/tb" && cp "$WORK/a/steps.jsonl" "$WORK/a/metrics.jsonl" "$bad/" &&
  cp "$WORK/a/tb/"events.out.tfevents.* "$bad/tb/" 2>/dev/null
f=$(ls "$bad/tb/"events.out.tfevents.* 2>/dev/null | head -1)
if [ -n "$f" ] && python3 -c "
import sys; p = sys.argv[1]; b = bytearray(open(p, 'rb').read()); b[len(b) - 9] ^= 4; open(p, 'wb').write(b)" "$f" &&
   ! out=$(check "$bad" 2>&1) && grep -q "data CRC" <<<"$out"; then
  pass "a flipped bit: the reader says $(tail -1 <<<"$out")"
else
  fail "a flipped bit was not seen: ${out:-no file}"
fi

# Stopped at step 27, resumed to the end: two files, nothing twice.
run=$WORK/b
if run_np 2 "$WORK/b1" "${base[@]}" "${tb[@]}" --run-dir "$run" --set train.max_steps=27 &&
   run_np 2 "$WORK/b2" "${base[@]}" "${tb[@]}" --run-dir "$run" --resume auto && out=$(check "$run"); then
  if [ "$(ls "$run/tb" | wc -l)" = 2 ] && [ "$(digest "$run")" = "$(digest "$WORK/a")" ]; then
    pass "stop at 27, resume: $out"
  else
    fail "stop at 27, resume: $(ls "$run/tb") / $(digest "$run") vs $(digest "$WORK/a")"
  fi
else
  fail "stop at 27, resume: ${out:-a run failed}"; tail -20 "$WORK/b1.log" "$WORK/b2.log"
fi

# Failed at step 15 after the checkpoint at 10: the resume redoes 11..15.
run=$WORK/c
if CT_INJECT_NONFINITE=15:0 run_np 1 "$WORK/c1" "${base[@]}" "${tb[@]}" --run-dir "$run" \
     --set checkpoint.every_steps=10 --set log.every_steps=1; then
  fail "the injected non-finite loss did not stop the run"
elif run_np 1 "$WORK/c2" "${base[@]}" "${tb[@]}" --run-dir "$run" --set checkpoint.every_steps=10 \
       --set log.every_steps=1 --resume auto && out=$(check "$run"); then
  if grep -q "tensorboard: .*: cut [0-9]* bytes of events past step 10" "$WORK/c2.log" &&
     [ "$(ls "$run/tb" | wc -l)" = 2 ]; then
    pass "failed at 15, resumed from 10: the first file cut at 10; $out"
  else
    fail "failed at 15, resumed: no cut said"; grep tensorboard "$WORK/c2.log"; ls "$run/tb"
  fi
else
  fail "failed at 15, resume: ${out:-the resume failed}"; tail -20 "$WORK/c1.log" "$WORK/c2.log"
fi

# Disk full under tb/ from step 10 on: one warning, the run ends as without
# a failure (the same parameters and logs as the first run), and the event
# file keeps its whole records before step 10 (none torn).
run=$WORK/d
if CT_TB_FAILPOINT=10:0 run_np 2 "$WORK/d" "${base[@]}" "${tb[@]}" --run-dir "$run"; then
  warned=$(grep -c 'tensorboard: .*No space left on device; no more events are written' "$WORK/d.log" || true)
  kept=$(python3 - "$run" <<'PY'
import glob, struct, sys
f = glob.glob(sys.argv[1] + "/tb/events.out.tfevents.*")[0]
b = open(f, "rb").read(); i = n = 0
while len(b) - i >= 16:
    (k,) = struct.unpack("<Q", b[i:i + 8]); i += 16 + k; n += 1
print("%d whole records" % n if i == len(b) else "torn at %d" % i)
PY
)
  if [ "$warned" = 1 ] && [ "$(digest "$run")" = "$(digest "$WORK/a")" ] &&
     [ "$(jsonl "$run/steps.jsonl" all step loss)" = "$(jsonl "$WORK/a/steps.jsonl" all step loss)" ] &&
     [ "$kept" = "2 whole records" ]; then
    pass "full disk at step 10: one warning, $kept kept (file_version, step 5), same parameters and steps.jsonl"
  else
    fail "full disk: $warned warnings, $kept, $(digest "$run") vs $(digest "$WORK/a")"; grep tensorboard "$WORK/d.log"
  fi
else
  fail "full disk at step 10: the run failed"; tail -20 "$WORK/d.log"
fi

# tb/ cannot be made at a resume in place (a file of that name): a warning,
# and the run goes on to its end.
run=$WORK/e
if run_np 1 "$WORK/e1" "${base[@]}" "${tb[@]}" --run-dir "$run" --set train.max_steps=8 &&
   rm -r "$run/tb" && echo "not a directory" > "$run/tb" &&
   run_np 1 "$WORK/e2" "${base[@]}" "${tb[@]}" --run-dir "$run" --set train.max_steps=12 --resume auto &&
   grep -q "tensorboard: .*/tb: cannot create directory: .*no more events are written" "$WORK/e2.log" &&
   [ "$(jsonl "$run/metrics.jsonl" -1 step)" = 12 ]; then
  pass "tb/ a file: $(grep -o 'tensorboard: .*' "$WORK/e2.log" | head -1)"
else
  fail "tb/ a file"; tail -20 "$WORK/e1.log" "$WORK/e2.log"
fi
finish
