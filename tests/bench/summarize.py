#!/usr/bin/env python3
"""Summarise one bench_mlp.sh output directory as a markdown table.

Reads (under OUT/raw/):
  ours-N<n>-r<rep>/metrics.jsonl, ours-N<n>-r<rep>/run.json   (ctrain-dist run dirs)
  peer-N<n>-r<rep>.json                                       (torch_ddp_fmnist.py --json-out)
and prints the table; with --md FILE also writes it (after OUT/header.md, if present).

Throughput rule, the same for both sides: the median of the per-epoch global
samples/s over all repetitions, leaving out epoch 1 when there is more than one
epoch (it pays for first-touch page faults, thread start-up and cache warm-up).
Standard library only.
"""
import argparse
import glob
import json
import os
import re
import statistics
import sys


def die(msg):
    print(f"summarize.py: error: {msg}", file=sys.stderr)
    sys.exit(1)


def load_ours(run_dir):
    path = os.path.join(run_dir, "metrics.jsonl")
    try:
        with open(path) as f:
            epochs = [json.loads(line) for line in f if line.strip()]
        with open(os.path.join(run_dir, "run.json")) as f:
            run = json.load(f)
    except (OSError, ValueError) as e:
        die(f"{run_dir}: {e}")
    return dict(
        sps=[e["samples_per_s"] for e in epochs],
        rss=max(e["peak_rss_mib"] for e in epochs),  # already the max over ranks
        acc=epochs[-1]["test_acc"] if epochs else None,
        sha=epochs[-1]["param_sha256"] if epochs else None,
        threads=run.get("blas_threads"),
        core=(re.search(r"\(core ([^)]*)\)", run.get("blas", "")) or [None, "?"])[1],
        n_epochs=len(epochs),
    )


def load_peer(path):
    try:
        with open(path) as f:
            s = json.load(f)
    except (OSError, ValueError) as e:
        die(f"{path}: {e}")
    return dict(
        sps=[e["samples_per_s"] for e in s["epochs"]],
        rss=max(s["peak_rss_mib"]),  # list, one per rank
        acc=s["epochs"][-1]["test_acc"] if s["epochs"] else None,
        sha=s.get("param_sha256"),
        threads=s.get("threads"),
        core=(s.get("openblas") or {}).get("corename", "?"),
        n_epochs=len(s["epochs"]),
    )


def steady(sps):
    """Per-epoch samples/s to pool: all but epoch 1 when there are several."""
    return sps[1:] if len(sps) > 1 else sps


def fmt_int(x):
    return f"{x:,.0f}"


def fmt_acc(vals):
    vals = sorted({v for v in vals if v is not None})
    if not vals:
        return "n/a"
    if len(vals) == 1:
        return f"{vals[0]:.4f}"
    return f"{vals[0]:.4f}–{vals[-1]:.4f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", help="bench output directory")
    ap.add_argument("--epochs", type=int, required=True, help="epochs each run was asked for")
    ap.add_argument("--md", help="also write header.md + table + notes to this file")
    a = ap.parse_args()

    raw = os.path.join(a.out, "raw")
    runs = {}  # (side, n) -> list of per-run dicts
    for d in glob.glob(os.path.join(raw, "ours-N*-r*")):
        m = re.fullmatch(r"ours-N(\d+)-r(\d+)", os.path.basename(d))
        if m and os.path.isdir(d):
            runs.setdefault(("ours", int(m[1])), []).append(load_ours(d))
    for p in glob.glob(os.path.join(raw, "peer-N*-r*.json")):
        m = re.fullmatch(r"peer-N(\d+)-r(\d+)\.json", os.path.basename(p))
        if m:
            runs.setdefault(("peer", int(m[1])), []).append(load_peer(p))
    if not runs:
        die(f"no runs under {raw}")

    worlds = sorted({n for _, n in runs})
    rows, notes, all_cores = [], [], {}
    for n in worlds:
        ours, peer = runs.get(("ours", n)), runs.get(("peer", n))
        if not ours or not peer:
            die(f"N={n}: missing {'ours' if not ours else 'peer'} results")
        for side, rs in (("ours", ours), ("peer", peer)):
            for r in rs:
                if r["n_epochs"] != a.epochs:
                    die(f"N={n} {side}: {r['n_epochs']} epochs recorded, {a.epochs} expected")
        o_sps = statistics.median([x for r in ours for x in steady(r["sps"])])
        p_sps = statistics.median([x for r in peer for x in steady(r["sps"])])
        o_rss = max(r["rss"] for r in ours)
        p_rss = max(r["rss"] for r in peer)
        thr = sorted({r["threads"] for r in ours} | {r["threads"] for r in peer})
        rows.append([
            str(n), "/".join(str(t) for t in thr), fmt_int(o_sps), fmt_int(p_sps), f"{o_sps / p_sps:.2f}",
            f"{o_rss:.0f}", f"{p_rss:.0f}", f"{o_rss / p_rss:.2f}",
            fmt_acc([r["acc"] for r in ours]), fmt_acc([r["acc"] for r in peer]),
        ])
        for side, rs in (("ours", ours), ("peer", peer)):
            if len({r["sha"] for r in rs}) > 1:
                notes.append(f"N={n} {side}: final parameter hash differs between repetitions")
        for side, rs in (("ours", ours), ("peer", peer)):
            all_cores.setdefault(side, set()).update(r["core"] for r in rs)

    if len(all_cores["ours"] | all_cores["peer"]) > 1:
        notes.append("the sides used different OpenBLAS kernels (ours: %s; peer: %s), so the samples/s "
                     "ratio is not framework against framework alone"
                     % (", ".join(sorted(all_cores["ours"])), ", ".join(sorted(all_cores["peer"]))))
    reps = len(runs[("ours", worlds[0])])
    used = a.epochs - 1 if a.epochs > 1 else 1
    head = ["N", "thr/rank", "ours samples/s", "peer samples/s", "ours/peer",
            "ours peak RSS/rank MiB", "peer peak RSS/rank MiB (max)", "RSS ours/peer",
            "ours final test_acc", "peer final test_acc"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    table = "\n".join(lines)
    legend = (
        f"samples/s: global, median of {used * reps} epoch timing(s) per cell "
        f"({reps} repetition(s) x {'epochs 2..' + str(a.epochs) if a.epochs > 1 else 'epoch 1'}); "
        "both sides time only the training loop (no evaluation). "
        "Peak RSS: ru_maxrss, max over ranks (and repetitions). "
        "test_acc: after the last epoch (a range if repetitions differ)."
    )
    print(table)
    print()
    print(legend)
    for n_ in notes:
        print("NOTE: " + n_)
    if a.md:
        header = ""
        hp = os.path.join(a.out, "header.md")
        if os.path.exists(hp):
            with open(hp) as f:
                header = f.read().rstrip() + "\n\n"
        with open(a.md, "w") as f:
            f.write(header + table + "\n\n" + legend + "\n")
            for n_ in notes:
                f.write(f"\n**Note:** {n_}\n")


if __name__ == "__main__":
    main()
