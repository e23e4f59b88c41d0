#!/usr/bin/env bash
# The gpt on token data (llm.c-layout shards of byte tokens), small enough for
# CI (depth 1, width 32, block 16) and on text the test writes itself (this
# repository's README: no network):
# - deterministic mode: the same param_sha256 at N = 1, 2 and 4;
# - a run stopped at N = 2 and resumed at N = 4 ends with the same digest;
# - audit verify accepts the resumed run, audit replay certifies its second
#   interval at another N; a resume with another model.block
#   is refused;
# - the training loss falls; metrics.jsonl has tokens_per_s and val_bpb,
#   steps.jsonl tokens_per_s, and the report plots both;
# - eval prints the val loss per token and the bits per byte; predict refuses;
# - a gpt on image data, and an image model on token data, are refused.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

head -c 24000 "$CT_SOURCE_DIR/README.md" | token_shard "$WORK/train.bin"
tail -c 4000 "$CT_SOURCE_DIR/README.md" | token_shard "$WORK/val.bin"

GPT=(--config "$CT_SOURCE_DIR/configs/moby-gpt.ini" --set data.dir="$WORK"
     --set model.depth=1 --set model.width=32 --set model.heads=2 --set model.block=16
     --set train.global_batch=16 --set train.epochs=2 --set schedule.warmup_steps=4
     --set log.every_steps=1 --set checkpoint.every_epochs=0 --set train.eval_every=1000)
DET=(--set train.deterministic=true --set train.micro_batch=4)

# 1. Deterministic: the same weights at N = 1, 2, 4.
ref=
for np in 1 2 4; do
  out=$WORK/det$np
  if ! run_np $np "$out" "${GPT[@]}" "${DET[@]}" --run-dir "$out" --set train.max_steps=20; then
    fail "deterministic gpt np=$np"; cat "$out.log"; continue
  fi
  d=$(digest "$out")
  if [ -z "$ref" ]; then
    ref=$d
    pass "deterministic gpt np=1: param_sha256 $ref"
  elif [ "$d" = "$ref" ]; then
    pass "deterministic gpt np=$np: the same param_sha256 as np=1"
  else
    fail "deterministic gpt np=$np: $d, np=1 gave $ref"
  fi
done

# 2. Stopped at N = 2 (step 10), resumed at N = 4 to step 20: np=1's digest.
out=$WORK/resumed
if run_np 2 "$out.a" "${GPT[@]}" "${DET[@]}" --run-dir "$out" --set train.max_steps=10 &&
   run_np 4 "$out.b" "${GPT[@]}" "${DET[@]}" --run-dir "$out" --set train.max_steps=20 --resume auto; then
  [ "$(digest "$out")" = "$ref" ] && pass "stopped at N=2, resumed at N=4: the straight run's digest" ||
    fail "resumed at another N: $(digest "$out"), straight $ref"
  if "$CT_BINARY" audit verify "$out" >"$WORK/verify.log" 2>&1 && grep -q "verdict: OK" "$WORK/verify.log"; then
    pass "audit verify accepts the resumed gpt run"
  else
    fail "audit verify"; cat "$WORK/verify.log"
  fi
  # Replay of the interval that ran at N = 4, here at N = 2 (deterministic: any N).
  mkdir -p "$WORK/cert"
  if run_np 2 "$out.r" audit replay "$out/ckpt-10" "$out/ckpt-20" --out "$WORK/cert" &&
     [ "$(jsonl "$WORK/cert/audit-ckpt-10-ckpt-20.json" 1 verdict)" = identical ]; then
    pass "audit replay of ckpt-10 -> ckpt-20 (run at N=4) at N=2: identical"
  else
    fail "audit replay of the gpt"; cat "$out.r.log"; ls "$out" "$WORK/cert"
  fi
  # The context length is part of the experiment: a resume may not change it.
  if ! run_np 1 "$out.c" "${GPT[@]}" "${DET[@]}" --run-dir "$out" --set train.max_steps=30 \
         --set model.block=8 --resume auto &&
     grep -q "different experiment" "$out.c.log" && grep -q "model.block" "$out.c.log"; then
    pass "a resume with another model.block is refused"
  else
    fail "resume with model.block changed"; cat "$out.c.log"
  fi
else
  fail "stop/resume runs"; cat "$out.a.log" "$out.b.log"
fi

# 3. Default mode at N = 2: the loss falls, the token metrics are there.
out=$WORK/plain
if run_np 2 "$out" "${GPT[@]}" --run-dir "$out" --set train.eval_every=1; then
  first=$(jsonl "$out/steps.jsonl" 1 loss) last=$(jsonl "$out/steps.jsonl" -1 loss)
  awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a - 0.5) }' &&
    pass "training loss falls: $first -> $last nats per token" || fail "loss $first -> $last"
  tps=$(metric "$out/metrics.jsonl" -1 tokens_per_s) bpb=$(metric "$out/metrics.jsonl" -1 val_bpb)
  vl=$(metric "$out/metrics.jsonl" -1 test_loss)
  if ge "$tps" 1 && awk -v l="$vl" -v b="$bpb" 'BEGIN { d = l / log(2) - b; exit !(d < 1e-3 && d > -1e-3) }'; then
    pass "metrics.jsonl: tokens_per_s $tps, val_bpb $bpb = test_loss $vl / ln 2"
  else
    fail "token metrics: tokens_per_s '$tps' val_bpb '$bpb' test_loss '$vl'"; tail -1 "$out/metrics.jsonl"
  fi
  grep -q "tokens/s" "$out.log" && pass "the log shows tokens/s" || fail "no tokens/s in the log"
  # MFU: the FLOPs of a 16-byte window through this gpt (tests/unit/test_flops.c checks
  # the count against the kernels), a positive mfu, the peak of run.json.
  fps=$(metric "$out/metrics.jsonl" -1 flops_per_sample) mfu=$(metric "$out/metrics.jsonl" -1 mfu)
  if [ -n "$fps" ] && [ "$fps" = "$(jsonl "$out/run.json" 1 flops_per_sample)" ] && ge "$mfu" 0.0001 &&
     [ "$(metric "$out/metrics.jsonl" -1 peak_gflops)" = "$(jsonl "$out/run.json" 1 peak_gflops)" ]; then
    pass "metrics.jsonl: flops_per_sample $fps, mfu $mfu against run.json's peak"
  else
    fail "MFU: flops_per_sample '$fps' mfu '$mfu'"; tail -1 "$out/metrics.jsonl"; cat "$out/run.json"
  fi
  stps=$(jsonl "$out/steps.jsonl" -1 tokens_per_s)
  ge "$stps" 1 && pass "steps.jsonl: tokens_per_s $stps" || fail "steps.jsonl tokens_per_s '$stps'"
  if "$CT_BINARY" report "$out" -o "$WORK/report.html" >/dev/null 2>&1 &&
     "$CT_BINARY" report "$out" --format csv -o "$WORK/report.csv" >/dev/null 2>&1 &&
     grep -q "Validation bits per byte per epoch" "$WORK/report.html" &&
     grep -q "Throughput per epoch, tokens" "$WORK/report.html" &&
     head -1 "$WORK/report.csv" | grep -q ",tokens_per_s,val_bpb,flops_per_sample,achieved_gflops_mean,peak_gflops,mfu,optim_state_bytes$" &&
     tail -1 "$WORK/report.csv" | grep -Eq ",$bpb,[0-9]+,[0-9.]+,[0-9.]+,[0-9.]+,[0-9]+$"; then
    pass "report: tokens/s and bits-per-byte plots, and both in its CSV"
  else
    fail "report of a gpt run"; head -2 "$WORK/report.csv"
  fi
  ck=$out/$(cat "$out/latest")
  if "$CT_BINARY" eval --checkpoint "$ck" >"$WORK/eval.log" 2>&1 &&
     grep -q "val_loss [0-9.]* nats per token, val_bpb [0-9.]*" "$WORK/eval.log"; then
    pass "eval: $(grep -o 'val_loss [0-9.]* nats per token, val_bpb [0-9.]*' "$WORK/eval.log")"
  else
    fail "eval of a gpt checkpoint"; cat "$WORK/eval.log"
  fi
  if ! "$CT_BINARY" predict --checkpoint "$ck" -o "$WORK/p.csv" >"$WORK/predict.log" 2>&1 &&
     grep -q "per-sample predictions are for class labels" "$WORK/predict.log"; then
    pass "predict refuses a language model, saying why"
  else
    fail "predict of a gpt checkpoint"; cat "$WORK/predict.log"
  fi
else
  fail "gpt np=2"; cat "$out.log"
fi

# 4. Mismatched model and data.
out=$WORK/mismatch
run_np 1 "$out.a" --config "$CONFIG" --run-dir "$out.a" --set model.name=gpt || true
grep -q "model.name = gpt needs token data" "$out.a.log" && pass "a gpt on IDX images is refused" ||
  { fail "gpt on images"; cat "$out.a.log"; }
run_np 1 "$out.b" "${GPT[@]}" --run-dir "$out.b" --set model.name=mlp || true
grep -q "token data (data.format = tokens) needs a language model" "$out.b.log" &&
  pass "an mlp on token data is refused" || { fail "mlp on tokens"; cat "$out.b.log"; }
finish
