#!/usr/bin/env bash
# Intent: use_dpo with the real trainer on pairs made by scripts/prepare_preference.sh (pre-tokenized, ragged), 1 and 2
# processes (ranks started by hand on loopback):
#   - 2 processes K=2 and 1 process K=4 against one batch of 8 pairs: every step's loss, eval_loss and rewards within
#     1e-5 relative (fp32), packed and unpacked, sigmoid with the NLL term;
#   - resume: 2 processes trained 3 steps then resumed to 6 give bitwise the 6 straight steps' losses (the reference
#     read back from the run directory), and 1 process resumes a 2-process checkpoint (1e-5);
#   - per_device_batch_size=auto fits pairs (the same losses as one batch, 1e-5); ZeRO-1, ZeRO-2 and ZeRO-3 = plain data parallel and
#     remat_policy=full = none (1e-5); a bf16 shadow tree within 1e-2;
#   - a resume with another pair file exits 2; LoRA: K=4 against one batch (1e-5);
#   - metrics.jsonl has TRL's quantities; step 1's loss is log 2 (the reference is the model at step 0).
# Cost: 18 trainer runs of the tiny model (2 layers, 32 wide) of 3-6 steps, 4 of them on 2 processes: ~60 s on 2 cores.
#
# Usage: tests/preference_test.sh TRAINER COMPARE_RUNS
# Exit: 0 pass; 1 fail (the scratch directory is kept and its path printed).
set -uo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/lib/multiprocess_test.sh" preference_test "$@"

# Pre-tokenized pairs (no tokenizer needed): prompts of 1-6 tokens, answers of 1-9; the chosen answer counts up.
python3 "$repo/tests/lib/ragged_pairs.py" "$tmp" train:96:1 val:13:2 --other
for s in train val train_other; do
  "$repo/scripts/prepare_preference.sh" "$tmp/$s.jsonl" "$tmp/$s.pairs" >"$tmp/prepare_$s.log" 2>&1 ||
    { cat "$tmp/prepare_$s.log" >&2; fail "prepare_preference.sh $s"; }
done
pref=(dataset_type=preference use_dpo=true "dataset_path=$tmp/train.pairs" "eval_dataset_path=$tmp/val.pairs"
      eval_interval=3 max_target_length=16 dpo_beta=0.5 dpo_nll_weight=0.3 opt_type=sgd learning_rate=0.5)

case_keys=("${pref[@]}")
run() { run_case "$@"; }
close() { close_runs "$@"; }

for packing in true false; do
  echo "== packing=$packing: 2 processes K=2 and 1 process K=4 against one batch (8 pairs)"
  run "big_$packing" 0 6 packing=$packing per_device_batch_size=8 gradient_accumulation_steps=1
  run "p1_$packing" 0 6 packing=$packing per_device_batch_size=2 gradient_accumulation_steps=4
  run "p2_$packing" 2 6 packing=$packing per_device_batch_size=2 gradient_accumulation_steps=2
  for m in loss eval_loss rewards_chosen logps_rejected eval_rewards_margin; do
    close "p1_$packing" "big_$packing" $m 1e-5
    close "p2_$packing" "big_$packing" $m 1e-5
  done
done
python3 - "$runs/big_true/metrics.jsonl" <<'PY' || fail "metrics.jsonl lacks TRL's quantities or step 1 is not log 2"
import json, math, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
for k in ("rewards_chosen", "rewards_rejected", "rewards_accuracy", "rewards_margin", "logps_chosen", "logps_rejected"):
    assert all(k in r for r in rows), k
assert any("eval_rewards_accuracy" in r for r in rows)
# Step 1: policy = reference, so the pair term is log 2 and the rewards are 0; the NLL term adds 0.3 x the chosen NLL.
assert rows[0]["rewards_chosen"] == 0 and rows[0]["rewards_margin"] == 0
assert rows[0]["loss"] > math.log(2)
assert rows[-1]["rewards_margin"] > 0, "the margin should grow on learnable chosen answers"
PY

echo "== per_device_batch_size=auto fits pairs: the same global batch of 8, the same steps"
run auto_fit 0 6 packing=true per_device_batch_size=auto global_batch_size=8
grep -q "pdbs=auto: " "$tmp/auto_fit.log" || fail "no line about the fitted microbatch"
close auto_fit big_true loss 1e-5

echo "== resume: 3 steps then 6 (2 processes) bitwise against 6 straight; then 1 process from a 2-process checkpoint"
ck=(checkpoint_period=3 learning_rate_schedule_steps=6)
run straight 2 6 "${ck[@]}"
run resumed 2 3 "${ck[@]}"
run resumed 2 6 "${ck[@]}"
cmp <(grep -o '"loss":[^,]*' "$runs/straight/metrics.jsonl") <(grep -o '"loss":[^,]*' "$runs/resumed/metrics.jsonl") ||
  fail "a resumed preference run's losses differ from the straight run's"
grep -q "reference log-probs of .* from .*reference_logps.bin" "$tmp/resumed.log" ||
  fail "the resumed run did not read its reference from the run directory"
run elastic 2 3 "${ck[@]}"
run elastic 0 6 "${ck[@]}" gradient_accumulation_steps=2
close elastic straight loss 1e-5
rc=0
"$TRAINER" "${tiny[@]}" "${pref[@]/#dataset_path=*/dataset_path=$tmp/train_other.pairs}" steps=8 run_name=elastic "${ck[@]}" \
  gradient_accumulation_steps=2 >"$tmp/other.log" 2>&1 || rc=$?
((rc == 2)) || { cat "$tmp/other.log" >&2; fail "a resume with another pair file exited $rc, not 2"; }
grep -q "belongs to other pairs" "$tmp/other.log" || fail "the refusal does not say why"

echo "== ZeRO-1, ZeRO-2, ZeRO-3, remat and a bf16 shadow tree apply unchanged"
run zero1 2 6 packing=true per_device_batch_size=2 gradient_accumulation_steps=2 shard_optimizer_over_data=true
close zero1 p2_true loss 1e-5
run zero2 2 6 packing=true per_device_batch_size=2 gradient_accumulation_steps=2 shard_optimizer_over_data=true \
  shard_gradients_over_data=true grad_reduce_bucket_mb=0.01
close zero2 p2_true loss 1e-5
close zero2 p2_true logps_rejected 1e-5
run zero3 2 6 packing=true per_device_batch_size=2 gradient_accumulation_steps=2 shard_optimizer_over_data=true \
  shard_parameters_over_data=true
close zero3 p2_true loss 1e-5
close zero3 p2_true logps_rejected 1e-5
run remat 0 6 packing=true per_device_batch_size=2 gradient_accumulation_steps=4 remat_policy=full
close remat p1_true loss 1e-5
run bf16_shadow 0 6 packing=true per_device_batch_size=2 gradient_accumulation_steps=4 grad_dtype=bfloat16
close bf16_shadow p1_true loss 1e-2

echo "== LoRA (r=4): K=4 against one batch"
run lora_big 0 4 lora_rank=4 per_device_batch_size=8
run lora_k4 0 4 lora_rank=4 per_device_batch_size=2 gradient_accumulation_steps=4
close lora_k4 lora_big loss 1e-5
close lora_k4 lora_big eval_loss 1e-5
echo "preference_test: all passed"
