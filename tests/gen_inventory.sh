#!/usr/bin/env bash
# Regenerate the bad-input inventory in tests/README.md: run every e2e test
# that records its bad inputs (tests/e2e/lib.sh: inventory) with
# CT_INVENTORY set, then rewrite the table between the markers
# "<!-- inventory:begin -->" and "<!-- inventory:end -->" from the rows they
# wrote (duplicates, e.g. the same case at 1, 2 and 4 ranks, once).
# By hand, not in CI (CI must not rewrite the tree); it takes a few minutes,
# most of it test_resume.sh. Needs a build: BUILD=DIR (default build/).
#   tests/gen_inventory.sh             # all of them
#   tests/gen_inventory.sh bad_inputs  # only tests whose names contain a word given
# With a subset, the other tests' rows are kept from the current table.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${BUILD:-$root/build}
export CT_BINARY=${CT_BINARY:-$build/ctrain-dist}
export CT_SOURCE_DIR=$root
[ -x "$CT_BINARY" ] || { echo "no $CT_BINARY: build first (cmake --build build)" >&2; exit 1; }
readme=$root/tests/README.md
grep -q '^<!-- inventory:begin -->$' "$readme" && grep -q '^<!-- inventory:end -->$' "$readme" ||
  { echo "$readme: no inventory markers" >&2; exit 1; }

rows=$(mktemp)
trap 'rm -f "$rows" "$rows".*' EXIT
status=0
for t in "$root"/tests/e2e/test_*.sh; do
  grep -qw inventory "$t" || continue
  name=$(basename "$t" .sh)
  if [ $# -gt 0 ]; then
    want=0
    for w in "$@"; do [[ $name == *"$w"* ]] && want=1; done
    [ $want = 1 ] || continue
  fi
  echo "== $name"
  : > "$rows.$name"
  if CT_INVENTORY=$rows.$name bash "$t" > "$rows.$name.log" 2>&1; then
    echo "   $(tail -n 1 "$rows.$name.log"), $(wc -l < "$rows.$name") rows"
  else
    rc=$?
    [ $rc = 77 ] && { echo "   skipped: $(grep -m1 SKIP "$rows.$name.log")"; continue; }
    echo "   FAILED (status $rc): its rows are not used; the log:" >&2
    grep -E '^FAIL' "$rows.$name.log" | head >&2 || true
    status=1
    continue
  fi
  sed "s/^/$name|/" "$rows.$name" >> "$rows"
done
[ $status = 0 ] || { echo "some tests failed: $readme left as it was" >&2; exit 1; }

/usr/bin/env python3 - "$readme" "$rows" "$@" <<'PY'
import re, sys
readme, rows_path, subset = sys.argv[1], sys.argv[2], sys.argv[3:]
text = open(readme).read()
begin, end = "<!-- inventory:begin -->\n", "<!-- inventory:end -->"
head, rest = text.split(begin, 1)
old, tail = rest.split(end, 1)
sep = re.compile(r"(?<!\\)\|")
order = ["command line", "environment", "config", "config command", "data", "checkpoint",
         "export, predict", "audit, summary"]
# "error: ranks 0,1: MESSAGE" at 2 ranks is every rank saying MESSAGE: one
# row per case, with the numbers of ranks it was tried at.
agreed = re.compile(r"^(ctrain-dist: error: )ranks ([0-9,]+): ")
index, rows = {}, []
for line in open(rows_path):
    f = sep.split(line.rstrip("\n"), 5)
    if len(f) != 6:
        continue
    test, cat, inp, status, np_, msg = f
    n = int(np_)
    m = agreed.match(msg)
    if m and len(m.group(2).split(",")) == n:
        msg = m.group(1) + msg[m.end():]
    key = (cat, inp, status, msg)
    if key not in index:
        index[key] = len(rows)
        rows.append([test, cat, inp, status, msg, set()])
    rows[index[key]][5].add(n)
if subset:  # keep the rows of the tests that were not run
    for line in old.splitlines():
        cells = [c.strip() for c in sep.split(line.strip().strip("|"))] if line.startswith("| ") else []
        if len(cells) == 6 and cells[0] not in ("category", "---") and \
                not any(w in cells[5] for w in subset):
            cat, inp, status, ranks, msg, test = cells
            inp, msg = inp.strip("`"), msg.strip("`")
            rows.append([test, cat, inp, status, msg, {int(x) for x in ranks.split(",") if x.strip()}])
rank = {c: i for i, c in enumerate(order)}
rows.sort(key=lambda r: rank.get(r[1], len(order)))  # stable: each test's own order within
def code(s):
    return "`" + s.replace("`", "'") + "`" if s else ""
out = ["| category | input | exit | ranks | first message line | test |", "|---|---|---|---|---|---|"]
for test, cat, inp, status, msg, ns in rows:
    out.append(f"| {cat} | {code(inp)} | {status} | {', '.join(map(str, sorted(ns)))} | {code(msg)} | {test} |")
open(readme, "w").write(head + begin + "\n".join(out) + "\n" + end + tail)
print(f"{readme}: {len(rows)} rows")
PY
