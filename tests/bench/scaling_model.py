#!/usr/bin/env python3
"""Alpha-beta (Hockney) model of data-parallel scaling for ctrain-dist's four models.

What it does:
  1. Fits alpha (per-message latency) and beta (seconds per byte) to this machine's
     bench_mpi JSON lines (tests/bench/bench_mpi.c): t = alpha + n*beta to the
     ping-pong sweep (whole range, and small / large messages apart, since shared
     memory switches protocol at a few KiB), and the ring formula to each
     MPI_Allreduce sweep. It prints each fit with its error, and how well the
     ping-pong alpha/beta predict the measured allreduce (min over algorithms).
  2. Takes each model's per-rank compute time per step (forward + backward +
     optimizer, per-rank batch 128) from a ctrain-dist run at N = 1 (--measure,
     reading compute_s + optim_s from the run's metrics.jsonl) or from
     --compute-ms model=MS.
  3. Predicts weak scaling (per-rank batch fixed at 128 = the configs' global batch
     256 / 2) at 8, 16, ..., 1024 ranks over an assumed network (default 100 Gb/s,
     alpha 3 us), with and without overlap of the gradient allreduce with backward,
     and prints one markdown table per model.

Allreduce of n bytes over p ranks (alpha-beta, no reduction cost unless --gamma-gbs):
  ring                 2(p-1) alpha + 2(p-1)/p n beta
  recursive doubling   ceil(log2 p) (alpha + n beta)
  rabenseifner         2 ceil(log2 p) alpha + 2(p-1)/p n beta   (only with --algos ...,rab)
The model takes the minimum over the enabled algorithms (default ring,rd), as MPI
libraries switch algorithm by message size.

Gradient sync (src/parallel/gradsync.h): buckets in backward order, the first one
1 MiB, the others 4 MiB (by bytes here; the real planner cuts at module boundaries).
Blocking: every bucket after backward, one after another. Overlap: bucket i can
start once backward has produced it -- at bwd_frac * compute * (bytes so far /
gradient bytes), gradients assumed to appear in proportion to their bytes -- and
after bucket i-1 is done; what runs past the end of backward is exposed. A model
whose gradient fits in the first bucket has one bucket, ready only when backward
ends: overlap hides nothing for it.

ZeRO-1 (dist.shard_optimizer, src/parallel/shard.h): each bucket is reduce-scattered
instead (overlapped the same way), then come what nothing hides: an all-gather of the
clipping norm's block sums (8 bytes per 256 parameters), the optimizer on 1/p of the
parameters, and an all-gather of the parameters:
  reduce-scatter       ring (p-1) alpha + (p-1)/p n beta; recursive halving
                       ceil(log2 p) alpha + (p-1)/p n beta (+ (p-1)/p n gamma either way)
  all-gather           ring (p-1) alpha + (p-1)/p n beta; recursive doubling
                       ceil(log2 p) alpha + (p-1)/p n beta
The same bytes as the allreduce (its two halves), but the second half no longer
overlaps backward; the optimizer's time falls to 1/p.

Standard library only. Run by hand; see tests/bench/README.md.
"""
import argparse
import json
import math
import os
import re
import statistics
import subprocess
import sys
import tempfile

MODELS = {  # parameters (4 bytes each), from the four configs
    "mlp": 235_146,
    "cnn": 421_834,
    "resnet": 77_754,
    "vit": 138_890,
}
PER_RANK_BATCH = 128
MIB = 1 << 20
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def die(msg):
    print(f"scaling_model.py: error: {msg}", file=sys.stderr)
    sys.exit(1)


# ----------------------------------------------------------------- measurements
def load_mpi(paths):
    rows = []
    for p in paths:
        try:
            with open(p) as f:
                for ln, line in enumerate(f, 1):
                    if line.strip():
                        try:
                            rows.append(json.loads(line))
                        except ValueError as e:
                            die(f"{p}:{ln}: not JSON: {e}")
        except OSError as e:
            die(str(e))
    return rows


def lsq(xs, ys, ws):
    """Weighted least squares y ~ sum_j c_j x_j (xs: list of feature tuples)."""
    k = len(xs[0])
    a = [[0.0] * k for _ in range(k)]
    b = [0.0] * k
    for x, y, w in zip(xs, ys, ws):
        for i in range(k):
            b[i] += w * x[i] * y
            for j in range(k):
                a[i][j] += w * x[i] * x[j]
    # Gauss-Jordan (k <= 3)
    for i in range(k):
        piv = max(range(i, k), key=lambda r: abs(a[r][i]))
        a[i], a[piv], b[i], b[piv] = a[piv], a[i], b[piv], b[i]
        if abs(a[i][i]) < 1e-300:
            return None
        for r in range(k):
            if r != i:
                f = a[r][i] / a[i][i]
                a[r] = [u - f * v for u, v in zip(a[r], a[i])]
                b[r] -= f * b[i]
    return [b[i] / a[i][i] for i in range(k)]


def rel_errors(pred, meas):
    e = [(p - m) / m for p, m in zip(pred, meas)]
    return math.sqrt(sum(x * x for x in e) / len(e)), max(abs(x) for x in e)


def fit_pingpong(rows, np_, lo, hi):
    """t = alpha + n beta on the one-way median times of the N = np_ sweep, weighted by
    1/t^2 (relative error)."""
    pts = [(r["bytes"], r["median_us"] * 1e-6) for r in rows
           if r["bench"] == "pingpong" and r["np"] == np_ and lo <= r["bytes"] <= hi]
    if len(pts) < 2:
        return None
    c = lsq([(1.0, n) for n, _ in pts], [t for _, t in pts], [1.0 / t ** 2 for _, t in pts])
    if c is None:
        return None
    pred = [c[0] + c[1] * n for n, _ in pts]
    rms, mx = rel_errors(pred, [t for _, t in pts])
    return dict(alpha=c[0], beta=c[1], rms=rms, max=mx, n=len(pts), lo=pts[0][0], hi=pts[-1][0])


def fit_allreduce(rows, np_, bench, lo):
    """Ring form T = 2(p-1) alpha + 2(p-1)/p n beta, weighted by 1/T^2."""
    pts = [(r["bytes"], r["median_us"] * 1e-6) for r in rows
           if r["bench"] == bench and r["np"] == np_ and r["bytes"] >= lo]
    if len(pts) < 2:
        return None
    p = np_
    c = lsq([(2.0 * (p - 1), 2.0 * (p - 1) / p * n) for n, _ in pts], [t for _, t in pts],
            [1.0 / t ** 2 for _, t in pts])
    if c is None:
        return None
    pred = [2 * (p - 1) * c[0] + 2 * (p - 1) / p * n * c[1] for n, _ in pts]
    rms, mx = rel_errors(pred, [t for _, t in pts])
    return dict(alpha=c[0], beta=c[1], rms=rms, max=mx, n=len(pts))


# ----------------------------------------------------------------- the model
def allreduce_time(n, p, alpha, beta, gamma, algos):
    """(seconds, algorithm) for an allreduce of n bytes over p ranks."""
    if p <= 1:
        return 0.0, "-"
    lg = math.ceil(math.log2(p))
    red = (p - 1) / p * n * gamma
    cand = {}
    if "ring" in algos:
        cand["ring"] = 2 * (p - 1) * alpha + 2 * (p - 1) / p * n * beta + red
    if "rd" in algos:
        cand["rd"] = lg * (alpha + n * beta + n * gamma)
    if "rab" in algos:
        cand["rab"] = 2 * lg * alpha + 2 * (p - 1) / p * n * beta + red
    name = min(cand, key=cand.get)
    return cand[name], name


def scatter_gather_time(n, p, alpha, beta, gamma):
    """(reduce-scatter, all-gather) seconds for n bytes over p ranks: the better
    of the ring and the log-depth algorithm (their bandwidth terms are equal)."""
    if p <= 1:
        return 0.0, 0.0
    lg = math.ceil(math.log2(p))
    bw = (p - 1) / p * n * beta
    rs = min(p - 1, lg) * alpha + bw + (p - 1) / p * n * gamma
    ag = min(p - 1, lg) * alpha + bw
    return rs, ag


def buckets(grad_bytes, first, size):
    out, left = [], grad_bytes
    cap = first
    while left > 0:
        b = min(left, cap)
        out.append(b)
        left -= b
        cap = size
    return out


def step_model(compute_s, grad_bytes, p, net, a):
    """Per-step (blocking, overlap) dicts: step_s, exposed_s, algorithms used."""
    bks = buckets(grad_bytes, a.first_bucket_mib * MIB, a.bucket_mib * MIB)
    times, algs = [], set()
    for b in bks:
        t, alg = allreduce_time(b, p, net["alpha"], net["beta"], net["gamma"], a.algos)
        times.append(t)
        algs.add(alg)
    comm = sum(times)
    blocking = dict(step=compute_s + comm, exposed=comm)
    t_bwd = a.bwd_frac * compute_s
    t_fwd_end = (1 - a.bwd_frac - a.optim_frac) * compute_s  # optimizer after the sync
    end, done = 0.0, 0
    for b, t in zip(bks, times):
        done += b
        ready = t_fwd_end + t_bwd * done / grad_bytes
        end = max(end, ready) + t
    exposed = max(0.0, end - (t_fwd_end + t_bwd))
    overlap = dict(step=compute_s + exposed, exposed=exposed)
    return blocking, overlap, "/".join(sorted(algs)), len(bks)


def zero_model(compute_s, grad_bytes, p, net, a):
    """ZeRO-1 per-step dict (overlapped reduce-scatter): step_s, exposed_s."""
    bks = buckets(grad_bytes, a.first_bucket_mib * MIB, a.bucket_mib * MIB)
    al, be, ga = net["alpha"], net["beta"], net["gamma"]
    t_bwd = a.bwd_frac * compute_s
    t_fwd_end = (1 - a.bwd_frac - a.optim_frac) * compute_s
    end, done = 0.0, 0
    for b in bks:
        done += b
        ready = t_fwd_end + t_bwd * done / grad_bytes
        end = max(end, ready) + scatter_gather_time(b, p, al, be, ga)[0]
    exposed = max(0.0, end - (t_fwd_end + t_bwd))
    norm_ag = scatter_gather_time(8 * math.ceil(grad_bytes / 4 / 256), p, al, be, ga)[1]
    param_ag = scatter_gather_time(grad_bytes, p, al, be, ga)[1]
    exposed += norm_ag + param_ag
    optim = a.optim_frac * compute_s
    return dict(step=compute_s - optim + optim / p + exposed, exposed=exposed)


# ----------------------------------------------------------------- compute times
def metric(rec, *names):
    """The first of names present in a metrics.jsonl record, as one number: the
    binary has reported both scalars and per-rank lists (then the max, i.e. the
    slowest rank, or the *_max key)."""
    for k in names:
        if k in rec:
            v = rec[k]
            return (max(v) if isinstance(v, list) else v), k
    return None, None


def compute_from_metrics(rec, model):
    """Seconds of forward+backward+optimizer in one metrics.jsonl record; the keys have
    changed while the training step was rewritten, so each generation is accepted."""
    fb, k1 = metric(rec, "forward_backward_s_max", "forward_backward_s", "compute_s")
    opt, k2 = metric(rec, "optim_s_max", "optim_s")
    if fb is not None and opt is not None:
        return fb + opt, f"{k1} + {k2}"
    ep, _ = metric(rec, "epoch_s")
    if ep is None:
        die(f"{model}: metrics.jsonl has no forward/backward, optimizer or epoch time: keys {sorted(rec)}")
    data, _ = metric(rec, "data_wait_s_max", "data_s")
    comm, _ = metric(rec, "exposed_comm_s_max", "allreduce_s")
    return ep - (data or 0.0) - (comm or 0.0), "epoch_s - data - comm"


def measure_compute(a):
    """Per-step compute (forward+backward+optimizer) of each model, from ctrain-dist at N = 1."""
    out = {}
    for m in a.models:
        cfg = os.path.join(ROOT, "configs", f"fmnist-{m}.ini")
        vals, used = [], None
        for rep in range(a.reps):
            with tempfile.TemporaryDirectory(prefix=f"ct-scaling-{m}-") as d:
                run_dir = os.path.join(d, "run")
                cmd = [a.bin, "--config", cfg, "--run-dir", run_dir,
                       "--set", f"train.max_steps={a.steps}", "--set", f"train.global_batch={PER_RANK_BATCH}",
                       "--set", f"dist.threads={a.threads}"] + [x for kv in a.ours_set for x in ("--set", kv)]
                print(f"measure: {' '.join(cmd)}", file=sys.stderr)
                r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                if r.returncode != 0:
                    die(f"{m}: ctrain-dist failed ({r.returncode}):\n{r.stdout[-2000:]}")
                try:
                    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
                        rec = [json.loads(x) for x in f if x.strip()][-1]
                except (OSError, ValueError, IndexError) as e:
                    die(f"{m}: no metrics.jsonl in {run_dir}: {e}")
            steps = rec.get("step") or a.steps
            s, used = compute_from_metrics(rec, m)
            vals.append(s / steps * 1e3)
        out[m] = statistics.median(vals)
        print(f"measure: {m}: {', '.join(f'{v:.2f}' for v in vals)} ms/step ({used}/{steps} steps); "
              f"median {out[m]:.2f}", file=sys.stderr)
    return out


# ----------------------------------------------------------------- output
def fmt_fit(name, f, unit_note=""):
    if f is None:
        return f"| {name} | n/a | n/a | n/a | n/a |"
    bw = f"{1e-9 / f['beta']:.2f} GB/s" if f["beta"] > 0 else "flat: no size term"
    return (f"| {name}{unit_note} | {f['alpha'] * 1e6:.3f} | {f['beta'] * 1e12:.1f} ({bw}) | "
            f"{f['rms'] * 100:.0f}% | {f['max'] * 100:.0f}% |")


def report_fits(rows, a):
    lines = ["| fit | alpha us | beta ps/B (1/beta) | rms rel. error | max rel. error |", "|---|---|---|---|---|"]
    pp_nps = sorted({r["np"] for r in rows if r["bench"] == "pingpong"})
    pp_small = pp_large = None
    for np_ in pp_nps:
        small, large = fit_pingpong(rows, np_, 0, 2048), fit_pingpong(rows, np_, 64 << 10, 1 << 62)
        lines.append(fmt_fit(f"ping-pong, N={np_}, all sizes", fit_pingpong(rows, np_, 0, 1 << 62)))
        lines.append(fmt_fit(f"ping-pong, N={np_}, <= 2 KiB", small))
        lines.append(fmt_fit(f"ping-pong, N={np_}, >= 64 KiB", large))
        if pp_small is None:  # the smallest N: the least oversubscribed sweep
            pp_small, pp_large, pp_np = small, large, np_
    nps = sorted({r["np"] for r in rows if r["bench"] in ("allreduce", "iallreduce")})
    for np_ in nps:
        for bench in ("allreduce", "iallreduce"):
            lines.append(fmt_fit(f"{bench} ring form, N={np_}, all sizes", fit_allreduce(rows, np_, bench, 0)))
        lines.append(fmt_fit(f"allreduce ring form, N={np_}, >= 64 KiB", fit_allreduce(rows, np_, "allreduce", 64 << 10)))
    # how well do the ping-pong parameters predict the collective?
    pred_lines = []
    if pp_small and pp_large:
        for np_ in nps:
            pts = [r for r in rows if r["bench"] == "allreduce" and r["np"] == np_]
            if not pts:
                continue
            pred, meas = [], []
            for r in pts:
                f = pp_small if r["bytes"] <= 2048 else pp_large
                t, _ = allreduce_time(r["bytes"], np_, f["alpha"], f["beta"], 0.0, a.algos)
                pred.append(t)
                meas.append(r["median_us"] * 1e-6)
            rms, mx = rel_errors(pred, meas)
            ratio = statistics.median(m / p for m, p in zip(meas, pred))
            pred_lines.append(f"- N={np_}: allreduce predicted from the N={pp_np} ping-pong fits (small/large), "
                              f"min over {','.join(a.algos)}: rms rel. error {rms * 100:.0f}%, max {mx * 100:.0f}%, "
                              f"median measured/predicted {ratio:.2f} ({len(pts)} sizes)")
    return "\n".join(lines) + ("\n\n" + "\n".join(pred_lines) if pred_lines else ""), pp_small, pp_large


def model_table(m, compute_ms, net, a):
    grad = MODELS[m] * 4
    head = (f"**{m}**: {MODELS[m]:,} params, gradient {grad / 1e6:.3f} MB = "
            f"{len(buckets(grad, a.first_bucket_mib * MIB, a.bucket_mib * MIB))} bucket(s); "
            f"compute {compute_ms:.2f} ms/step per rank (batch {PER_RANK_BATCH})")
    lines = [head, "",
             "| ranks | algorithm | step ms (blocking) | comm ms exposed (blocking) | efficiency (blocking) | "
             "step ms (overlap) | comm ms exposed (overlap) | efficiency (overlap) | "
             "step ms (ZeRO-1) | comm ms exposed (ZeRO-1) | efficiency (ZeRO-1) |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    c = compute_ms * 1e-3
    p = 8
    while p <= a.max_ranks:
        blk, ovl, alg, _ = step_model(c, grad, p, net, a)
        z = zero_model(c, grad, p, net, a)
        lines.append(f"| {p} | {alg} | {blk['step'] * 1e3:.3f} | {blk['exposed'] * 1e3:.3f} | "
                     f"{c / blk['step'] * 100:.1f}% | {ovl['step'] * 1e3:.3f} | {ovl['exposed'] * 1e3:.3f} | "
                     f"{c / ovl['step'] * 100:.1f}% | {z['step'] * 1e3:.3f} | {z['exposed'] * 1e3:.3f} | "
                     f"{c / z['step'] * 100:.1f}% |")
        p *= 2
    return "\n".join(lines)


def parse_compute(items):
    out = {}
    for it in items:
        for kv in it.split(","):
            m = re.fullmatch(r"\s*([a-z]+)\s*=\s*([0-9.eE+-]+)\s*", kv)
            if not m or m[1] not in MODELS:
                die(f"--compute-ms wants model=ms with model in {', '.join(MODELS)}; found '{kv}'")
            out[m[1]] = float(m[2])
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mpi_json", nargs="*", help="bench_mpi --json files (this machine's sweeps)")
    ap.add_argument("--compute-ms", action="append", default=[], metavar="M=MS[,M=MS]",
                    help="per-rank compute ms/step (forward+backward+optimizer, batch 128) of a model")
    ap.add_argument("--measure", action="store_true",
                    help="measure the compute times missing from --compute-ms with ctrain-dist at N = 1")
    ap.add_argument("--bin", default=os.path.join(ROOT, "build-bench", "ctrain-dist"))
    ap.add_argument("--steps", type=int, default=40, help="train.max_steps of each measuring run (default 40)")
    ap.add_argument("--reps", type=int, default=3, help="measuring runs per model, median taken (default 3)")
    ap.add_argument("--threads", default="1", help="dist.threads of the measuring runs (default 1: a rank per core)")
    ap.add_argument("--ours-set", action="append", default=[], metavar="K=V", help="extra --set for measuring runs")
    ap.add_argument("--models", default=",".join(MODELS), help="models to model (default all four)")
    ap.add_argument("--net-gbps", type=float, default=100.0, help="network line rate, Gb/s (default 100)")
    ap.add_argument("--net-efficiency", type=float, default=1.0,
                    help="fraction of the line rate a large message achieves (default 1.0)")
    ap.add_argument("--alpha-us", type=float, default=3.0, help="per-message latency on that network, us (default 3)")
    ap.add_argument("--gamma-gbs", type=float, default=0.0,
                    help="reduction (float add) rate in GB/s per rank; 0: reduction cost ignored (default)")
    ap.add_argument("--use-fit", action="store_true",
                    help="predict with this machine's large-message ping-pong fit instead of the network")
    ap.add_argument("--algos", default="ring,rd", help="allreduce algorithms to take the min over: ring,rd,rab")
    ap.add_argument("--bucket-mib", type=float, default=4.0)
    ap.add_argument("--first-bucket-mib", type=float, default=1.0)
    ap.add_argument("--bwd-frac", type=float, default=0.6,
                    help="backward's share of the per-step compute (default 0.6: backward ~2x forward, "
                         "optimizer ~10%%)")
    ap.add_argument("--optim-frac", type=float, default=0.1, help="the optimizer's share (default 0.1)")
    ap.add_argument("--max-ranks", type=int, default=1024)
    ap.add_argument("--md", help="also write the output (markdown) to this file")
    a = ap.parse_args()
    a.models = [m for m in a.models.split(",") if m]
    a.algos = [x for x in a.algos.split(",") if x]
    for m in a.models:
        if m not in MODELS:
            die(f"unknown model {m}")
    if not set(a.algos) <= {"ring", "rd", "rab"} or not a.algos:
        die("--algos: a comma list of ring, rd, rab")
    if not (0 < a.bwd_frac and 0 <= a.optim_frac and a.bwd_frac + a.optim_frac <= 1):
        die("--bwd-frac + --optim-frac must be in (0, 1]")

    out = []
    pp_large = None
    if a.mpi_json:
        rows = load_mpi(a.mpi_json)
        meta = [r for r in rows if r.get("bench") == "meta"]
        out.append("### Fit to this machine's sweeps")
        out.append("")
        out.append("Sources: " + ", ".join(f"`{p}`" for p in a.mpi_json) + "; "
                   + "; ".join(f"N={r['np']} on {r.get('host')}, {r.get('mpi', '?').split(',')[0]}" for r in meta))
        out.append("")
        text, _, pp_large = report_fits(rows, a)
        out.append(text)
        out.append("")
    elif a.use_fit:
        die("--use-fit needs bench_mpi JSON files")

    compute = parse_compute(a.compute_ms)
    missing = [m for m in a.models if m not in compute]
    if missing:
        if not a.measure:
            die(f"no compute time for {', '.join(missing)}: give --compute-ms or --measure")
        a.models_to_measure = missing
        saved, a.models = a.models, missing
        compute.update(measure_compute(a))
        a.models = saved

    if a.use_fit:
        net = dict(alpha=pp_large["alpha"], beta=pp_large["beta"], gamma=0.0,
                   text=f"this machine's ping-pong fit (>= 64 KiB): alpha {pp_large['alpha'] * 1e6:.2f} us, "
                        f"1/beta {1e-9 / pp_large['beta']:.2f} GB/s")
    else:
        bw = a.net_gbps * 1e9 / 8 * a.net_efficiency
        net = dict(alpha=a.alpha_us * 1e-6, beta=1.0 / bw, gamma=(1.0 / (a.gamma_gbs * 1e9)) if a.gamma_gbs > 0 else 0.0,
                   text=f"{a.net_gbps:g} Gb/s x {a.net_efficiency:g} = {bw / 1e9:.2f} GB/s (beta {1e12 / bw:.1f} ps/B), "
                        f"alpha {a.alpha_us:g} us"
                        + (f", reduction {a.gamma_gbs:g} GB/s" if a.gamma_gbs > 0 else ", reduction cost ignored"))
    out.append("### Predicted weak scaling")
    out.append("")
    out.append(f"Network: {net['text']}; allreduce = min over {','.join(a.algos)}; buckets "
               f"{a.first_bucket_mib:g} MiB first, then {a.bucket_mib:g} MiB; backward {a.bwd_frac:g} and optimizer "
               f"{a.optim_frac:g} of the compute; per-rank batch {PER_RANK_BATCH} fixed (weak scaling); "
               "efficiency = compute / step (ZeRO-1's can pass 100%: its optimizer runs on 1/p of the "
               "parameters).")
    for m in a.models:
        out.append("")
        out.append(model_table(m, compute[m], net, a))
    text = "\n".join(out)
    print(text)
    if a.md:
        with open(a.md, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
