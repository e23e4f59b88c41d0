#!/usr/bin/python3
"""PyTorch DDP (CPU, gloo) peer of ctrain-dist's byte-level GPT (model.name = gpt).

    /usr/bin/python3 tests/bench/torch_gpt_peer.py --config configs/moby-gpt.ini --world 2
    mpirun --allow-run-as-root --oversubscribe -np 2 /usr/bin/python3 \\
        tests/bench/torch_gpt_peer.py --config configs/moby-gpt.ini --set train.max_steps=200

What is the same as ours, so that the two sides train the same function on the
same samples in the same order (only the floating-point rounding differs):

  * the architecture of src/models/gpt.c, under nanoGPT's state_dict names:
    transformer.wte (V, C) + transformer.wpe (T, C), depth blocks of
    x + attn(ln_1(x)) and x + mlp(ln_2(x)) (attn.c_attn (3C, C) + bias, causal
    softmax(q k^T / sqrt(hs)) v per head, attn.c_proj (C, C) + bias; mlp.c_fc
    (ratio*C, C), GELU (model.gelu: exact or tanh), mlp.c_proj), transformer.ln_f,
    lm_head tied to transformer.wte (one Parameter);
  * the initialisation scheme (distributions, not bits): nn.Linear's defaults,
    U(-1/sqrt(in), 1/sqrt(in)) for weights and biases (src/nn/linear.c,
    attention.c), wte and wpe N(0, 0.02^2) (src/nn/embedding.h), LayerNorm 1 / 0;
  * the data: llm.c-layout token shards (256 x int32 header: 20240520, 1, count;
    uint16 tokens) read with NumPy; a sample is a window of W = block + 1 tokens
    (inputs its first T, targets its last T); shard s holds n_s = floor(ntok_s / W)
    windows, which in epoch e start at an offset drawn from Philox4x32-10 keyed
    by (seed, CT_RNG_WINDOW) (src/data/tokens.c); the epoch's order is
    ct_sampler_permutation (Fisher-Yates with ct_rng_below, src/data/sampler.c),
    global step s takes positions [s*G, (s+1)*G) and rank r the slice
    ct_shard_range(G, N, r); the last incomplete global batch is dropped. Philox
    and both functions are reimplemented here bit for bit (tests/e2e/
    test_gpt_export.sh checks the batches against ours' recorded losses);
  * validation: every non-overlapping window of the val shards at offset 0, the
    mean cross-entropy over all their tokens (nats per token), as `eval`;
  * the optimiser: torch.optim.AdamW over every parameter (ours decays all of
    them: one flat buffer), betas/eps/weight_decay from the config;
    clip_grad_norm_ when optim.clip_norm > 0 (after DDP's allreduce, as ours);
    lr(step) = warmup lr*(step+1)/warmup, then cosine to min_lr over the
    remaining epochs*steps_per_epoch - warmup steps (src/optim/schedule.c);
  * the loss: mean over the rank's B*T positions, gradients averaged over ranks
    (DDP), i.e. the mean over the global batch.

What it is not: a bit-exact twin (random streams for the initial weights
differ, kernels round differently), nor a test. Dropout: refused unless 0.

Threads: one per rank by default (--threads), set before torch is imported
(OMP_NUM_THREADS, OPENBLAS_NUM_THREADS) and with torch.set_num_threads.
Launch: mpirun (rank and world from OMPI_COMM_WORLD_*) or spawn (--world N).
Writes a JSON summary with --json-out (rank 0): tokens/s of the training loop
(rank 0's clock between two barriers), peak RSS per rank, val loss at every
evaluation (epoch ends per train.eval_every, and the last step), per-step loss.

The module can be imported (tests): it then parses nothing and sets no
environment; use Recipe / GPT / TokenShards / permutation / rank_batch.
"""
import argparse
import configparser
import hashlib
import json
import math
import os
import resource
import socket
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# ctrain's defaults (src/config/schema.c) for the keys the peer reads.
DEFAULTS = {
    ("data", "dir"): "", ("data", "format"): "auto", ("data", "vocab"): "0",
    ("model", "depth"): "4", ("model", "width"): "64", ("model", "heads"): "4",
    ("model", "mlp_ratio"): "2", ("model", "gelu"): "exact", ("model", "dropout"): "0",
    ("optim", "name"): "sgd", ("optim", "weight_decay"): "0", ("optim", "beta1"): "0.9",
    ("optim", "beta2"): "0.999", ("optim", "eps"): "1e-8", ("optim", "clip_norm"): "0",
    ("schedule", "name"): "constant", ("schedule", "warmup_steps"): "0", ("schedule", "min_lr"): "0",
    ("train", "max_steps"): "0", ("train", "eval_every"): "1", ("train", "accum_steps"): "1",
    ("train", "deterministic"): "false",
}


class Recipe:
    """The model and training recipe of one of our INI configs, with --set
    overrides (section.key=value, as ctrain-dist's), and ctrain's defaults."""

    def __init__(self, path, sets=()):
        cp = configparser.ConfigParser(inline_comment_prefixes=("#", ";"))
        cp.optionxform = str
        if not cp.read(path):
            sys.exit(f"torch_gpt_peer.py: cannot read config {path}")
        for kv in sets:
            key, _, value = kv.partition("=")
            sec, _, name = key.partition(".")
            if not sec or not name or not _:
                sys.exit(f"torch_gpt_peer.py: --set {kv}: expected SECTION.KEY=VALUE")
            if not cp.has_section(sec):
                cp.add_section(sec)
            cp.set(sec, name, value)
        self.path = path

        def get(sec, key, conv=str):
            if cp.has_option(sec, key):
                v = cp.get(sec, key).strip()
            elif (sec, key) in DEFAULTS:
                v = DEFAULTS[(sec, key)]
            else:
                sys.exit(f"torch_gpt_peer.py: {path} has no {sec}.{key}")
            return conv(v)

        def boolean(s):
            if s.lower() in ("true", "1", "yes", "on"):
                return True
            if s.lower() in ("false", "0", "no", "off"):
                return False
            sys.exit(f"torch_gpt_peer.py: {path}: not a boolean: {s}")

        self.model = get("model", "name")
        if self.model != "gpt":
            sys.exit(f"torch_gpt_peer.py: {path} has model.name = {self.model}, not gpt")
        self.data_dir = get("data", "dir")
        self.train_files = [f.strip() for f in get("data", "train_images").split(",") if f.strip()]
        self.val_files = [f.strip() for f in get("data", "test_images").split(",") if f.strip()]
        self.vocab = get("data", "vocab", int)
        self.block = get("model", "block", int)
        self.depth = get("model", "depth", int)
        self.width = get("model", "width", int)
        self.heads = get("model", "heads", int)
        self.mlp_ratio = get("model", "mlp_ratio", int)
        self.gelu = get("model", "gelu")
        self.dropout = get("model", "dropout", float)
        self.optim = get("optim", "name")
        self.lr = get("optim", "lr", float)
        self.beta1, self.beta2 = get("optim", "beta1", float), get("optim", "beta2", float)
        self.eps = get("optim", "eps", float)
        self.weight_decay = get("optim", "weight_decay", float)
        self.clip_norm = get("optim", "clip_norm", float)
        self.schedule = get("schedule", "name")
        self.warmup = get("schedule", "warmup_steps", int)
        self.min_lr = get("schedule", "min_lr", float)
        self.epochs = get("train", "epochs", int)
        self.global_batch = get("train", "global_batch", int)
        self.seed = get("train", "seed", int)
        self.max_steps = get("train", "max_steps", int)
        self.eval_every = get("train", "eval_every", int)
        self.accum_steps = get("train", "accum_steps", int)
        self.deterministic = get("train", "deterministic", boolean)
        if self.optim != "adamw":
            sys.exit(f"torch_gpt_peer.py: optim.name = {self.optim}: only adamw is implemented")
        if self.schedule not in ("cosine", "constant"):
            sys.exit(f"torch_gpt_peer.py: schedule {self.schedule}: only cosine and constant are implemented")
        if self.dropout != 0:
            sys.exit("torch_gpt_peer.py: model.dropout > 0 is not implemented (ours' masks cannot be matched)")
        if self.gelu not in ("exact", "tanh"):
            sys.exit(f"torch_gpt_peer.py: model.gelu = {self.gelu}")
        if self.width % self.heads:
            sys.exit("torch_gpt_peer.py: model.heads does not divide model.width")

    def path_of(self, f):
        return f if not self.data_dir else os.path.join(self.data_dir, f)

    def lr_at(self, step, total_steps):
        """ct_schedule_lr (src/optim/schedule.c) for global step `step` (0-based)."""
        w = self.warmup
        if w > 0 and step < w:
            return self.lr * (step + 1) / w
        if self.schedule == "constant":
            return self.lr
        t, T = step - w, total_steps - w
        if T <= 0:
            return self.lr
        t = min(t, T)
        return self.min_lr + (self.lr - self.min_lr) * (1.0 + math.cos(math.pi * t / T)) / 2.0


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", default=os.path.join(ROOT, "configs", "moby-gpt.ini"))
    p.add_argument("--set", action="append", default=[], metavar="S.K=V",
                   help="override a config key, as ctrain-dist's --set (repeatable)")
    p.add_argument("--world", type=int, default=None,
                   help="number of ranks (default: OMPI_COMM_WORLD_SIZE under mpirun, else 1)")
    p.add_argument("--threads", type=int, default=1, help="threads per rank (default 1)")
    p.add_argument("--port", type=int, default=0, help="MASTER_PORT (0: a free one for spawn, 29512 for mpirun)")
    p.add_argument("--json-out", default=None, help="rank 0 writes a JSON summary here")
    p.add_argument("--eval-batch", type=int, default=32, help="validation windows per forward")
    p.add_argument("--log-every", type=int, default=50, help="rank 0 prints its loss every this many steps")
    p.add_argument("--init-from", default=None,
                   help="start from these weights (a `ctrain-dist export` safetensors/npz file)")
    p.add_argument("--init-seed", type=int, default=None,
                   help="torch.manual_seed for the initial weights (default train.seed); the data "
                        "order keeps train.seed")
    p.add_argument("--dump-batches", type=int, default=0, metavar="K",
                   help="print, per rank, the window starts and SHA-256 of the first K steps' "
                        "batches, then exit (no torch.distributed)")
    a = p.parse_args(argv)
    mpi_size = os.environ.get("OMPI_COMM_WORLD_SIZE")
    if a.world is None:
        a.world = int(mpi_size) if mpi_size else 1
    if mpi_size and int(mpi_size) != a.world:
        p.error(f"--world {a.world} != OMPI_COMM_WORLD_SIZE {mpi_size}")
    return a


if __name__ == "__main__":
    ARGS = parse_args()
    RECIPE = Recipe(ARGS.config, ARGS.set)
    # Must happen before torch (and its OpenBLAS / libgomp) is loaded.
    os.environ["OMP_NUM_THREADS"] = str(ARGS.threads)
    os.environ["OPENBLAS_NUM_THREADS"] = str(ARGS.threads)

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

# ----------------------------------------------------------------- Philox (src/core/rng.c)
M32 = 0xFFFFFFFF
_U32 = np.uint64(M32)
CT_RNG_SHUFFLE, CT_RNG_WINDOW = 2, 5


def philox4x32(ctr, key):
    """Philox4x32-10 as Random123's philox4x32(): ctr four words (ints or numpy
    arrays of one shape), key two words; returns the four output words as
    numpy uint64 arrays holding 32-bit values."""
    c0, c1, c2, c3 = (np.asarray(c, dtype=np.uint64) & _U32 for c in ctr)
    k0, k1 = np.uint64(key[0]), np.uint64(key[1])
    for r in range(10):
        if r:
            k0 = (k0 + np.uint64(0x9E3779B9)) & _U32
            k1 = (k1 + np.uint64(0xBB67AE85)) & _U32
        p0 = np.uint64(0xD2511F53) * c0
        p1 = np.uint64(0xCD9E8D57) * c2
        c0, c1, c2, c3 = ((p1 >> np.uint64(32)) ^ c1 ^ k0, p1 & _U32,
                          (p0 >> np.uint64(32)) ^ c3 ^ k1, p0 & _U32)
    return c0, c1, c2, c3


def rng_key(seed, purpose):
    """ct_rng_key: Philox of (seed lo, seed hi, purpose, "ctra") under a fixed key."""
    r = philox4x32((seed & M32, (seed >> 32) & M32, purpose, 0x63747261), (0x9E3779B9, 0xBB67AE85))
    return int(r[0]), int(r[1])


def rng_block(key, ctr):
    """ct_rng_block: the four words for one counter, as Python ints."""
    return [int(w) for w in philox4x32(ctr, key)]


def rng_below(key, ctr3, bound):
    """ct_rng_below: Lemire's multiply-and-reject; rejected draws use the next
    word, then the next ctr[3]."""
    threshold = ((1 << 32) - bound) % bound
    attempt = 0
    while True:
        for w in rng_block(key, (ctr3[0], ctr3[1], ctr3[2], attempt)):
            m = w * bound
            if (m & M32) >= threshold:
                return m >> 32
        attempt += 1


def permutation(n, seed, epoch):
    """ct_sampler_permutation: Fisher-Yates from the top, position i swapping
    with ct_rng_below(key(seed, SHUFFLE), (epoch lo, epoch hi, i), i + 1). The
    draws do not depend on the swaps, so they are made in one vectorised pass
    (a rejected first word, rare, falls back to rng_below)."""
    perm = list(range(n))
    if n < 2:
        return np.asarray(perm, dtype=np.int64)
    key = rng_key(seed, CT_RNG_SHUFFLE)
    e0, e1 = epoch & M32, (epoch >> 32) & M32
    i = np.arange(n - 1, 0, -1, dtype=np.uint64)
    bound = i + np.uint64(1)
    w = philox4x32((np.full_like(i, e0), np.full_like(i, e1), i, np.zeros_like(i)), key)[0]
    m = w * bound
    threshold = (np.uint64(1 << 32) - bound) % bound
    j = (m >> np.uint64(32)).astype(np.int64)
    for t in np.nonzero((m & _U32) < threshold)[0]:
        j[t] = rng_below(key, (e0, e1, int(i[t])), int(bound[t]))
    for ii, jj in zip(range(n - 1, 0, -1), j.tolist()):
        perm[ii], perm[jj] = perm[jj], perm[ii]
    return np.asarray(perm, dtype=np.int64)


def shard_range(total, world, rank):
    """ct_shard_range: rank's contiguous slice [first, first + count)."""
    lo, hi = total * rank // world, total * (rank + 1) // world
    return lo, hi - lo


def rank_batch(perm, step, global_batch, world, rank):
    """The sample indices rank `rank` trains on at step `step` of the epoch."""
    first, count = shard_range(global_batch, world, rank)
    base = step * global_batch + first
    return perm[base:base + count]


# ----------------------------------------------------------------- token shards (src/data/tokens.c)
SHARD_MAGIC, SHARD_VERSION = 20240520, 1


def read_shard(path):
    """An llm.c shard's tokens (uint16, memory-mapped), its header checked."""
    head = np.fromfile(path, dtype="<i4", count=256)
    if head.size != 256 or head[0] != SHARD_MAGIC or head[1] != SHARD_VERSION:
        sys.exit(f"torch_gpt_peer.py: {path}: not an llm.c token shard (magic 20240520, version 1)")
    ntok = int(head[2])
    size = os.path.getsize(path)
    if size != 1024 + 2 * ntok:
        sys.exit(f"torch_gpt_peer.py: {path}: {size} bytes, header says {1024 + 2 * ntok}")
    return np.memmap(path, dtype="<u2", mode="r", offset=1024, shape=(ntok,))


class TokenShards:
    """The samples of a list of shards: windows of W = block + 1 tokens, shard
    by shard (sample i of the set is window i - (windows of the shards before)
    of its shard)."""

    def __init__(self, paths, block, seed):
        self.paths, self.T, self.W, self.seed = list(paths), block, block + 1, seed
        self.tokens = [read_shard(p) for p in self.paths]
        self.counts = [len(t) // self.W for t in self.tokens]
        for p, c in zip(self.paths, self.counts):
            if c < 1:
                sys.exit(f"torch_gpt_peer.py: {p}: shorter than one window of {self.W} tokens")
        self.first = np.cumsum([0] + self.counts)  # sample index of each shard's first window
        self.n = int(self.first[-1])
        self.max_token = max(int(t.max()) for t in self.tokens)

    def offsets(self, epoch):
        """Each shard's first window start in `epoch` (< 0: evaluation, all 0).
        Philox keyed by (seed, CT_RNG_WINDOW), counter (epoch lo, epoch hi, 0, 0),
        word 0 modulo the slack + 1 of each shard."""
        if epoch < 0:
            return [0] * len(self.tokens)
        w0 = rng_block(rng_key(self.seed, CT_RNG_WINDOW), (epoch & M32, (epoch >> 32) & M32, 0, 0))[0]
        return [w0 % (len(t) - c * self.W + 1) for t, c in zip(self.tokens, self.counts)]

    def starts(self, idx, epoch):
        """(shard, token offset) of each sample in idx."""
        off = self.offsets(epoch)
        s = np.searchsorted(self.first, idx, side="right") - 1
        return s, np.array([off[a] for a in s], dtype=np.int64) + (idx - self.first[s]) * self.W

    def gather(self, idx, epoch):
        """x (n, T) and y (n, T) int64 token tensors of samples idx."""
        idx = np.asarray(idx, dtype=np.int64)
        shard, start = self.starts(idx, epoch)
        win = np.stack([np.asarray(self.tokens[a][b:b + self.W], dtype=np.int64)
                        for a, b in zip(shard.tolist(), start.tolist())])
        return torch.from_numpy(win[:, :-1].copy()), torch.from_numpy(win[:, 1:].copy())


def batch_digest(x, y):
    """SHA-256 of a batch's inputs then targets as little-endian int32."""
    h = hashlib.sha256()
    h.update(x.numpy().astype("<i4").tobytes())
    h.update(y.numpy().astype("<i4").tobytes())
    return h.hexdigest()


# ----------------------------------------------------------------- the model (src/models/gpt.c)
class CausalSelfAttention(nn.Module):
    def __init__(self, C, NH):
        super().__init__()
        self.c_attn = nn.Linear(C, 3 * C)
        self.c_proj = nn.Linear(C, C)
        self.NH = NH

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        hs = C // self.NH
        q = q.view(B, T, self.NH, hs).transpose(1, 2)
        k = k.view(B, T, self.NH, hs).transpose(1, 2)
        v = v.view(B, T, self.NH, hs).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
        mask = torch.ones(T, T, dtype=torch.bool).tril_()
        att = F.softmax(att.masked_fill(~mask, float("-inf")), dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


class MLP(nn.Module):
    def __init__(self, C, hidden, gelu):
        super().__init__()
        self.c_fc = nn.Linear(C, hidden)
        self.gelu = nn.GELU(approximate="tanh" if gelu == "tanh" else "none")
        self.c_proj = nn.Linear(hidden, C)

    def forward(self, x):
        return self.c_proj(self.gelu(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self, C, NH, hidden, gelu):
        super().__init__()
        self.ln_1 = nn.LayerNorm(C)
        self.attn = CausalSelfAttention(C, NH)
        self.ln_2 = nn.LayerNorm(C)
        self.mlp = MLP(C, hidden, gelu)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    """Ours' gpt under nanoGPT's names; the initialisation of ours' modules."""

    def __init__(self, V, T, C, depth, NH, mlp_ratio, gelu="exact"):
        super().__init__()
        self.T = T
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(V, C),
            wpe=nn.Embedding(T, C),
            h=nn.ModuleList([Block(C, NH, mlp_ratio * C, gelu) for _ in range(depth)]),
            ln_f=nn.LayerNorm(C),
        ))
        self.lm_head = nn.Linear(C, V, bias=False)
        self.lm_head.weight = self.transformer.wte.weight  # tied: one Parameter
        nn.init.normal_(self.transformer.wte.weight, mean=0.0, std=0.02)
        nn.init.normal_(self.transformer.wpe.weight, mean=0.0, std=0.02)

    @classmethod
    def from_recipe(cls, r, V):
        return cls(V, r.block, r.width, r.depth, r.heads, r.mlp_ratio, r.gelu)

    def forward(self, idx):
        T = idx.shape[1]
        pos = torch.arange(T, dtype=torch.long)
        x = self.transformer.wte(idx) + self.transformer.wpe(pos)
        for block in self.transformer.h:
            x = block(x)
        return self.lm_head(self.transformer.ln_f(x))


def vocab_size(r, *sets):
    """ours: data.vocab, or 1 + the largest token of the training and val sets."""
    return r.vocab if r.vocab > 0 else max(s.max_token for s in sets) + 1


# ----------------------------------------------------------------- weights in (a ctrain-dist export)
def read_export(path):
    """(tensors, metadata) of a `ctrain-dist export` file (npz or safetensors;
    the latter read by hand: Debian 12 has no safetensors package)."""
    if path.endswith(".npz"):
        z = np.load(path)
        meta = json.loads(str(z["__metadata__"]))
        return {k: z[k] for k in z.files if k != "__metadata__"}, meta
    with open(path, "rb") as f:
        blob = f.read()
    n = int.from_bytes(blob[:8], "little")
    header = json.loads(blob[8:8 + n])
    meta = header.pop("__metadata__", {})
    tensors = {}
    for name, info in header.items():
        if info["dtype"] != "F32":
            sys.exit(f"torch_gpt_peer.py: {path}: {name} is {info['dtype']}, not F32")
        b, e = info["data_offsets"]
        tensors[name] = np.frombuffer(blob[8 + n + b:8 + n + e], dtype="<f4").reshape(info["shape"])
    return tensors, meta


def load_export(model, path):
    """Load an export into `model` with strict names and shapes; lm_head.weight
    must hold the same values as transformer.wte.weight (tied)."""
    tensors, meta = read_export(path)
    if "lm_head.weight" in tensors and not np.array_equal(tensors["lm_head.weight"],
                                                          tensors["transformer.wte.weight"]):
        sys.exit(f"torch_gpt_peer.py: {path}: lm_head.weight differs from transformer.wte.weight")
    sd = {k: torch.from_numpy(v.copy()) for k, v in tensors.items()}
    model.load_state_dict(sd, strict=True)
    return meta


# ----------------------------------------------------------------- evaluation
@torch.no_grad()
def val_loss_sums(model, val, bs, world=1, rank=0):
    """(sum of the cross-entropy, tokens) over this rank's share of the val
    windows (offset 0), the sum in float64."""
    model.eval()
    first, count = shard_range(val.n, world, rank)
    total = 0.0
    for i in range(first, first + count, bs):
        x, y = val.gather(np.arange(i, min(i + bs, first + count)), -1)
        logits = model(x)
        total += F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1),
                                 reduction="sum").double().item()
    model.train()
    return total, count * val.T


# ----------------------------------------------------------------- training
def openblas_info():
    try:
        import ctypes
        lib = ctypes.CDLL("libopenblas.so.0")
        lib.openblas_get_corename.restype = ctypes.c_char_p
        return dict(num_threads=lib.openblas_get_num_threads(),
                    corename=lib.openblas_get_corename().decode())
    except OSError as e:
        return dict(error=str(e))


def param_sha256(model):
    h = hashlib.sha256()
    for p in model.parameters():
        h.update(p.detach().contiguous().numpy().tobytes())
    return h.hexdigest()


def dump_batches(r, args):
    """Each rank's first K batches, as tests/bench/gpt_batches.c prints ours."""
    train = TokenShards([r.path_of(f) for f in r.train_files], r.block, r.seed)
    G, N = r.global_batch, args.world
    spe = train.n // G
    perm, epoch = None, -1
    for g in range(args.dump_batches):
        e, s = divmod(g, spe)
        if e != epoch:
            perm, epoch = permutation(train.n, r.seed, e), e
        for rank in range(N):
            idx = rank_batch(perm, s, G, N, rank)
            x, y = train.gather(idx, e)
            print(f"step {g + 1} epoch {e} rank {rank} samples {' '.join(map(str, idx[:4].tolist()))} "
                  f"sha256 {batch_digest(x, y)}")


def worker(rank, world, args, port, r):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(args.threads)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    if r.global_batch % world:
        sys.exit(f"torch_gpt_peer.py: train.global_batch = {r.global_batch} is not divisible by {world} ranks")
    if r.accum_steps != 1:
        sys.exit("torch_gpt_peer.py: train.accum_steps > 1 is not implemented")

    t_load = time.perf_counter()
    train = TokenShards([r.path_of(f) for f in r.train_files], r.block, r.seed)
    val = TokenShards([r.path_of(f) for f in r.val_files], r.block, r.seed)
    t_load = time.perf_counter() - t_load
    V = vocab_size(r, train, val)

    # identical init on every rank (DDP also broadcasts rank 0's)
    torch.manual_seed(r.seed if args.init_seed is None else args.init_seed)
    model = GPT.from_recipe(r, V)
    if args.init_from:
        load_export(model, args.init_from)
    ddp = DDP(model)  # defaults: bucket_cap_mb=25, broadcast_buffers=True
    G, B = r.global_batch, r.global_batch // world
    spe = train.n // G
    total_steps = spe * r.epochs
    last_step = min(total_steps, r.max_steps) if r.max_steps > 0 else total_steps
    opt = torch.optim.AdamW(ddp.parameters(), lr=r.lr_at(0, total_steps), betas=(r.beta1, r.beta2),
                            eps=r.eps, weight_decay=r.weight_decay)
    nparams = sum(p.numel() for p in model.parameters())
    ob = openblas_info()
    recipe_text = (f"adamw lr {r.lr} betas ({r.beta1}, {r.beta2}) eps {r.eps} wd {r.weight_decay}"
                   + (f" clip {r.clip_norm}" if r.clip_norm > 0 else "")
                   + f" | {r.schedule} warmup {r.warmup} min_lr {r.min_lr} over {total_steps} steps")
    if rank == 0:
        print(f"OpenBLAS in this process: {ob}", flush=True)
        print(f"torch {torch.__version__} | gpt V {V} T {r.block} C {r.width} depth {r.depth} heads {r.heads} "
              f"mlp_ratio {r.mlp_ratio} gelu {r.gelu} ({nparams} params, from {r.path}) | world {world} | "
              f"threads/rank {torch.get_num_threads()} | global batch {G} (per rank {B}) x {r.block} tokens | "
              f"{train.n} train windows, {spe} steps/epoch, {last_step} steps | {val.n} val windows | "
              f"{recipe_text} | seed {r.seed} | data load {t_load:.2f}s", flush=True)

    def evaluate():
        t = time.perf_counter()
        s = torch.tensor(val_loss_sums(model, val, args.eval_batch, world, rank), dtype=torch.float64)
        dist.all_reduce(s)
        return s[0].item() / s[1].item(), time.perf_counter() - t

    evals, steps_log, epochs = [], [], []
    step, t_train_total, done = 0, 0.0, False
    for ep in range(r.epochs):
        perm = permutation(train.n, r.seed, ep)
        loss_sum, n_steps = 0.0, 0
        dist.barrier()
        t0 = time.perf_counter()
        for s in range(spe):
            x, y = train.gather(rank_batch(perm, s, G, world, rank), ep)
            for g in opt.param_groups:
                g["lr"] = r.lr_at(step, total_steps)
            opt.zero_grad(set_to_none=True)
            logits = ddp(x)
            loss = F.cross_entropy(logits.reshape(-1, V), y.reshape(-1))
            loss.backward()
            if r.clip_norm > 0:
                torch.nn.utils.clip_grad_norm_(ddp.parameters(), r.clip_norm)
            opt.step()
            step += 1
            lv = loss.item()
            loss_sum += lv
            n_steps += 1
            steps_log.append(lv)
            if rank == 0 and args.log_every > 0 and step % args.log_every == 0:
                print(f"step {step}/{last_step}: loss {lv:.4f} (rank 0) lr {r.lr_at(step - 1, total_steps):.3g}",
                      flush=True)
            if step >= last_step:
                done = True
                break
        dist.barrier()
        t_train = time.perf_counter() - t0
        t_train_total += t_train
        ls = torch.tensor([loss_sum, n_steps], dtype=torch.float64)
        dist.all_reduce(ls)
        train_loss = ls[0].item() / ls[1].item()
        rec = dict(epoch=ep + 1, steps=n_steps, train_s=t_train, train_loss=train_loss,
                   tokens_per_s=n_steps * G * r.block / t_train)
        if done or (ep + 1) % r.eval_every == 0:
            vl, te = evaluate()
            rec.update(val_loss=vl, eval_s=te)
            evals.append(dict(step=step, epoch=ep + 1, val_loss=vl))
        epochs.append(rec)
        if rank == 0:
            print(f"epoch {ep + 1} (step {step}): train {t_train:8.2f} s  {rec['tokens_per_s']:9.0f} tokens/s  "
                  f"train_loss {train_loss:.4f}" + (f"  val_loss {rec['val_loss']:.4f} (eval {rec['eval_s']:.1f} s)"
                                                    if "val_loss" in rec else ""), flush=True)
        if done:
            break

    rss = torch.tensor([resource.getrusage(resource.RUSAGE_SELF).ru_maxrss], dtype=torch.int64)
    rss_all = [torch.zeros_like(rss) for _ in range(world)]
    dist.all_gather(rss_all, rss)
    h = param_sha256(model)
    hb = torch.tensor(list(bytes.fromhex(h)), dtype=torch.uint8)
    hb_all = [torch.zeros_like(hb) for _ in range(world)]
    dist.all_gather(hb_all, hb)
    ranks_agree = all(bytes(t.tolist()).hex() == h for t in hb_all)
    if rank == 0:
        rss_mib = [v.item() / 1024 for v in rss_all]
        tps = step * G * r.block / t_train_total
        print(f"{step} steps, {tps:.0f} tokens/s; peak RSS per rank (MiB): "
              + " ".join(f"r{i}={v:.1f}" for i, v in enumerate(rss_mib)))
        print(f"param sha256 (rank 0): {h}   all ranks identical: {ranks_agree}")
        summary = dict(model="gpt", world=world, threads=args.threads, global_batch=G, per_rank_batch=B,
                       block=r.block, vocab=V, steps=step, steps_per_epoch=spe, total_steps=total_steps,
                       train_s=t_train_total, tokens_per_s=tps, epochs=epochs, evals=evals,
                       step_loss_rank0=steps_log if rank == 0 else None, seed=r.seed, nparams=nparams,
                       peak_rss_mib=rss_mib, param_sha256=h, ranks_agree=ranks_agree, torch=torch.__version__,
                       launcher="mpirun" if "OMPI_COMM_WORLD_RANK" in os.environ else "spawn",
                       openblas_coretype=os.environ.get("OPENBLAS_CORETYPE"),
                       openblas_l2_size=os.environ.get("OPENBLAS_L2_SIZE"), openblas=ob,
                       recipe=recipe_text, config=r.path, sets=args.set, init_from=args.init_from,
                       init_seed=r.seed if args.init_seed is None else args.init_seed)
        print("RESULT " + json.dumps({k: v for k, v in summary.items() if k != "step_loss_rank0"}), flush=True)
        if args.json_out:
            with open(args.json_out, "w") as f:
                json.dump(summary, f, indent=1)
    # Every rank past its last collective before any tears the group down:
    # a rank that destroyed its gloo pairs while another still talked to it
    # left that one spinning on the closed socket at exit (spawn, 2 ranks).
    dist.barrier()
    dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    if ARGS.dump_batches:
        dump_batches(RECIPE, ARGS)
    elif "OMPI_COMM_WORLD_RANK" in os.environ:
        worker(int(os.environ["OMPI_COMM_WORLD_RANK"]), ARGS.world, ARGS, ARGS.port or 29512, RECIPE)
    elif ARGS.world == 1:
        worker(0, 1, ARGS, ARGS.port or free_port(), RECIPE)
    else:
        mp.spawn(worker, args=(ARGS.world, ARGS, ARGS.port or free_port(), RECIPE), nprocs=ARGS.world,
                 join=True)


if __name__ == "__main__":
    main()
