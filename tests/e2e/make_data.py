#!/usr/bin/env python3
"""Data files for tests/e2e/test_data_formats.sh, written with NumPy.

  make_data.py fmnist-npy FMNIST_DIR OUT_DIR
      Fashion-MNIST's IDX files as .npy: train-u8.npy / test-u8.npy (uint8,
      (N, 28, 28)), train-f32.npy / test-f32.npy (float32, (N, 1, 28, 28),
      divided by 255 in float32, as torchvision's ToTensor does), and
      train-labels.npy (int64) / test-labels.npy (int32).
  make_data.py cifar OUT_DIR
      A small set in the CIFAR-10 binary format: data_batch_1.bin (200
      records), data_batch_2.bin (120) and test_batch.bin (100); a record is
      a label byte (0..9) and 3x32x32 pixel bytes (red, green, blue planes).
      The pixels are a per-class pattern plus noise, so that a model can
      learn something from them.
"""
import gzip
import os
import sys

import numpy as np


def idx(path):
    with gzip.open(path) as f:
        data = f.read()
    rank = data[3]
    dims = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(rank)]
    return np.frombuffer(data, np.uint8, offset=4 + 4 * rank).reshape(dims)


def fmnist_npy(src, out):
    os.makedirs(out, exist_ok=True)
    for split, name in (("train", "train"), ("test", "t10k")):
        images = idx(os.path.join(src, "%s-images-idx3-ubyte.gz" % name))
        labels = idx(os.path.join(src, "%s-labels-idx1-ubyte.gz" % name))
        np.save(os.path.join(out, "%s-u8.npy" % split), images)
        f32 = (images.astype(np.float32) / np.float32(255)).reshape(len(images), 1, 28, 28)
        np.save(os.path.join(out, "%s-f32.npy" % split), f32)
        np.save(os.path.join(out, "%s-labels.npy" % split),
                labels.astype(np.int64 if split == "train" else np.int32))


def cifar(out):
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(20261204)
    patterns = rng.integers(0, 256, size=(10, 3, 32, 32))
    for name, n in (("data_batch_1.bin", 200), ("data_batch_2.bin", 120), ("test_batch.bin", 100)):
        labels = rng.integers(0, 10, size=n)
        noise = rng.integers(-60, 61, size=(n, 3, 32, 32))
        pixels = np.clip(patterns[labels] + noise, 0, 255).astype(np.uint8)
        records = np.concatenate([labels.astype(np.uint8)[:, None], pixels.reshape(n, -1)], axis=1)
        records.tofile(os.path.join(out, name))


if __name__ == "__main__":
    if sys.argv[1] == "fmnist-npy":
        fmnist_npy(sys.argv[2], sys.argv[3])
    elif sys.argv[1] == "cifar":
        cifar(sys.argv[2])
    else:
        sys.exit("usage: make_data.py fmnist-npy FMNIST_DIR OUT_DIR | cifar OUT_DIR")
