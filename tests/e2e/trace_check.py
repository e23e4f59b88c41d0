#!/usr/bin/env python3
"""Check a RUN_DIR/trace.json against the contract (docs/performance.md,
"Timeline trace"); prints what it checked, or what is wrong (exit 1).

  trace_check.py TRACE [--sync overlap|blocking] [--steps A-B] [--world W]
                       [--raw]   (undo the alignment first: must then FAIL
                                  the barrier check when a skew was injected)

Checks: JSON; every pid has process_name and sort index, every (pid, tid)
with an event its thread_name; events of one tid nest or are disjoint; each
rank has its steps A..B; per step and rank, a gradient collective starts
before that step's last backward ends (overlap) or none starts before it
(blocking); barrier causality: every rank's aligned barrier end >= every
rank's aligned barrier begin - (bound_i + bound_j).
Times are compared in whole nanoseconds (the file has 3 decimals of us)."""
import argparse, collections, json, sys

ap = argparse.ArgumentParser()
ap.add_argument("trace")
ap.add_argument("--sync")
ap.add_argument("--steps")
ap.add_argument("--world", type=int)
ap.add_argument("--raw", action="store_true")
a = ap.parse_args()
errors = []
def bad(msg):
    errors.append(msg)

d = json.load(open(a.trace))
ev = d["traceEvents"]
oth = d["otherData"]["ctrain"]
W = oth["world"]
clock = oth["clock"]
bound_ns = [round(b * 1000) for b in clock["bound_us"]]
for key in ("steps", "hosts", "dropped_events", "max_mb", "code_version"):
    if key not in oth:
        bad("otherData.ctrain lacks %s" % key)
if d.get("displayTimeUnit") != "ms":
    bad("displayTimeUnit is %r" % d.get("displayTimeUnit"))
if a.world and W != a.world:
    bad("world %d, expected %d" % (W, a.world))
if len(clock["offset_us"]) != W or len(bound_ns) != W or clock["reference_rank"] != 0:
    bad("clock: %r" % clock)

def ns(x):
    return round(x * 1000)

spans = []
procs, threads = {}, {}
for e in ev:
    if e["ph"] == "M":
        if e["name"] == "process_name":
            procs[e["pid"]] = e["args"]["name"]
        elif e["name"] == "thread_name":
            threads[(e["pid"], e["tid"])] = e["args"]["name"]
        elif e["name"] != "process_sort_index":
            bad("unknown metadata %r" % e)
        continue
    if e["ph"] != "X":
        bad("event of phase %r" % e["ph"])
        continue
    b = ns(e["ts"])
    if a.raw:  # back on the rank's own clock (start offset; drift ignored)
        b += ns(clock["offset_us"][e["pid"]])
    spans.append(dict(e, b=b, e=b + ns(e["dur"])))

for pid in range(W):
    if not procs.get(pid, "").startswith("rank %d (" % pid):
        bad("rank %d: process_name %r" % (pid, procs.get(pid)))
for s in spans:
    k = (s["pid"], s["tid"])
    want = {0: "main", 1: "loader"}.get(s["tid"], "comm %d" % (s["tid"] - 2))
    if threads.get(k) != want:
        bad("pid %d tid %d: thread_name %r, expected %r" % (k + (threads.get(k), want)))

by_tid = collections.defaultdict(list)
for s in spans:
    by_tid[(s["pid"], s["tid"])].append(s)
for k, ss in sorted(by_tid.items()):
    ss.sort(key=lambda s: (s["b"], -s["e"]))
    stack = []
    for s in ss:
        while stack and stack[-1]["e"] <= s["b"]:
            stack.pop()
        if stack and s["e"] > stack[-1]["e"]:
            bad("pid %d tid %d: %s [%d, %d] ns overlaps %s [%d, %d] without nesting" %
                (k + (s["name"], s["b"], s["e"], stack[-1]["name"], stack[-1]["b"], stack[-1]["e"])))
            break
        stack.append(s)
        if k[1] >= 2 and len(stack) > 1:
            bad("pid %d tid %d: comm spans overlap on one lane" % k)
            break

cats = collections.Counter((s["cat"], s["name"]) for s in spans)
first, last = (int(x) for x in a.steps.split("-")) if a.steps else oth["steps"]
if a.steps and oth["steps"] != [first, last]:
    bad("otherData steps %r, expected [%d, %d]" % (oth["steps"], first, last))
checked = 0
for pid in range(W):
    steps = {s["args"]["step"]: s for s in spans
             if s["pid"] == pid and s["tid"] == 0 and s["cat"] == "step"}
    if sorted(steps) != list(range(first, last + 1)):
        bad("rank %d: steps %r, expected %d..%d" % (pid, sorted(steps), first, last))
    for n, st in sorted(steps.items()):
        inside = [s for s in spans if s["pid"] == pid and st["b"] <= s["b"] <= st["e"]]
        bwd = [s["e"] for s in inside if s["tid"] == 0 and s["name"] == "backward"]
        comm = [s["b"] for s in inside if s["tid"] >= 2 and s["name"] in ("allreduce", "reduce_scatter")]
        if not a.sync:
            continue
        if not bwd or not comm:
            bad("rank %d step %d: %d backward and %d gradient collectives" % (pid, n, len(bwd), len(comm)))
            continue
        if a.sync == "overlap" and not min(comm) < max(bwd):
            bad("rank %d step %d (overlap): the first collective starts at %d, after backward "
                "ends at %d" % (pid, n, min(comm), max(bwd)))
        if a.sync == "blocking" and not min(comm) >= max(bwd):
            bad("rank %d step %d (blocking): a collective starts at %d, before backward "
                "ends at %d" % (pid, n, min(comm), max(bwd)))
        checked += 1

bar = {s["pid"]: s for s in spans if s["cat"] == "clock" and s["name"] == "barrier"}
if sorted(bar) != list(range(W)):
    bad("barrier spans of ranks %r" % sorted(bar))
else:
    worst = None
    for i in range(W):
        for j in range(W):
            # 2 ns: each timestamp was rounded to 1 ns
            slack = bar[i]["e"] - (bar[j]["b"] - bound_ns[i] - bound_ns[j]) + 2
            worst = slack if worst is None else min(worst, slack)
            if slack < 0:
                bad("barrier: rank %d's end %d ns precedes rank %d's begin %d ns by more than "
                    "the bounds %d + %d ns" % (i, bar[i]["e"], j, bar[j]["b"], bound_ns[i], bound_ns[j]))

if errors:
    print("\n".join(errors[:10]))
    sys.exit(1)
print("%d events, %d ranks, steps %d-%d, %d step checks, bounds %s us, offsets %s us, "
      "barrier slack >= %d ns; %s" % (len(spans), W, first, last, checked, clock["bound_us"],
      clock["offset_us"], worst, ", ".join("%s/%s %d" % (c, n, v) for (c, n), v in
      sorted(cats.items()) if c != "module")))
