#!/usr/bin/env python3
"""Check the checkpoint commit protocol's durability order in strace logs.

Usage: strace_order.py RUN_DIR TRACE.0 [TRACE.1 ...]

Each TRACE.r is `strace -f -y -ttt -T` output of rank r (a file per rank:
with -y every fd argument carries its path, `3</run/ckpt-2.tmp-1/data.bin>`).
For every checkpoint rank 0 published (a rename of RUN/ckpt-N.tmp-* to
RUN/ckpt-N) it checks, and prints one line per checkpoint or per violation:
  - on every rank that wrote RUN/ckpt-N.tmp-*/data.bin: its last write to it
    is followed by an fsync of it, which returned before rank 0 began
    creating the manifest (timestamps: the ranks share one host clock);
  - on rank 0, in this order: manifest.sha256 and manifest.pb written and
    each fsynced, the temporary directory fsynced, renamed to ckpt-N, RUN
    fsynced, RUN/latest.tmp written and fsynced, renamed onto RUN/latest,
    RUN fsynced again;
  - RUN/latest itself is never opened for writing (it is only replaced).
Exit status 0 when all holds, 1 otherwise (2: unusable input). Only
successful calls count. Standard library only.
"""
import os
import re
import sys

LINE = re.compile(r"^(\d+)\s+(\d+\.\d+)\s+(.*)$")
CALL = re.compile(r"^(\w+)\((.*)\)\s+=\s+(-?\d+|\?)(?:<[^>]*>)?(.*?)(?:<(\d+\.\d+)>)?\s*$")
RESUMED = re.compile(r"^<\.\.\. (\w+) resumed>(.*)$")
FDPATH = re.compile(r"^-?\d+<(.*)>$")
WRITES = {"write", "pwrite64", "pwritev", "pwritev2", "writev"}


def split_args(s):
    """Top-level comma split of an strace argument list (quotes, brackets)."""
    out, depth, cur, q, esc = [], 0, [], False, False
    for ch in s:
        if q:
            cur.append(ch)
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == '"':
                q = False
            continue
        if ch == '"':
            q = True
        elif ch in "[{(<":
            depth += 1
        elif ch in "]})>":
            depth -= 1
        elif ch == "," and depth == 0:
            out.append("".join(cur).strip())
            cur = []
            continue
        cur.append(ch)
    if cur:
        out.append("".join(cur).strip())
    return out


def unquote(a):
    if a.startswith('"'):
        a = a[1:]
        if a.endswith('"...'):
            a = a[:-4]
        elif a.endswith('"'):
            a = a[:-1]
    return a


def fd_path(a):
    m = FDPATH.match(a)
    return m.group(1) if m else None


def at_path(dirfd, name):
    """renameat/openat: an absolute name, or one relative to dirfd's path."""
    name = unquote(name)
    if name.startswith("/"):
        return os.path.normpath(name)
    base = fd_path(dirfd) if dirfd else None
    return os.path.normpath(os.path.join(base or ".", name))


def parse(path):
    """Events (t_start, t_end, kind, a, b, flags) of one rank's trace."""
    pending, events = {}, []
    with open(path, errors="replace") as f:
        for raw in f:
            m = LINE.match(raw.rstrip("\n"))
            if not m:
                continue
            pid, ts, body = m.group(1), float(m.group(2)), m.group(3)
            if body.startswith("+++") or body.startswith("---"):
                continue
            if body.endswith("<unfinished ...>"):
                pending[pid] = (ts, body[: -len("<unfinished ...>")].rstrip())
                continue
            r = RESUMED.match(body)
            if r:
                if pid not in pending:
                    continue
                ts, head = pending.pop(pid)
                rest = r.group(2)
                body = head + (rest if rest.startswith(",") or rest.startswith(")") else " " + rest)
            c = CALL.match(body)
            if not c:
                continue
            name, args, ret, dur = c.group(1), split_args(c.group(2)), c.group(3), c.group(5)
            if ret == "?" or int(ret) < 0:
                continue
            end = ts + (float(dur) if dur else 0.0)
            if name in WRITES or name in ("fsync", "fdatasync"):
                p = fd_path(args[0]) if args else None
                if p:
                    events.append((ts, end, "write" if name in WRITES else "fsync", p, None, ""))
            elif name in ("rename", "renameat", "renameat2"):
                if name == "rename" and len(args) >= 2:
                    a, b = at_path(None, args[0]), at_path(None, args[1])
                elif len(args) >= 4:
                    a, b = at_path(args[0], args[1]), at_path(args[2], args[3])
                else:
                    continue
                events.append((ts, end, "rename", a, b, args[4] if len(args) > 4 else ""))
            elif name in ("openat", "open"):
                if name == "openat" and len(args) >= 3:
                    p, flags = at_path(args[0], args[1]), args[2]
                elif name == "open" and len(args) >= 2:
                    p, flags = at_path(None, args[0]), args[1]
                else:
                    continue
                events.append((ts, end, "open", p, None, flags))
    events.sort(key=lambda e: e[0])
    return events


def main(argv):
    if len(argv) < 3:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    run = os.path.normpath(os.path.abspath(argv[1]))
    ranks = [parse(p) for p in argv[2:]]
    r0 = ranks[0]
    latest, latest_tmp = run + "/latest", run + "/latest.tmp"
    tmp_re = re.compile(re.escape(run) + r"/(ckpt-\d+)\.tmp-[^/]+$")
    commits = [e for e in r0 if e[2] == "rename" and tmp_re.match(e[3]) and
               e[4] == run + "/" + tmp_re.match(e[3]).group(1)]
    bad = 0
    if not commits:
        print(f"no checkpoint was published in {run} (no rename of a ckpt-N.tmp-* onto ckpt-N)")
        return 1
    for e in r0 + [x for r in ranks[1:] for x in r]:
        if e[2] == "open" and e[3] == latest and ("O_WRONLY" in e[5] or "O_RDWR" in e[5]):
            print(f"{latest} opened for writing ({e[5]}): it must only be replaced by rename")
            bad += 1
    # A checkpoint's steps end where the next checkpoint's first begins, so
    # that a step missing from one is not found in the next.
    limits = []
    for i, c in enumerate(commits):
        nxt = commits[i + 1][3] + "/" if i + 1 < len(commits) else None
        limits.append(min((e[0] for e in r0 if nxt and (e[3] + "/").startswith(nxt)), default=float("inf")))
    for c, limit in zip(commits, limits):
        tmp, final = c[3], c[4]
        name = os.path.basename(final)
        data = tmp + "/data.bin"

        def first(kind, path, after, path2=None, events=r0):
            for e in events:
                if e[0] >= limit:
                    break
                if e[0] >= after and e[2] == kind and e[3] == path and (path2 is None or e[4] == path2):
                    return e
            return None

        # rank 0's chain, each step the first of its kind after the one before.
        steps = [("write", tmp + "/manifest.sha256", None), ("fsync", tmp + "/manifest.sha256", None),
                 ("write", tmp + "/manifest.pb", None), ("fsync", tmp + "/manifest.pb", None),
                 ("fsync", tmp, None), ("rename", tmp, final), ("fsync", run, None),
                 ("write", latest_tmp, None), ("fsync", latest_tmp, None),
                 ("rename", latest_tmp, latest), ("fsync", run, None)]
        # Start from the creation of the manifest files: everything of this
        # checkpoint on rank 0 happens after its data, checked below.
        t, ok, manifest_start = 0.0, True, None
        for kind, p, p2 in steps:
            e = first(kind, p, t, p2)
            if e is None:
                what = f"{kind} {p}" + (f" -> {p2}" if p2 else "")
                k = steps.index((kind, p, p2))
                prev = f" after the {steps[k - 1][0]} of {steps[k - 1][1]}" if k else ""
                print(f"{name}: rank 0: no {what}{prev} (before the next checkpoint)")
                ok = False
                break
            if manifest_start is None:
                manifest_start = e[0]
            t = e[1]
        # A manifest file opened (created) before that first write counts too.
        for e in r0:
            if e[2] == "open" and e[3] in (tmp + "/manifest.sha256", tmp + "/manifest.pb") and \
                    manifest_start is not None and e[0] < manifest_start:
                manifest_start = e[0]
        # every rank: data written, then synced, before the manifest exists.
        writers = 0
        for r, ev in enumerate(ranks):
            w = [e for e in ev if e[2] == "write" and e[3] == data]
            if not w:
                continue
            writers += 1
            last = max(e[1] for e in w)
            s = [e for e in ev if e[2] in ("fsync",) and e[3] == data and e[0] >= last]
            if not s:
                print(f"{name}: rank {r}: data.bin written but not fsynced after its last write")
                ok = False
            elif manifest_start is not None and min(e[1] for e in s) > manifest_start:
                print(f"{name}: rank {r}: data.bin's fsync returned at {min(e[1] for e in s):.6f}, after "
                      f"rank 0 began the manifest at {manifest_start:.6f}")
                ok = False
        if writers == 0:
            print(f"{name}: no rank wrote {data}")
            ok = False
        if ok:
            print(f"{name}: ok: data.bin written and fsynced on {writers} rank(s) before the manifest; "
                  f"manifest fsynced, directory fsynced, renamed, {run} fsynced, latest replaced by "
                  f"rename, {run} fsynced")
        else:
            bad += 1
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
