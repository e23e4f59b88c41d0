#!/usr/bin/python3
"""PyTorch DDP (CPU, gloo) peer for the models the shared peer lacks: resnet and vit.

../shared/bench/torch_ddp_fmnist.py (read-only, see BASELINE.md) covers mlp and cnn.
This script follows its protocol line for line -- same data handling (IDX .gz read
with gzip + numpy, x/255 then (x-mean)/std, whole sets in memory as float32 on
every rank), same batching (DistributedSampler(shuffle=True, seed, drop_last=True),
set_epoch, index_select on the in-memory tensor, per-rank batch global/N, last
incomplete batch dropped), same DDP defaults (bucket_cap_mb=25,
broadcast_buffers=True), same seeding, same timing (training loop between two
dist.barrier() calls, rank 0's clock), rank 0 evaluates the whole test set after
each epoch with batch 1000, same peak RSS / parameter hash / JSON summary -- and
differs only where our configs differ from the peer's recipe:

  * the architecture, built from configs/fmnist-MODEL.ini exactly as
    src/models/resnet.c and src/models/vit.c build it (checked: 77,754 and
    138,890 parameters);
  * the optimiser, schedule and clipping from the same config: resnet SGD
    (momentum, weight decay, Nesterov), vit AdamW with clip_grad_norm_; linear
    warmup lr*(step+1)/warmup then cosine to min_lr over the remaining steps,
    as src/optim/schedule.c, stepped once per iteration.

Initialisation follows our modules (torch's defaults for Conv2d/Linear, which ours
copy; ours' attention projections are two Linear layers, not nn.MultiheadAttention's
xavier init; positional embeddings uniform with std 0.02). The random streams
differ from ours, so accuracies agree only statistically, and parameter hashes
cannot be compared across frameworks.

Launch modes (as the shared peer)
  spawn  : /usr/bin/python3 torch_peer_zoo.py --model resnet --world 2
  mpirun : mpirun --allow-run-as-root --oversubscribe -np 2 \\
               /usr/bin/python3 torch_peer_zoo.py --model vit --world 2
What it is not: a second copy of the mlp/cnn peer (use the shared one), nor a test.
"""
import argparse
import configparser
import gzip
import hashlib
import json
import math
import os
import resource
import socket
import struct
import sys
import time

DATA_DIR = "/usr/share/datasets/fashion-mnist"
MODELS = ("resnet", "vit")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", choices=MODELS, default="resnet")
    p.add_argument("--config", default=None,
                   help="our config to take the model and recipe from (default configs/fmnist-MODEL.ini)")
    p.add_argument("--world", type=int, default=None,
                   help="number of ranks (default: OMPI_COMM_WORLD_SIZE under mpirun, else 1)")
    p.add_argument("--global-batch", type=int, default=256)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=None, help="threads per rank (default max(1, 2//world))")
    p.add_argument("--data-dir", default=None, help="default: the config's data.dir")
    p.add_argument("--port", type=int, default=0, help="MASTER_PORT (0: pick a free one for spawn, 29511 for mpirun)")
    p.add_argument("--json-out", default=None, help="rank 0 writes a JSON summary here")
    p.add_argument("--eval-batch", type=int, default=1000)
    a = p.parse_args()
    mpi_size = os.environ.get("OMPI_COMM_WORLD_SIZE")
    if a.world is None:
        a.world = int(mpi_size) if mpi_size else 1
    if mpi_size and int(mpi_size) != a.world:
        p.error(f"--world {a.world} != OMPI_COMM_WORLD_SIZE {mpi_size}")
    if a.threads is None:
        a.threads = max(1, 2 // a.world)
    if a.global_batch % a.world:
        p.error("--global-batch must be divisible by --world")
    a.config = a.config or os.path.join(ROOT, "configs", f"fmnist-{a.model}.ini")
    return a


# ----------------------------------------------------------------- recipe
def read_recipe(path, model):
    """The model and training recipe from our INI, with ctrain's defaults (src/config/schema.c)
    for keys the file leaves out. Only what the peer needs; epochs/batch/seed come from flags."""
    cp = configparser.ConfigParser(inline_comment_prefixes=("#", ";"))
    if not cp.read(path):
        sys.exit(f"torch_peer_zoo.py: cannot read config {path}")

    def get(sec, key, default, conv=str):
        if cp.has_option(sec, key):
            return conv(cp.get(sec, key).strip())
        return conv(default) if default is not None else None

    def ints(s):
        return [int(x) for x in s.split(",") if x.strip()]

    def boolean(s):
        if s.lower() in ("true", "1", "yes", "on"):
            return True
        if s.lower() in ("false", "0", "no", "off"):
            return False
        raise ValueError(f"{path}: not a boolean: {s}")

    name = get("model", "name", None)
    if name != model:
        sys.exit(f"torch_peer_zoo.py: {path} has model.name = {name}, not {model}")
    r = dict(
        config=path, model=name,
        data_dir=get("data", "dir", DATA_DIR), mean=get("data", "mean", "0.2860", float),
        std=get("data", "std", "0.3530", float),
        channels=get("model", "channels", "32,64", ints), blocks=get("model", "blocks", "2", int),
        bn_sync=get("model", "bn_sync", "local"),
        patch=get("model", "patch", "7", int), width=get("model", "width", "64", int),
        heads=get("model", "heads", "4", int), depth=get("model", "depth", "4", int),
        mlp_ratio=get("model", "mlp_ratio", "2", int), gelu=get("model", "gelu", "exact"),
        optim=get("optim", "name", "sgd"), lr=get("optim", "lr", None, float),
        momentum=get("optim", "momentum", "0", float), dampening=get("optim", "dampening", "0", float),
        weight_decay=get("optim", "weight_decay", "0", float), nesterov=get("optim", "nesterov", "false", boolean),
        beta1=get("optim", "beta1", "0.9", float), beta2=get("optim", "beta2", "0.999", float),
        eps=get("optim", "eps", "1e-8", float), clip_norm=get("optim", "clip_norm", "0", float),
        schedule=get("schedule", "name", "constant"), warmup=get("schedule", "warmup_steps", "0", int),
        min_lr=get("schedule", "min_lr", "0", float),
    )
    if r["lr"] is None:
        sys.exit(f"torch_peer_zoo.py: {path} has no optim.lr")
    if r["bn_sync"] != "local":
        sys.exit("torch_peer_zoo.py: only model.bn_sync = local (DDP's default BatchNorm) is implemented")
    if r["schedule"] not in ("cosine", "constant"):
        sys.exit(f"torch_peer_zoo.py: schedule {r['schedule']} not implemented (cosine, constant)")
    return r


ARGS = parse_args()
RECIPE = read_recipe(ARGS.config, ARGS.model)
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
from torch.utils.data.distributed import DistributedSampler  # noqa: E402


# ----------------------------------------------------------------- data (as the shared peer)
def read_idx_gz(path):
    with gzip.open(path, "rb") as f:
        buf = f.read()
    zero, dtype, ndim = struct.unpack(">HBB", buf[:4])
    assert zero == 0 and dtype == 0x08, f"{path}: not an unsigned-byte IDX file"
    dims = struct.unpack(">" + "I" * ndim, buf[4:4 + 4 * ndim])
    arr = np.frombuffer(buf, dtype=np.uint8, offset=4 + 4 * ndim)
    assert arr.size == int(np.prod(dims)), f"{path}: size mismatch"
    return arr.reshape(dims)


def load_split(data_dir, split, mean, std):
    x = read_idx_gz(os.path.join(data_dir, f"{split}-images-idx3-ubyte.gz"))
    y = read_idx_gz(os.path.join(data_dir, f"{split}-labels-idx1-ubyte.gz"))
    x = torch.from_numpy(x.astype(np.float32)).div_(255.0).sub_(mean).div_(std)
    x = x.unsqueeze(1).contiguous()  # N,1,28,28
    y = torch.from_numpy(y.astype(np.int64))
    return x, y


class IndexOnly(torch.utils.data.Dataset):
    """Only its length matters: DistributedSampler just needs len(dataset)."""

    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return i


# ----------------------------------------------------------------- models
class BasicBlock(nn.Module):
    """Conv3x3(stride)-BN-ReLU-Conv3x3-BN + shortcut (identity, or Conv1x1(stride)-BN when
    the shape changes), then ReLU: src/models/resnet.c's basic_block plus the ReLU after it.
    Convolutions have no bias there."""

    def __init__(self, c, oc, stride):
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(c, oc, 3, stride, 1, bias=False), nn.BatchNorm2d(oc), nn.ReLU(),
            nn.Conv2d(oc, oc, 3, 1, 1, bias=False), nn.BatchNorm2d(oc))
        self.shortcut = nn.Identity()
        if stride != 1 or c != oc:
            self.shortcut = nn.Sequential(nn.Conv2d(c, oc, 1, stride, 0, bias=False), nn.BatchNorm2d(oc))

    def forward(self, x):
        return F.relu(self.body(x) + self.shortcut(x))


def make_resnet(r):
    ch = r["channels"]
    layers = [nn.Conv2d(1, ch[0], 3, 1, 1, bias=False), nn.BatchNorm2d(ch[0]), nn.ReLU()]
    c = ch[0]
    for s, oc in enumerate(ch):
        for j in range(r["blocks"]):
            layers.append(BasicBlock(c, oc, 2 if (s > 0 and j == 0) else 1))
            c = oc
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(c, 10)]
    return nn.Sequential(*layers)


class PatchEmbed(nn.Module):
    """Conv2d(1, D, P, stride P) + learned positional embeddings (T, D): src/nn/patch.h."""

    def __init__(self, P, D, T):
        super().__init__()
        self.proj = nn.Conv2d(1, D, P, P)
        self.pos = nn.Parameter(torch.empty(T, D))
        b = 0.02 * math.sqrt(3.0)  # ours: uniform with std 0.02
        nn.init.uniform_(self.pos, -b, b)

    def forward(self, x):
        return self.proj(x).flatten(2).transpose(1, 2) + self.pos  # (B, T, D)


class Attention(nn.Module):
    """qkv = Linear(D, 3D), per-head softmax(q k^T / sqrt(hs)) v, proj = Linear(D, D):
    src/nn/attention.h, no mask, no dropout."""

    def __init__(self, D, NH):
        super().__init__()
        self.nh = NH
        self.qkv = nn.Linear(D, 3 * D)
        self.proj = nn.Linear(D, D)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.nh, C // self.nh).transpose(1, 2) for t in (q, k, v))
        att = F.softmax(q @ k.transpose(-2, -1) / math.sqrt(C // self.nh), dim=-1)
        return self.proj((att @ v).transpose(1, 2).reshape(B, T, C))


class Block(nn.Module):
    """Pre-norm: x + Attn(LN(x)), then x + Linear(D,rD)-GELU-Linear(rD,D) of LN(x)."""

    def __init__(self, D, NH, ratio, gelu):
        super().__init__()
        self.ln1 = nn.LayerNorm(D)
        self.attn = Attention(D, NH)
        self.ln2 = nn.LayerNorm(D)
        self.mlp = nn.Sequential(nn.Linear(D, ratio * D), nn.GELU(approximate=gelu),
                                 nn.Linear(ratio * D, D))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class ViT(nn.Module):
    """src/models/vit.c: patch embed, depth blocks, final LayerNorm, token mean, Linear(D, 10)."""

    def __init__(self, r):
        super().__init__()
        P, D = r["patch"], r["width"]
        if 28 % P or D % r["heads"]:
            sys.exit("torch_peer_zoo.py: patch must divide 28 and heads must divide width")
        T = (28 // P) ** 2
        self.embed = PatchEmbed(P, D, T)
        gelu = {"exact": "none", "tanh": "tanh"}[r["gelu"]]
        self.blocks = nn.Sequential(*[Block(D, r["heads"], r["mlp_ratio"], gelu) for _ in range(r["depth"])])
        self.ln = nn.LayerNorm(D)
        self.head = nn.Linear(D, 10)

    def forward(self, x):
        return self.head(self.ln(self.blocks(self.embed(x))).mean(dim=1))


def make_model(r):
    return make_resnet(r) if r["model"] == "resnet" else ViT(r)


def make_optimizer(params, r):
    if r["optim"] == "sgd":
        return torch.optim.SGD(params, lr=r["lr"], momentum=r["momentum"], dampening=r["dampening"],
                               weight_decay=r["weight_decay"], nesterov=r["nesterov"])
    if r["optim"] == "adamw":
        return torch.optim.AdamW(params, lr=r["lr"], betas=(r["beta1"], r["beta2"]), eps=r["eps"],
                                 weight_decay=r["weight_decay"])
    sys.exit(f"torch_peer_zoo.py: optimizer {r['optim']} not implemented")


def lr_factor(step, r, total_steps):
    """lr(step) / base lr, as ct_schedule_lr (src/optim/schedule.c) for step 0, 1, ..."""
    w = r["warmup"]
    if w > 0 and step < w:
        return (step + 1) / w
    if r["schedule"] == "constant":
        return 1.0
    t, T = step - w, total_steps - w
    if T <= 0:
        return 1.0
    t = min(t, T)
    base = r["lr"]
    return (r["min_lr"] + (base - r["min_lr"]) * (1 + math.cos(math.pi * t / T)) / 2) / base


def param_sha256(model):
    h = hashlib.sha256()
    for p in model.parameters():
        h.update(p.detach().cpu().contiguous().to(torch.float32).numpy().tobytes())
    return h.hexdigest()


@torch.no_grad()
def evaluate(model, x, y, bs):
    model.eval()
    correct = 0
    for i in range(0, x.shape[0], bs):
        correct += (model(x[i:i + bs]).argmax(1) == y[i:i + bs]).sum().item()
    model.train()
    return correct / x.shape[0]


def openblas_info():
    """Ask the OpenBLAS that torch loaded (same soname) for its thread count / core type."""
    try:
        import ctypes
        lib = ctypes.CDLL("libopenblas.so.0")
        lib.openblas_get_corename.restype = ctypes.c_char_p
        return dict(num_threads=lib.openblas_get_num_threads(),
                    corename=lib.openblas_get_corename().decode())
    except OSError as e:
        return dict(error=str(e))


# ----------------------------------------------------------------- worker
def worker(rank, world, args, port):
    r = RECIPE
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(args.threads)
    dist.init_process_group("gloo", rank=rank, world_size=world)

    t_load = time.perf_counter()
    data_dir = args.data_dir or r["data_dir"]
    xtr, ytr = load_split(data_dir, "train", r["mean"], r["std"])
    xte, yte = load_split(data_dir, "t10k", r["mean"], r["std"])
    t_load = time.perf_counter() - t_load

    torch.manual_seed(args.seed)  # identical init on every rank (DDP also broadcasts rank 0's)
    model = make_model(r)
    ddp = DDP(model)  # defaults: bucket_cap_mb=25, broadcast_buffers=True
    torch.manual_seed(args.seed + 1000 * (rank + 1))  # per-rank stream (no dropout in these models)

    bs = args.global_batch // world
    sampler = DistributedSampler(IndexOnly(xtr.shape[0]), num_replicas=world, rank=rank,
                                 shuffle=True, seed=args.seed, drop_last=True)
    steps_per_epoch = len(sampler) // bs
    total_steps = steps_per_epoch * args.epochs
    opt = make_optimizer(ddp.parameters(), r)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: lr_factor(s, r, total_steps))
    clip = r["clip_norm"]

    nparams = sum(p.numel() for p in model.parameters())
    ob = openblas_info()
    recipe_text = (f"{r['optim']} lr {r['lr']} wd {r['weight_decay']}"
                   + (f" momentum {r['momentum']} nesterov {r['nesterov']}" if r["optim"] == "sgd" else
                      f" betas ({r['beta1']}, {r['beta2']}) eps {r['eps']}")
                   + (f" clip {clip}" if clip > 0 else "")
                   + f" | {r['schedule']} warmup {r['warmup']} over {total_steps} steps")
    if rank == 0:
        print(f"OpenBLAS in this process: {ob}", flush=True)
        print(f"torch {torch.__version__} | model {r['model']} ({nparams} params, from {r['config']}) | "
              f"world {world} | threads/rank {torch.get_num_threads()} (OPENBLAS_NUM_THREADS="
              f"{os.environ.get('OPENBLAS_NUM_THREADS')}, OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE')}) | "
              f"global batch {args.global_batch} (per rank {bs}) | {steps_per_epoch} steps/epoch | "
              f"{recipe_text} | seed {args.seed} | data load {t_load:.2f}s", flush=True)

    epochs = []
    for ep in range(args.epochs):
        sampler.set_epoch(ep)
        idx = torch.tensor(list(iter(sampler)), dtype=torch.long)
        loss_sum = torch.zeros(1, dtype=torch.float64)
        dist.barrier()
        t0 = time.perf_counter()
        for s in range(steps_per_epoch):
            bi = idx[s * bs:(s + 1) * bs]
            xb, yb = xtr.index_select(0, bi), ytr.index_select(0, bi)
            opt.zero_grad(set_to_none=True)
            loss = F.cross_entropy(ddp(xb), yb)
            loss.backward()
            if clip > 0:
                torch.nn.utils.clip_grad_norm_(ddp.parameters(), clip)
            opt.step()
            sched.step()
            loss_sum += loss.detach().double()
        dist.barrier()
        t_train = time.perf_counter() - t0
        dist.all_reduce(loss_sum)
        mean_loss = loss_sum.item() / (steps_per_epoch * world)
        t1 = time.perf_counter()
        acc = evaluate(model, xte, yte, args.eval_batch) if rank == 0 else float("nan")
        t_eval = time.perf_counter() - t1
        dist.barrier()
        sps = steps_per_epoch * args.global_batch / t_train
        rec = dict(epoch=ep + 1, train_s=t_train, samples_per_s=sps, train_loss=mean_loss,
                   test_acc=acc, eval_s=t_eval, lr_end=sched.get_last_lr()[0])
        epochs.append(rec)
        if rank == 0:
            print(f"epoch {ep + 1}: train {t_train:8.2f} s  {sps:9.1f} samples/s (global)  "
                  f"train_loss {mean_loss:.4f}  test_acc {acc:.4f}  (eval {t_eval:.2f} s)", flush=True)

    # peak RSS (ru_maxrss is KiB on Linux) and parameter hash per rank
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
        print("peak RSS per rank (MiB): " + " ".join(f"r{i}={v:.1f}" for i, v in enumerate(rss_mib)))
        print(f"param sha256 (rank 0): {h}   all ranks identical: {ranks_agree}")
        summary = dict(model=r["model"], world=world, threads=args.threads, global_batch=args.global_batch,
                       per_rank_batch=bs, steps_per_epoch=steps_per_epoch, epochs=epochs, seed=args.seed,
                       lr=r["lr"], nparams=nparams, peak_rss_mib=rss_mib, param_sha256=h,
                       ranks_agree=ranks_agree, torch=torch.__version__,
                       launcher="mpirun" if "OMPI_COMM_WORLD_RANK" in os.environ else "spawn",
                       openblas_coretype=os.environ.get("OPENBLAS_CORETYPE"),
                       openblas_l2_size=os.environ.get("OPENBLAS_L2_SIZE"), openblas=ob,
                       recipe=recipe_text, config=r["config"])
        print("RESULT " + json.dumps(summary), flush=True)
        if args.json_out:
            with open(args.json_out, "w") as f:
                json.dump(summary, f, indent=1)
    dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    if "OMPI_COMM_WORLD_RANK" in os.environ:
        worker(int(os.environ["OMPI_COMM_WORLD_RANK"]), ARGS.world, ARGS, ARGS.port or 29511)
    elif ARGS.world == 1:
        worker(0, 1, ARGS, ARGS.port or free_port())
    else:
        mp.spawn(worker, args=(ARGS.world, ARGS, ARGS.port or free_port()), nprocs=ARGS.world, join=True)


if __name__ == "__main__":
    main()
