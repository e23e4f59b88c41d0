#!/usr/bin/python3
"""Weights made by PyTorch for tests/e2e/test_init_from.sh (train.init_from).

    make_init_weights.py OUTDIR CONFIG [KEY=VALUE ...]

Builds the nanoGPT-style GPT of tests/bench/torch_gpt_peer.py for the recipe
(CONFIG with the --set overrides as KEY=VALUE), draws its weights with
PyTorch's own seeded initialisation (torch.manual_seed(7); LayerNorm weights
and every bias moved off their 1 and 0 so that a tensor loaded into the wrong
place shows), and writes its state_dict (nanoGPT's names, lm_head.weight
included, as torch's state_dict has it) as:

    torch.safetensors       F32 (by hand: Debian 12 has no safetensors package)
    torch.npz               numpy.savez_compressed, '<f4' (deflated, ZIP64 records)
    torch-bf16.safetensors  BF16 (the values rounded to bfloat16 by torch)
    torch-f16.npz           numpy.savez, '<f2'
    wide.safetensors        the same recipe at width 48 (a shape mismatch)
    f64.safetensors         F64 (a dtype not read)
    losses.json             {file: PyTorch's val loss with that file's values}

The val loss is torch_gpt_peer.val_loss_sums over the recipe's val set
(windows from offset 0), the weights widened to float32 as ctrain-dist does.
"""
import json
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench"))
import torch_gpt_peer as P  # noqa: E402

ST_DTYPES = {torch.float32: "F32", torch.bfloat16: "BF16", torch.float16: "F16", torch.float64: "F64"}


def write_safetensors(path, sd):
    header, blobs, at = {"__metadata__": {"made_by": "make_init_weights.py"}}, [], 0
    for name, t in sd.items():
        t = t.contiguous()
        raw = t.view(torch.int16).numpy().tobytes() if t.dtype == torch.bfloat16 else t.numpy().tobytes()
        header[name] = {"dtype": ST_DTYPES[t.dtype], "shape": list(t.shape),
                        "data_offsets": [at, at + len(raw)]}
        blobs.append(raw)
        at += len(raw)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(len(h).to_bytes(8, "little") + h + b"".join(blobs))


def model(r, V):
    torch.manual_seed(7)
    m = P.GPT.from_recipe(r, V)
    with torch.no_grad():
        for name, p in m.named_parameters():
            if name.endswith(".bias") or ".ln_" in name:
                p.add_(0.05 * torch.randn_like(p))
    return m


def main():
    out, config, sets = sys.argv[1], sys.argv[2], sys.argv[3:]
    torch.set_num_threads(1)
    r = P.Recipe(config, sets)
    train = P.TokenShards([r.path_of(f) for f in r.train_files], r.block, r.seed)
    vset = P.TokenShards([r.path_of(f) for f in r.val_files], r.block, r.seed)
    V = P.vocab_size(r, train, vset)
    m = model(r, V)
    sd = {k: v.detach().clone() for k, v in m.state_dict().items()}
    losses = {}

    def loss_of(tensors):
        q = P.GPT.from_recipe(r, V)
        q.load_state_dict({k: v.float() for k, v in tensors.items()}, strict=True)
        total, n = P.val_loss_sums(q, vset, 64)
        return total / n

    write_safetensors(os.path.join(out, "torch.safetensors"), sd)
    losses["torch.safetensors"] = loss_of(sd)
    np.savez_compressed(os.path.join(out, "torch.npz"), **{k: v.numpy() for k, v in sd.items()})
    losses["torch.npz"] = losses["torch.safetensors"]
    bf = {k: v.to(torch.bfloat16) for k, v in sd.items()}
    write_safetensors(os.path.join(out, "torch-bf16.safetensors"), bf)
    losses["torch-bf16.safetensors"] = loss_of(bf)
    f16 = {k: v.to(torch.float16) for k, v in sd.items()}
    np.savez(os.path.join(out, "torch-f16.npz"), **{k: v.numpy() for k, v in f16.items()})
    losses["torch-f16.npz"] = loss_of(f16)
    write_safetensors(os.path.join(out, "f64.safetensors"), {k: v.double() for k, v in sd.items()})
    r.width = 48
    write_safetensors(os.path.join(out, "wide.safetensors"), dict(model(r, V).state_dict()))
    with open(os.path.join(out, "losses.json"), "w") as f:
        json.dump(losses, f)
    print(json.dumps(losses))


if __name__ == "__main__":
    main()
