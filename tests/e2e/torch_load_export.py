"""Load a `ctrain-dist export` file into a PyTorch model and evaluate it.

    /usr/bin/python3 torch_load_export.py FILE.npz|FILE.safetensors... DATA_DIR

Builds the PyTorch model the export describes (mlp or cnn, sizes read from
the tensors' shapes; modules named "layers.<i>" as ours and as
tests/fixtures/make_fixtures_models.py's), loads the state_dict with strict
names (only BatchNorm's num_batches_tracked, which ctrain-dist does not keep,
may be missing), evaluates the Fashion-MNIST test set in eval mode with the
normalisation of the recorded config, and prints "FILE test_acc A test_loss L",
a line per file (several files in one process: PyTorch is imported once).
The safetensors file is read by hand (8-byte header length, JSON header, raw
little-endian float32): Debian 12 has no safetensors package.
"""
import configparser
import gzip
import json
import os
import struct
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def read_export(path):
    if path.endswith(".npz"):
        z = np.load(path)
        meta = json.loads(str(z["__metadata__"]))
        tensors = {k: z[k] for k in z.files if k != "__metadata__"}
        return tensors, meta
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    meta = header.pop("__metadata__")
    base = 8 + n
    tensors = {}
    for name, info in header.items():
        assert info["dtype"] == "F32", info
        b, e = info["data_offsets"]
        tensors[name] = np.frombuffer(blob[base + b:base + e], dtype="<f4").reshape(info["shape"])
    return tensors, meta


def build(model, sd):
    """The torch twin of our model, sizes from the exported shapes."""
    if model == "mlp":
        n = len([k for k in sd if k.endswith(".weight")])
        layers = []
        for i in range(n):
            w = sd["layers.%d.weight" % (2 * i)]
            layers.append(nn.Linear(w.shape[1], w.shape[0]))
            if i < n - 1:
                layers.append(nn.ReLU())
        return nn.Sequential(*layers), (784,)
    if model == "cnn":
        # [Conv3x3(p1)-BN-ReLU-MaxPool2] per stage, Flatten, Linear-ReLU-Dropout-Linear.
        layers, i = [], 0
        while "layers.%d.weight" % i in sd and sd["layers.%d.weight" % i].ndim == 4:
            oc, c, k, _ = sd["layers.%d.weight" % i].shape
            layers += [nn.Conv2d(c, oc, k, padding=k // 2), nn.BatchNorm2d(oc), nn.ReLU(),
                       nn.MaxPool2d(2, 2)]
            i += 4
        fc1, fc2 = sd["layers.%d.weight" % (i + 1)], sd["layers.%d.weight" % (i + 4)]
        layers += [nn.Flatten(), nn.Linear(fc1.shape[1], fc1.shape[0]), nn.ReLU(), nn.Dropout(0.0),
                   nn.Linear(fc2.shape[1], fc2.shape[0])]
        return nn.Sequential(*layers), (1, 28, 28)
    raise SystemExit("torch_load_export.py: no PyTorch twin for model %r" % model)


def idx(path):
    """An IDX file, gzipped or not (as ctrain-dist: by its first two bytes)."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    ndim = data[3]
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def evaluate(path, data_dir):
    tensors, meta = read_export(path)
    cfg = configparser.ConfigParser(inline_comment_prefixes=("#",))
    cfg.read_string(meta["config"])
    net, shape = build(meta["model"], tensors)
    # state_dict names are "layers.<i>..." for ours; nn.Sequential's are "<i>...".
    sd = {k[len("layers."):]: torch.from_numpy(v.copy()) for k, v in tensors.items()}
    missing, unexpected = net.load_state_dict(sd, strict=False)
    missing = [k for k in missing if not k.endswith("num_batches_tracked")]
    if missing or unexpected:
        raise SystemExit("torch_load_export.py: missing %s, unexpected %s" % (missing, unexpected))
    mean, std = float(cfg["data"]["mean"]), float(cfg["data"]["std"])
    x = idx(os.path.join(data_dir, cfg["data"]["test_images"])).astype(np.float32) / 255.0
    y = torch.from_numpy(idx(os.path.join(data_dir, cfg["data"]["test_labels"])).astype(np.int64))
    x = torch.from_numpy((x - mean) / std).reshape((-1,) + shape)
    net.eval()
    with torch.no_grad():
        logits = torch.cat([net(x[i:i + 1000]) for i in range(0, len(x), 1000)])
    loss = F.cross_entropy(logits, y).item()
    acc = (logits.argmax(1) == y).float().mean().item()
    print("%s test_acc %.4f test_loss %.6f" % (path, acc, loss))


def main():
    if len(sys.argv) < 3:
        raise SystemExit("usage: torch_load_export.py FILE... DATA_DIR")
    torch.set_num_threads(1)
    for path in sys.argv[1:-1]:
        evaluate(path, sys.argv[-1])


if __name__ == "__main__":
    main()
