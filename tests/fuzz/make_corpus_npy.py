#!/usr/bin/python3
"""Seeds of fuzz_npy (tests/fuzz/corpus/npy/), in its input encoding
(README.md): flags:u8  len:u32le A  B (the rest).

    /usr/bin/python3 tests/fuzz/make_corpus_npy.py [CORPUS_DIR]

Needs Debian's python3-numpy: the .npy seeds are the bytes numpy writes
(np.save, and numpy.lib.format.write_array for versions 2.0 and 3.0); the
CIFAR-10 seeds are one-record batch files. Called by make_corpus.sh; small on
purpose (libFuzzer's -max_len follows the largest seed).
"""
import io
import os
import struct
import sys

import numpy as np
from numpy.lib import format as npf

here = os.path.dirname(os.path.abspath(__file__))
out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "corpus", "npy")
os.makedirs(out, exist_ok=True)


def npy(arr, version=None, **kw):
    f = io.BytesIO()
    if version is None:
        np.save(f, arr, **kw)
    else:
        npf.write_array(f, arr, version=version, **kw)
    return f.getvalue()


def put(name, flags, a, b=b""):
    with open(os.path.join(out, name), "wb") as f:
        f.write(bytes([flags]) + struct.pack("<I", len(a)) + a + b)


def u8(shape):
    return (np.arange(int(np.prod(shape))) * 7 % 256).astype(np.uint8).reshape(shape)


labels = np.array([3, 0, 7], dtype=np.uint8)
# the header parser alone
put("parse-u8-v1", 0x00, npy(u8((3, 4, 5))))
put("parse-fortran", 0x00, npy(np.asfortranarray(u8((3, 4, 5)))))
put("parse-bigendian", 0x00, npy(u8((2, 2)).astype(">f4")))
put("parse-object", 0x00, npy(np.array([None, 1], dtype=object), allow_pickle=True))
put("parse-0d-f64", 0x00, npy(np.float64(1.5)))
# data sets: images + labels, the layouts (flags >> 4: auto, nchw, nhwc), format auto
put("u8-nhw-v1-labels-u1", 0x03, npy(u8((3, 4, 5))), npy(labels))
put("u8-nhw-v2", 0x01, npy(u8((3, 4, 5)), version=(2, 0)))
put("u8-nhw-v3-auto", 0x05, npy(u8((3, 4, 5)), version=(3, 0)))
put("u8-nhwc-nchw-labels-i4", 0x13, npy(u8((3, 2, 4, 3))), npy(labels.astype("<i4")))
put("f32-nhwc-auto-labels-i8", 0x27,
    npy((np.arange(36, dtype=np.float32) / 8 - 1).reshape(3, 2, 2, 3)), npy(labels.astype("<i8")))
put("f32-nan", 0x01, npy(np.array([[[0.0, np.nan]]], dtype=np.float32)))
put("labels-neg-i4", 0x03, npy(u8((3, 1, 1))), npy(np.array([0, -1, 2], dtype="<i4")))
# cifar10: one-record batch files, one or two of them
rec = lambda lab: bytes([lab]) + bytes((k * 7 + lab) % 256 for k in range(3072))
put("cifar-one", 0x08, rec(3))
put("cifar-two", 0x0A, rec(9), rec(0))
