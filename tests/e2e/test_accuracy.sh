#!/usr/bin/env bash
# Whole runs on the real Fashion-MNIST: one epoch reaches test_acc >= 0.80 on
# 1, 2 and 4 ranks with complete metrics; the full 5-epoch recipe reaches
# >= 0.88 on 2 ranks; max_steps stops the run exactly there.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
[ -f "$DATA/train-images-idx3-ubyte.gz" ] || { echo "missing $DATA (install dataset-fashion-mnist)"; exit 1; }

for np in 1 2 4; do
  dir=$WORK/acc$np
  if run_np "$np" "$WORK/acc$np" --config "$CONFIG" --run-dir "$dir" --set train.epochs=1 &&
     every_rank_exited "$np" "$WORK/acc$np" 0; then
    m=$dir/metrics.jsonl
    acc=$(metric "$m" 1 test_acc)
    ok=1
    for key in epoch step train_loss test_loss test_acc samples_per_s epoch_s peak_rss_mib param_sha256; do
      [ -n "$(metric "$m" 1 $key)" ] || { echo "  metrics.jsonl lacks $key"; ok=0; }
    done
    [ "$(metric "$m" 1 step)" = 234 ] || { echo "  step $(metric "$m" 1 step), want 234"; ok=0; }
    [ "$(metric "$m" 1 param_sha256 | wc -c)" = 65 ] || { echo "  bad digest"; ok=0; }
    [ -f "$dir/config.ini" ] && grep -q "^global_batch = 256" "$dir/config.ini" || { echo "  no resolved config"; ok=0; }
    if ((ok)) && ge "$acc" 0.80; then pass "np=$np 1 epoch: test_acc $acc >= 0.80"; else fail "np=$np 1 epoch: test_acc $acc"; cat "$WORK/acc$np.log"; fi
  else
    fail "np=$np run failed"; cat "$WORK/acc$np.log"
  fi
done

# The full recipe on 2 ranks, from the .gz files as a user's first run
# reads them (lib.sh: CONFIG_GZ; the other runs read un-gzipped copies).
dir=$WORK/full
if run_np 2 "$WORK/full" --config "$CONFIG_GZ" --run-dir "$dir"; then
  acc=$(metric "$dir/metrics.jsonl" -1 test_acc)
  n=$(wc -l < "$dir/metrics.jsonl")
  if [ "$n" = 5 ] && ge "$acc" 0.88; then pass "np=2 5 epochs: test_acc $acc >= 0.88"; else fail "np=2 5 epochs: $n lines, test_acc $acc"; fi
else
  fail "np=2 full run failed"; cat "$WORK/full.log"
fi

# max_steps: stops after exactly that many steps, mid-epoch, and says so.
dir=$WORK/maxsteps
if run_np 2 "$WORK/maxsteps" --config "$CONFIG" --run-dir "$dir" --set train.max_steps=300; then
  m=$dir/metrics.jsonl
  if [ "$(metric "$m" -1 step)" = 300 ] && [ "$(metric "$m" -1 partial)" = true ] && [ "$(wc -l < "$m")" = 2 ]; then
    pass "max_steps=300 stops at step 300 in epoch 2"
  else
    fail "max_steps: $(cat "$m")"
  fi
else
  fail "max_steps run failed"; cat "$WORK/maxsteps.log"
fi
finish
