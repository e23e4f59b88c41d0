#!/usr/bin/env bash
# The run report: two seeds of a tiny mlp run (2 epochs of 29 steps, 2 ranks,
# checkpoints, a per-step log), `ctrain-dist report` of both, and checks that
# the page holds the runs' own numbers (final test_acc, a point per epoch and
# per steps.jsonl line, the mean of the seeds), that every inline SVG is
# well-formed XML, that nothing is fetched or run (no script, no URL), that
# the CSV has a row per epoch per run, and that bad inputs fail with the file
# and line named; a traced run (log.trace) gets the timeline of a step, a
# trace cut short a note. Then headless Chromium renders it: the DOM holds
# the SVGs, the screenshot is not blank, the console stays silent.
#
# Without Chromium (Debian's `chromium`) the other checks still run and the
# test exits 77 (skipped) when they pass.
#
# CT_REPORT_SCREENSHOT=FILE also writes the README's screenshot (the top of
# the page: summary and the curves per epoch, 1200 x 940) to FILE:
#   CT_REPORT_SCREENSHOT=$PWD/tests/report-screenshot.png bash tests/e2e/test_report.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
PNG_STATS=$CT_SOURCE_DIR/tests/e2e/png_stats.py
R=$WORK/runs
args=(--config "$CONFIG" --set train.epochs=2 --set train.global_batch=2048 --set log.every_steps=5
      --set checkpoint.every_steps=20 --set checkpoint.every_epochs=1)

if run_np 2 "$WORK/train" "${args[@]}" --seeds 0,1 --run-dir "$R" -q &&
   [ "$(wc -l < "$R/seed-0/metrics.jsonl")" = 2 ] && [ "$(wc -l < "$R/seed-1/metrics.jsonl")" = 2 ]; then
  pass "trained seeds 0 and 1: 2 epochs each"
else
  fail "training the two seeds"; cat "$WORK/train.log"; finish; exit 1
fi

report() { timeout 120 "$CT_BINARY" report "$@"; }
# occurrences PATTERN FILE: how often PATTERN occurs (grep -c counts lines).
occurrences() { { grep -o -- "$1" "$2" || true; } | wc -l; }
HTML=$WORK/report.html
if report "$R" -o "$HTML" > "$WORK/report.out" 2>&1 && grep -q "report.html: html report of 2 runs" "$WORK/report.out" &&
   [ -s "$HTML" ] && ! ls "$WORK" | grep -q 'report.html.*tmp'; then
  pass "report of $R (seed-0, seed-1): $(wc -c < "$HTML") bytes"
else
  fail "report"; cat "$WORK/report.out"; finish; exit 1
fi

# The runs' numbers in the page: each seed's final test_acc (as metrics.jsonl
# writes it) in the summary, a point per epoch and per steps.jsonl line.
ok=1
for s in 0 1; do
  acc=$(metric "$R/seed-$s/metrics.jsonl" -1 test_acc)
  steps=$(wc -l < "$R/seed-$s/steps.jsonl")
  grep -q "<td class=\"num\">$acc</td>" "$HTML" || { echo "  seed-$s: final test_acc $acc not in the summary"; ok=0; }
  # 5 plots per epoch + test loss and accuracy by step: 2 points each.
  n=$(occurrences "data-series=\"seed-$s\" data-points=\"2\"" "$HTML")
  [ "$n" -ge 7 ] || { echo "  seed-$s: $n curves of 2 points (want >= 7)"; ok=0; }
  n=$(occurrences "data-series=\"seed-$s\" data-points=\"$steps\"" "$HTML")
  [ "$steps" -gt 5 ] && [ "$n" = 3 ] || { echo "  seed-$s: $n step curves of $steps points (want 3)"; ok=0; }
done
a0=$(metric "$R/seed-0/metrics.jsonl" -1 test_acc)
a1=$(metric "$R/seed-1/metrics.jsonl" -1 test_acc)
mean=$(awk -v a="$a0" -v b="$a1" 'BEGIN { printf "%.4f", (a + b) / 2 }')
grep -q "$mean &plusmn; " "$HTML" || { echo "  mean test_acc $mean not in the summary"; ok=0; }
[ "$(occurrences 'class="band"' "$HTML")" = 12 ] || { echo "  want 12 mean +- std bands (MFU's and the optimizer state's included)"; ok=0; }
grep -q 'data-group="rank 1"' "$HTML" || { echo "  no phase bar for rank 1"; ok=0; }
grep -q '<tr><th>train.seed</th><td>0</td><td>1</td></tr>' "$HTML" || { echo "  config diff lacks train.seed"; ok=0; }
grep -q "$(jsonl "$R/seed-1/chain.jsonl" -1 ckpt)" "$HTML" || { echo "  last checkpoint of seed-1 missing"; ok=0; }
[ "$ok" = 1 ] && pass "the page holds the runs' numbers (test_acc $a0, $a1; mean $mean)" || fail "numbers in the page"

# Every <svg> is well-formed XML; no script, nothing fetched.
if python3 - "$HTML" <<'EOF'
import re, sys, xml.etree.ElementTree as ET
text = open(sys.argv[1], encoding="utf-8").read()
svgs = re.findall(r"<svg .*?</svg>", text, re.S)
assert len(svgs) == 15, f"{len(svgs)} svg elements, want 15 (7 per-epoch: MFU the sixth, the optimizer state per rank the seventh)"
for s in svgs:
    ET.fromstring(s)
assert "<script" not in text.lower(), "a script"
urls = re.findall(r"(?:https?:)?//[^\s\"'<>]+", text)
assert all(u == "http://www.w3.org/2000/svg" for u in urls), f"URLs: {sorted(set(urls))[:5]}"
assert "<link" not in text and "@import" not in text and "url(" not in text, "an external resource"
EOF
then
  pass "15 inline SVGs, each well-formed XML; no script, no URL"
else
  fail "SVG well-formedness or self-containment"
fi

CSV=$WORK/metrics.csv
if report "$R/seed-0" "$R/seed-1" --format csv -o "$CSV" > "$WORK/csv.out" 2>&1 && [ "$(wc -l < "$CSV")" = 5 ] &&
   head -1 "$CSV" | grep -q '^run,epoch,step,partial,train_loss,train_acc,test_loss,test_acc,' &&
   grep -q "^$R/seed-1,2,58,false,.*,$a1," "$CSV" &&
   [ "$(report "$R" --format csv 2>/dev/null | wc -l)" = 5 ] &&
   report -o "$WORK/again.csv" --format csv "$R" > /dev/null 2>&1 && cmp -s "$CSV" "$WORK/again.csv"; then
  pass "--format csv: a header and a row per epoch per run (to -o FILE and to stdout; options first or last)"
else
  fail "--format csv"; cat "$WORK/csv.out" "$CSV"
fi

# A traced run (log.trace): the page draws one step per rank, in a
# well-formed SVG; a trace.json cut short is a note naming the file, and the
# rest of the page is there as always.
T=$WORK/traced
ok=1
if run_np 2 "$WORK/train-traced" --config "$CONFIG" --set train.max_steps=4 --set log.trace=steps:2-3 \
     --run-dir "$T" -q && report "$T" -o "$WORK/traced.html" > "$WORK/traced.out" 2>&1; then
  grep -q 'Step 3 (the middle one of the 2 steps traced on every rank, 2 to 3)' "$WORK/traced.html" ||
    { echo "  no caption for step 3"; ok=0; }
  n=$(occurrences 'class="rank" data-rank=' "$WORK/traced.html")
  [ "$n" = 2 ] || { echo "  $n ranks drawn (want 2)"; ok=0; }
  for name in data_wait forward backward sync_wait optimizer allreduce; do
    [ "$(occurrences "data-name=\"$name\"" "$WORK/traced.html")" -ge 2 ] || { echo "  no $name on both ranks"; ok=0; }
  done
  python3 - "$WORK/traced.html" <<'EOF2' || ok=0
import re, sys, xml.etree.ElementTree as ET
svg = re.findall(r'<svg [^>]*class="timeline".*?</svg>', open(sys.argv[1], encoding="utf-8").read(), re.S)
assert len(svg) == 1, f"{len(svg)} timeline charts"
ET.fromstring(svg[0])
EOF2
  head -n 1 "$T/trace.json" > "$T/cut.json" && mv "$T/cut.json" "$T/trace.json" # {"traceEvents": [
  report "$T" -o "$WORK/traced.html" > "$WORK/traced.out" 2>&1 &&
    grep -q "No timeline: $T/trace.json: offset 16: an array that never closes" "$WORK/traced.html" &&
    ! grep -q 'class="timeline"' "$WORK/traced.html" && grep -q 'id="provenance"' "$WORK/traced.html" ||
    { echo "  a trace.json cut short: no note, or no page"; cat "$WORK/traced.out"; ok=0; }
else
  echo "  the traced run or its report failed"; tail -5 "$WORK/train-traced.log" "$WORK/traced.out"; ok=0
fi
[ "$ok" = 1 ] && pass "a traced run (log.trace=steps:2-3): the timeline of step 3 on 2 ranks; cut short, a note" ||
  fail "the timeline of a traced run"

# Bad inputs: exit 1 naming the file (and line); bad command lines exit 2.
cp -r "$R/seed-0" "$WORK/bad"
echo '{"epoch": 3, "step": }' >> "$WORK/bad/metrics.jsonl"
ok=1
rc=0; report "$WORK/bad" -o "$WORK/bad.html" > "$WORK/bad.out" 2>&1 || rc=$?
[ "$rc" = 1 ] && grep -q "bad/metrics.jsonl:3" "$WORK/bad.out" && [ ! -e "$WORK/bad.html" ] ||
  { echo "  malformed metrics.jsonl: exit $rc"; cat "$WORK/bad.out"; ok=0; }
rm "$WORK/bad/run.json"
rc=0; report "$WORK/bad" -o "$WORK/bad.html" > "$WORK/bad.out" 2>&1 || rc=$?
[ "$rc" = 1 ] && grep -q "bad/run.json" "$WORK/bad.out" || { echo "  missing run.json: exit $rc"; cat "$WORK/bad.out"; ok=0; }
rc=0; report "$WORK/nothing-here" > "$WORK/bad.out" 2>&1 || rc=$?
[ "$rc" = 1 ] && grep -q "nothing-here: no such run directory" "$WORK/bad.out" || { echo "  missing dir: exit $rc"; ok=0; }
rc=0; report "$R" --format pdf > "$WORK/bad.out" 2>&1 || rc=$?
[ "$rc" = 2 ] && grep -q "expected html or csv" "$WORK/bad.out" || { echo "  --format pdf: exit $rc"; ok=0; }
rc=0; report > "$WORK/bad.out" 2>&1 || rc=$?
[ "$rc" = 2 ] && grep -q "report needs one or more run directories" "$WORK/bad.out" || { echo "  no dirs: exit $rc"; ok=0; }
rc=0; report "$R" --config x > /dev/null 2>&1 || rc=$?
[ "$rc" = 2 ] || { echo "  report --config: exit $rc"; ok=0; }
report --help > "$WORK/help.out" 2>&1 && grep -q "^usage: ctrain-dist report RUN_DIR" "$WORK/help.out" || { echo "  report --help"; ok=0; }
[ "$ok" = 1 ] && pass "bad inputs: exit 1 naming the file and line; bad command lines exit 2" || fail "bad inputs"

if ! command -v chromium > /dev/null; then
  finish || exit 1
  skip "no chromium (Debian's chromium package): the page was not rendered"
fi

# chromium ARGS...: headless, in a profile of its own, 120 s at most.
chromium_run() {
  timeout 120 chromium --headless --no-sandbox --disable-gpu --hide-scrollbars --no-first-run \
    --user-data-dir="$WORK/chromium-profile" "$@"
}
chromium_run --dump-dom "file://$HTML" > "$WORK/dom.html" 2> "$WORK/dom.err" || true
n_dom=$(occurrences '<svg ' "$WORK/dom.html")
n_dom_series=$(occurrences 'class="series"' "$WORK/dom.html")
n_file_series=$(occurrences 'class="series"' "$HTML")
if [ "$n_dom" = 15 ] && [ "$n_dom_series" = "$n_file_series" ] && grep -q "$mean &plusmn;\|$mean ±" "$WORK/dom.html"; then
  pass "Chromium's DOM: 15 SVGs, $n_dom_series series, the summary's mean"
else
  fail "Chromium's DOM: $n_dom SVGs, $n_dom_series of $n_file_series series"; tail -5 "$WORK/dom.err"
fi

SHOT=$WORK/shot.png
chromium_run --enable-logging=stderr --v=0 --window-size=1200,2400 --screenshot="$SHOT" "file://$HTML" \
  > "$WORK/shot.log" 2>&1 || true
read -r w h colours nonwhite < <(python3 "$PNG_STATS" "$SHOT" 2>/dev/null || echo 0 0 0 0)
if [ "$w" = 1200 ] && [ "$h" = 2400 ] && [ "$colours" -ge 50 ] && ge "$nonwhite" 0.05; then
  pass "screenshot 1200x2400: $colours colours, $nonwhite of the pixels not white"
else
  fail "screenshot: ${w}x$h, $colours colours, $nonwhite not white"; tail -5 "$WORK/shot.log"
fi
if grep -E "CONSOLE|Uncaught|SyntaxError|Refused to|net::ERR" "$WORK/shot.log" "$WORK/dom.err"; then
  fail "console messages or blocked loads while rendering (above)"
else
  pass "no console message, nothing blocked or fetched while rendering"
fi

if [ -n "${CT_REPORT_SCREENSHOT:-}" ]; then
  chromium_run --window-size=1200,940 --screenshot="$CT_REPORT_SCREENSHOT" "file://$HTML" > /dev/null 2>&1 &&
    echo "wrote $CT_REPORT_SCREENSHOT ($(wc -c < "$CT_REPORT_SCREENSHOT") bytes)"
fi
finish
