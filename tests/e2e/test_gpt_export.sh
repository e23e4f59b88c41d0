#!/usr/bin/env bash
# A gpt's export under nanoGPT's names, checked against PyTorch, and the
# PyTorch peer (tests/bench/torch_gpt_peer.py) checked against ours:
# - a tiny gpt (2 blocks, width 32, block 16) trains 9 steps at N = 2 on two
#   train shards (windows of a set span shards; 7 steps per epoch, so the
#   window offsets move once) written from this repository's README;
# - export of the last checkpoint, as safetensors and as npz: exactly the
#   state_dict names of the peer's nanoGPT-style GPT (strict load), lm_head.weight
#   equal to transformer.wte.weight, and the val loss over the same windows
#   equal to `eval`'s to 1e-5;
# - the peer's batches are ours: with the weights of ours' checkpoint s, the
#   peer's loss on what it takes for step s + 1 is the loss ours recorded for
#   that step (steps.jsonl), to 1e-5, for every step (both epochs);
# - the peer's training is ours: started from ours' initial weights (a run at
#   lr 1e-30, which leaves them as they are), its per-step losses and final val
#   loss follow ours to 1e-4 at 1 rank, and its val loss at 2 ranks (DDP) too.
# Needs torch and numpy under /usr/bin/python3 (CT_TORCH_PYTHON): skipped
# without them, a failure under CI=true (CI installs python3-torch).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
need_torch
PEER=$CT_SOURCE_DIR/tests/bench/torch_gpt_peer.py

head -c 9000 "$CT_SOURCE_DIR/README.md" | token_shard "$WORK/train-a.bin"
head -c 16000 "$CT_SOURCE_DIR/README.md" | tail -c 7000 | token_shard "$WORK/train-b.bin"
tail -c 4000 "$CT_SOURCE_DIR/README.md" | token_shard "$WORK/val.bin"

# The same overrides for ours and the peer (both read configs/moby-gpt.ini).
SETS=(--set data.dir="$WORK" --set data.train_images=train-a.bin,train-b.bin
      --set model.depth=2 --set model.width=32 --set model.heads=2 --set model.block=16
      --set train.global_batch=128 --set train.epochs=4 --set schedule.warmup_steps=3)
CFG=(--config "$CT_SOURCE_DIR/configs/moby-gpt.ini")
STEPS=9
run=$WORK/run
if ! run_np 2 "$WORK/train" "${CFG[@]}" "${SETS[@]}" --run-dir "$run" --set train.max_steps=$STEPS \
     --set log.every_steps=1 --set checkpoint.every_steps=1 --set checkpoint.keep_last=0 \
     --set train.eval_every=1000; then
  fail "training the gpt"; cat "$WORK/train.log"; finish
fi
ck=$run/ckpt-$STEPS
run_np 2 "$WORK/eval" eval --checkpoint "$ck" || { fail "eval"; cat "$WORK/eval.log"; finish; }
val=$(sed -n 's/^val_loss \([0-9.]*\) nats per token.*/\1/p' "$WORK/eval.log")
[ -n "$val" ] || { fail "eval printed no 'val_loss X nats per token'"; cat "$WORK/eval.log"; finish; }
for fmt in safetensors npz; do
  run_np 2 "$WORK/export-$fmt" export "$ck" --format $fmt -o "$WORK/last.$fmt" ||
    { fail "export $fmt"; cat "$WORK/export-$fmt.log"; }
done
for ((s = 1; s < STEPS; s++)); do
  run_np 1 "$WORK/export$s" export "$run/ckpt-$s" --format safetensors -o "$WORK/ckpt-$s.safetensors" ||
    { fail "export ckpt-$s"; cat "$WORK/export$s.log"; }
done
# Ours' initial weights: one step at lr 1e-30 moves no weight by more than
# 1e-29 (AdamW's step is about lr per element).
if run_np 1 "$WORK/init" "${CFG[@]}" "${SETS[@]}" --run-dir "$WORK/init-run" --set train.max_steps=1 \
     --set optim.lr=1e-30 --set schedule.min_lr=0 && run_np 1 "$WORK/init-export" export "$WORK/init-run/ckpt-1" \
     --format safetensors -o "$WORK/init.safetensors"; then
  for world in 1 2; do
    timeout 600 "$TORCH_PY" "$PEER" "${CFG[@]}" "${SETS[@]}" --set train.max_steps=$STEPS --world $world \
      --init-from "$WORK/init.safetensors" --json-out "$WORK/peer$world.json" >"$WORK/peer$world.log" 2>&1 ||
      { fail "the peer at $world rank(s)"; tail -20 "$WORK/peer$world.log"; }
  done
else
  fail "ours' initial weights"; cat "$WORK/init.log" "$WORK/init-export.log" 2>/dev/null || true
fi

out=$("$TORCH_PY" - "$PEER" "$WORK" "$val" "$STEPS" "${CFG[1]}" "${SETS[@]}" <<'PY' 2>&1
import json, os, sys
peer, work, val, steps, config = sys.argv[1], sys.argv[2], float(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
sets = [a for a in sys.argv[6:] if a != "--set"]
sys.path.insert(0, os.path.dirname(peer))
import numpy as np
import torch
import torch.nn.functional as F
import torch_gpt_peer as P

torch.set_num_threads(1)
r = P.Recipe(config, sets)
train = P.TokenShards([r.path_of(f) for f in r.train_files], r.block, r.seed)
vset = P.TokenShards([r.path_of(f) for f in r.val_files], r.block, r.seed)
V = P.vocab_size(r, train, vset)
bad = []

def check(ok, what):
    print(("ok: " if ok else "FAIL: ") + what)
    if not ok:
        bad.append(what)

def model_from(path):
    m = P.GPT.from_recipe(r, V)
    P.load_export(m, path)  # strict names and shapes
    return m

def val_loss(m):
    total, n = P.val_loss_sums(m, vset, 64)
    return total / n

# The exports: nanoGPT's names exactly, the tied head, eval's val loss.
want = list(P.GPT.from_recipe(r, V).state_dict().keys())
for fmt in ("safetensors", "npz"):
    tensors, meta = P.read_export(os.path.join(work, "last." + fmt))
    check(sorted(tensors) == sorted(want) and "lm_head.weight" in tensors
          and "transformer.h.1.attn.c_attn.weight" in tensors,
          f"{fmt}: nanoGPT's names ({len(tensors)} tensors, e.g. transformer.h.1.attn.c_attn.weight "
          f"{tuple(tensors.get('transformer.h.1.attn.c_attn.weight', np.zeros(0)).shape)})")
    check(np.array_equal(tensors["lm_head.weight"], tensors["transformer.wte.weight"]),
          f"{fmt}: lm_head.weight == transformer.wte.weight")
    got = val_loss(model_from(os.path.join(work, "last." + fmt)))
    check(abs(got - val) <= 1e-5, f"{fmt}: PyTorch val loss {got:.7f}, ctrain-dist eval {val:.6f}")

# The batches: ours' checkpoint s, the peer's batch of step s + 1.
ours = [json.loads(l) for l in open(os.path.join(work, "run", "steps.jsonl"))]
spe = train.n // r.global_batch
worst = 0.0
for s in range(1, steps):
    e, k = divmod(s, spe)
    x, y = train.gather(P.rank_batch(P.permutation(train.n, r.seed, e), k, r.global_batch, 1, 0), e)
    with torch.no_grad():
        got = F.cross_entropy(model_from(os.path.join(work, f"ckpt-{s}.safetensors"))(x).reshape(-1, V),
                              y.reshape(-1)).item()
    worst = max(worst, abs(got - ours[s]["loss"]))
check(worst <= 1e-5 and spe < steps - 1,
      f"the peer's batches of steps 2..{steps} (epochs 0 and 1, {spe} steps each) give ours' "
      f"recorded losses: max |difference| {worst:.2e}")

# The peer's own training from ours' initial weights.
for world in (1, 2):
    p = os.path.join(work, f"peer{world}.json")
    if not os.path.exists(p):
        check(False, f"peer at {world} rank(s) wrote no summary")
        continue
    s = json.load(open(p))
    pv = s["evals"][-1]["val_loss"]
    check(abs(pv - val) <= 1e-4 and s["steps"] == steps and s["ranks_agree"],
          f"peer at {world} rank(s): val loss {pv:.6f} after {s['steps']} steps, ours {val:.6f}")
    if world == 1:
        d = max(abs(a - b["loss"]) for a, b in zip(s["step_loss_rank0"], ours))
        check(d <= 1e-4 and len(s["step_loss_rank0"]) == steps,
              f"peer at 1 rank: per-step losses follow ours': max |difference| {d:.2e}")
sys.exit(1 if bad else 0)
PY
) && rc=0 || rc=$?
while IFS= read -r line; do
  case $line in
    ok:*) pass "${line#ok: }" ;;
    FAIL:*) fail "${line#FAIL: }" ;;
    *) echo "  $line" ;;
  esac
done <<<"$out"
[ $rc -eq 0 ] || grep -q '^FAIL:' <<<"$out" || fail "the PyTorch check ended with status $rc"
finish
