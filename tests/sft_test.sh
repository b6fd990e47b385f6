#!/usr/bin/env bash
# Intent: dataset_type=sft with the real trainer, 1 and 2 processes (ranks started by hand on loopback):
#   - 2 processes K=2 against 1 process K=4 (global batch 8 rows; the two ranks' rows hold different target counts):
#     every step's loss and eval_loss within 1e-5 relative (fp32), packed and unpacked (torchtune #2980's case), and
#     the same with ZeRO-3 (weights, carry and optimizer state sharded);
#   - resume: 2 processes trained 3 steps then resumed to 6 give bitwise the 6 straight steps' losses, and 1 process
#     resumed from a 2-process checkpoint reads the same rows (losses within 1e-5);
#   - eval over every held-out example once: with learning_rate=0, eval_loss packed = unpacked and does not depend on
#     the eval batch size (1e-6);
#   - metrics.jsonl has target_tokens, input_tokens and padding_fraction; packing pads less.
# Cost: 9 trainer runs of the tiny model (2 layers, 32 wide) of 6 steps, 3 of them on 2 processes: ~60 s on 2 cores.
#
# Usage: tests/sft_test.sh TRAINER COMPARE_RUNS
# Exit: 0 pass; 1 fail (the scratch directory is kept and its path printed).
set -uo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/lib/multiprocess_test.sh" sft_test "$@"

# Pre-tokenized JSONL (no tokenizer needed): examples of 3-30 tokens, a prompt then a counting completion.
python3 - "$tmp" <<'PY'
import json, sys
d = sys.argv[1]
for name, n, seed in (("train", 120, 1), ("val", 37, 2)):
    x, rows = seed, []
    for i in range(n):
        x = (x * 1103515245 + 12345) % 2**31
        length = 3 + x % 28
        prompt = 1 + (x >> 8) % (length - 1)
        ids = [(x >> (j % 16)) % 64 if j < prompt else (prompt + j) % 64 for j in range(length)]
        rows.append({"input_ids": ids, "labels": [-100] * prompt + ids[prompt:]})
    with open(f"{d}/{name}.jsonl", "w") as f:
        f.write("\n".join(json.dumps(r) for r in rows) + "\n")
PY
for s in train val; do
  "$repo/scripts/prepare_sft.sh" "$tmp/$s.jsonl" "$tmp/$s.sft" >"$tmp/prepare_$s.log" 2>&1 ||
    { cat "$tmp/prepare_$s.log" >&2; fail "prepare_sft.sh $s"; }
done
head -1 "$tmp/prepare_train.log"
sft=(dataset_type=sft "dataset_path=$tmp/train.sft" "eval_dataset_path=$tmp/val.sft" eval_interval=3
     max_target_length=16)

case_keys=("${sft[@]}")
run() { run_case "$@"; }
close() { close_runs "$@"; }

for packing in true false; do
  echo "== packing=$packing: 2 processes K=2 against 1 process K=4 (global batch 8 rows)"
  run "p1_$packing" 0 6 packing=$packing per_device_batch_size=2 gradient_accumulation_steps=4
  run "p2_$packing" 2 6 packing=$packing per_device_batch_size=2 gradient_accumulation_steps=2
  close "p2_$packing" "p1_$packing" loss 1e-5
  close "p2_$packing" "p1_$packing" eval_loss 1e-5
  # ZeRO-3 with the carry sharded on the same ragged rows: weights, carry and moments cut 1/2, the same numbers.
  run "z3_$packing" 2 6 packing=$packing per_device_batch_size=2 gradient_accumulation_steps=2 \
    shard_optimizer_over_data=true shard_gradients_over_data=true shard_parameters_over_data=true
  close "z3_$packing" "p1_$packing" loss 1e-5
  close "z3_$packing" "p1_$packing" eval_loss 1e-5
  # The ranks' halves of a global batch hold different target counts: the case a per-rank mean gets wrong.
  grep -q '"target_tokens"' "$runs/p1_$packing/metrics.jsonl" || fail "no target_tokens in metrics.jsonl"
  grep -q '"padding_fraction"' "$runs/p1_$packing/metrics.jsonl" || fail "no padding_fraction in metrics.jsonl"
  grep -q 'tgt [0-9]* pad' "$tmp/p1_$packing.log" || fail "no target tokens in the progress line"
done
pad() { python3 -c 'import json,sys; r=[json.loads(l) for l in open(sys.argv[1])]; print(sum(x["padding_fraction"] for x in r)/len(r))' "$runs/$1/metrics.jsonl"; }
echo "mean padding fraction: packed $(pad p1_true), unpacked $(pad p1_false)"
python3 -c "import sys; sys.exit(0 if $(pad p1_true) < $(pad p1_false) else 1)" || fail "packing did not pad less"

echo "== resume: 3 steps then 6 (2 processes) bitwise against 6 straight; then 1 process from a 2-process checkpoint"
ck=(checkpoint_period=3 learning_rate_schedule_steps=6)
run straight 2 6 "${ck[@]}"
run resumed 2 3 "${ck[@]}"
run resumed 2 6 "${ck[@]}"
cmp <(grep -o '"loss":[^,]*' "$runs/straight/metrics.jsonl") <(grep -o '"loss":[^,]*' "$runs/resumed/metrics.jsonl") ||
  fail "a resumed SFT run's losses differ from the straight run's"
run elastic 2 3 "${ck[@]}"
run elastic 0 6 "${ck[@]}" gradient_accumulation_steps=2
close elastic straight loss 1e-5

echo "== eval over every held-out example once: packed = unpacked, any eval batch size (learning_rate=0)"
run eval_packed_b3 0 1 learning_rate=0 packing=true eval_per_device_batch_size=3
run eval_unpacked_b5 0 1 learning_rate=0 packing=false eval_per_device_batch_size=5
run eval_unpacked_b1 0 1 learning_rate=0 packing=false eval_per_device_batch_size=1
close eval_packed_b3 eval_unpacked_b5 eval_loss 1e-6
close eval_unpacked_b1 eval_unpacked_b5 eval_loss 1e-6
grep -q 'the 37 rows of' "$tmp/eval_unpacked_b5.log" || fail "unpacked eval should cover 37 rows (one per example)"
echo "sft_test: all passed"
