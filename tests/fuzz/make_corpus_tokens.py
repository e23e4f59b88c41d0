#!/usr/bin/python3
"""Seeds of fuzz_tokens (tests/fuzz/corpus/tokens/), in its input encoding
(README.md): flags:u8  len:u32le A  B (the rest).

    /usr/bin/python3 tests/fuzz/make_corpus_tokens.py [CORPUS_DIR]

llm.c-layout token shards (a header of 256 little-endian int32: magic
20240520, version 1, token count; then uint16 tokens) of a few dozen tokens:
byte tokens and GPT-2-range ones, one and two shards, format auto, and the
refusals (version 2, a count the size cannot hold, a short file). Called by
make_corpus.sh; small on purpose (libFuzzer's -max_len follows the largest
seed).
"""
import os
import struct
import sys

here = os.path.dirname(os.path.abspath(__file__))
out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "corpus", "tokens")
os.makedirs(out, exist_ok=True)


def shard(toks, magic=20240520, version=1, count=None):
    n = len(toks) if count is None else count
    return struct.pack("<256i", magic, version, n, *([0] * 253)) + struct.pack("<%dH" % len(toks), *toks)


def put(name, flags, a, b=b""):
    with open(os.path.join(out, name), "wb") as f:
        f.write(bytes([flags]) + struct.pack("<I", len(a)) + a + b)


text = list(b"Call me Ishmael. Some years ago, never mind how long")
gpt2 = [15496, 995, 11, 50256, 464, 2068, 7586, 21831, 18045, 625, 262, 16931, 3290, 13, 198, 0]
W = lambda w: (w - 2) << 4  # window w tokens, in the flags' high nibble
put("bytes-vocab256-w8", 0x01 | 0x08 | W(8), shard(text))
put("gpt2-two-shards-w4", 0x01 | 0x02 | W(4), shard(gpt2 * 2), shard(gpt2[:9]))
put("bytes-auto-w17", 0x01 | 0x04 | W(17), shard(text))
put("one-window-w16", 0x01 | W(16), shard(gpt2))
put("version2-header", 0x00, shard(text, version=2))
put("count-past-size", 0x01 | W(2), shard(text, count=len(text) + 3))
put("short-file", 0x01, shard(text)[:100])
put("token-over-vocab", 0x01 | 0x08 | W(5), shard(text[:20] + [300] + text[20:]))
