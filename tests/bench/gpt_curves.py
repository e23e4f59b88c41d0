#!/usr/bin/env python3
"""Per-step training losses of ctrain-dist against torch_gpt_peer.py's, for the
same weights, data and schedule: a benchmark's check that both sides train the
same model the same way (tests/bench/README.md, stop 41). Run by hand.

    # the starting point both load: ours' initial weights (one step at lr 1e-30)
    mpirun -np 1 build/ctrain-dist train --config C --run-dir /tmp/init --set train.max_steps=1 \\
        --set optim.lr=1e-30 --set schedule.min_lr=0
    build/ctrain-dist export /tmp/init/ckpt-1 --format safetensors -o /tmp/init.safetensors
    # one rank (the peer records rank 0's own loss per step; ours the global mean)
    mpirun -np 1 build/ctrain-dist train --config C --run-dir /tmp/ours --set train.max_steps=50 \\
        --set train.init_from=/tmp/init.safetensors [--set ...]
    mpirun -np 1 python3 tests/bench/torch_gpt_peer.py --config C --set train.max_steps=50 [--set ...] \\
        --init-from /tmp/init.safetensors --json-out /tmp/peer.json --log-every 1
    tests/bench/gpt_curves.py /tmp/ours /tmp/peer.json

Prints the mean and largest |ours - peer|, the means of each 10 steps and
every step. Compare at one rank: with more, the peer's per-step losses are
rank 0's alone.
"""
import json
import statistics as st
import sys


def main(run_dir, peer_json):
    ours = [json.loads(line)["loss"] for line in open(run_dir + "/steps.jsonl")]
    peer = json.load(open(peer_json))["step_loss_rank0"]
    n = min(len(ours), len(peer))
    if n == 0:
        sys.exit("gpt_curves.py: no steps to compare")
    d = [o - p for o, p in zip(ours[:n], peer[:n])]
    worst = max(range(n), key=lambda i: abs(d[i]))
    print(f"{n} steps; |ours - peer| mean {st.mean(abs(x) for x in d):.5f}, "
          f"largest {abs(d[worst]):.5f} at step {worst + 1}")
    for lo in range(0, n - 9, 10):
        print(f"steps {lo + 1}-{lo + 10}: ours mean {st.mean(ours[lo:lo + 10]):.4f}, "
              f"peer mean {st.mean(peer[lo:lo + 10]):.4f}")
    print("step ours peer ours-peer")
    for i in range(n):
        print(f"{i + 1} {ours[i]:.4f} {peer[i]:.4f} {d[i]:+.5f}")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
