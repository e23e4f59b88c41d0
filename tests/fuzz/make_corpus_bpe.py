#!/usr/bin/env python3
"""Seeds of fuzz_bpe (tests/fuzz/README.md): len:u32le ENCODER, len:u32le
MERGES, then TEXT. A small vocabulary in GPT-2's formats (the 256 one-byte
tokens in GPT-2's byte alphabet, a few merges, <|endoftext|>), texts with
contractions, whitespace runs, numbers, non-ASCII and invalid UTF-8, and
broken files (a duplicate id, a merge of unknown parts, a bad escape).
   python3 tests/fuzz/make_corpus_bpe.py tests/fuzz/corpus/bpe"""
import json, os, struct, sys

bs = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
cs = bs[:]
for b in range(256):
    if b not in bs:
        bs.append(b)
        cs.append(256 + len(cs) - 188)
alpha = {b: chr(c) for b, c in zip(bs, cs)}
spell = lambda s: "".join(alpha[b] for b in s.encode("utf-8"))

merges = [(" ", "t"), ("h", "e"), (" t", "he"), ("i", "n"), ("in", "g"), ("'", "s"), (" ", " "), ("1", "2")]
enc = {alpha[b]: b for b in range(256)}
for i, (a, c) in enumerate(merges):
    enc[spell(a + c)] = 256 + i
enc["<|endoftext|>"] = 256 + len(merges)
good_enc = json.dumps(enc, ensure_ascii=False).encode("utf-8")
good_mer = ("#version: 0.2\n" + "".join("%s %s\n" % (spell(a), spell(c)) for a, c in merges)).encode("utf-8")

texts = [b"the thing's 12 things", b"  \n\n  x\t\ty  ", "caf\u00e9 \u4e2d\u6587 \U0001F600!?".encode("utf-8"),
         b"\xff\xc3 a\xe2\x80", b"it's 'S ''s we'll 3.14"]
seeds = [(good_enc, good_mer, t) for t in texts]
seeds += [(b'{"a": 0, "b": 0}', good_mer, b"x"), (good_enc, b"#version: 0.2\nq z\n", b"x"),
          (b'{"\\ud800": 0}', good_mer, b"x"), (good_enc, b"", b"the")]
out = sys.argv[1]
os.makedirs(out, exist_ok=True)
for i, (e, m, t) in enumerate(seeds):
    with open(os.path.join(out, "seed-%02d" % i), "wb") as f:
        f.write(struct.pack("<I", len(e)) + e + struct.pack("<I", len(m)) + m + t)
