#!/usr/bin/env bash
# Intent: the preference run's start (docs/preference.md, "The reference"), with the real trainer on the tiny model:
#   - dropout: lora_dropout=0.1 under use_dpo is off, and the log says so;
#   - step 1's rewards are exactly 0 in bf16, packed and unpacked (the reference is scored in the steps' microbatches),
#     and eval_on_start's step-0 line has every eval reward exactly 0; a resume keeps that line and writes no other;
#   - the pass shards: 2 processes write bitwise the file 1 process writes, each scoring half the microbatches;
#   - Ctrl-C during the pass (held by the SHADOWGRAD_TEST_HOLD=reference-N seam, train/Signals.h, which announces it) exits 130 within
#     the microbatch and keeps what was scored; the same command continues it to bitwise the straight run's file; on 2
#     processes, a SIGINT to rank 0 stops rank 1 too (143), and the rerun continues from the 4 microbatches kept;
#   - kill -9 during the pass: the same command starts the run again (exit 0), not "already exists" (exit 2);
#   - eval switched off at a resume, and on (its reference from the starting weights, bitwise the file a run with eval
#     from the start wrote); on, with other starting weights (init_weights_seed), exits 2 saying why;
#   - a pair counts as two sequences: tokens_seen, train_tokens and the LR schedule in tokens, the start and eval logs.
# Cost: ~22 trainer runs of the tiny model (2 layers, 32 wide) of 1-6 steps, 4 of them on 2 processes: ~70 s on 2 cores.
#
# Usage: tests/preference_pass_test.sh TRAINER COMPARE_RUNS
# Exit: 0 pass; 1 fail (the scratch directory is kept and its path printed).
set -uo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/lib/multiprocess_test.sh" preference_pass_test "$@"

# Pre-tokenized pairs: prompts of 1-6 tokens, answers of 1-9; the chosen answer counts up.
python3 "$repo/tests/lib/ragged_pairs.py" "$tmp" train:24:1 val:13:2
for s in train val; do
  "$repo/scripts/prepare_preference.sh" "$tmp/$s.jsonl" "$tmp/$s.pairs" >"$tmp/prepare_$s.log" 2>&1 ||
    { cat "$tmp/prepare_$s.log" >&2; fail "prepare_preference.sh $s"; }
done
eval_keys=("eval_dataset_path=$tmp/val.pairs" eval_interval=3)
pref=(dataset_type=preference use_dpo=true "dataset_path=$tmp/train.pairs" max_target_length=16 dpo_beta=0.5
      opt_type=sgd per_device_batch_size=2)
std=(learning_rate=0.5 gradient_accumulation_steps=2)  # the runs' own, unless a run sets another
case_keys=("${pref[@]}")
run() { run_case "$@"; }
# field RUN STEP KEY: metrics.jsonl's KEY at STEP (-0.0 read as 0.0).
field() { python3 -c 'import json,sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    if r["step"] == int(sys.argv[2]): print(repr(float(r[sys.argv[3]]) + 0.0))' "$runs/$1/metrics.jsonl" "$2" "$3"; }
# is_log2 RUN STEP KEY: the value is log 2 (a mean of log 2's, so within 1e-12).
is_log2() { python3 -c 'import math,sys; sys.exit(abs(float(sys.argv[1]) - math.log(2)) > 1e-12)' "$(field "$@")"; }

echo "== dropout: off under use_dpo, said in the log (tests/test_preference.cpp checks the loss and margin)"
run drop_off 0 1 lora_rank=4 lora_dropout=0.1 learning_rate=0 gradient_accumulation_steps=2
grep -q "lora_dropout=0.1 is off in the policy" "$tmp/drop_off.log" || fail "the dropout switch is not logged"
is_log2 drop_off 1 loss || fail "lora_dropout=0.1 under use_dpo: step 1's loss is $(field drop_off 1 loss)"

echo "== bf16: step 1's rewards exactly 0, packed and unpacked; eval_on_start's step 0 too"
for packing in true false; do
  fp32=("${tiny[@]}")
  tiny=("${tiny[@]/dtype=float32/dtype=bfloat16}")
  run "bf16_$packing" 0 1 "${std[@]}" packing=$packing "${eval_keys[@]}" eval_on_start=true
  tiny=("${fp32[@]}")
  for k in rewards_chosen rewards_rejected rewards_margin rewards_accuracy; do
    [[ $(field "bf16_$packing" 1 $k) == 0.0 ]] || fail "bf16 packing=$packing: step 1's $k is $(field "bf16_$packing" 1 $k)"
    [[ $(field "bf16_$packing" 0 eval_$k) == 0.0 ]] || fail "bf16 packing=$packing: step 0's eval_$k is not 0"
  done
  is_log2 "bf16_$packing" 1 loss || fail "bf16 packing=$packing: step 1's loss is not log 2"
done

echo "== the pass shards: 2 processes write bitwise the files of 1; each scores half"
run one 0 3 "${std[@]}" "${eval_keys[@]}" checkpoint_period=3
run two 2 3 learning_rate=0.5 gradient_accumulation_steps=1 "${eval_keys[@]}" checkpoint_period=3
for f in reference_logps.bin reference_logps.eval.bin; do
  cmp "$runs/one/$f" "$runs/two/$f" || fail "$f of 2 processes differs from 1 process's"
done
[[ $(grep -c "this process scores 6 of the 12 left" "$tmp/two.log") == 2 ]] ||
  fail "the 12 train microbatches were not dealt 6 and 6 to the 2 processes"
[[ $(field two 1 rewards_chosen) == 0.0 ]] || fail "2 processes: step 1's rewards are not 0 (a rank lacks the reference)"

echo "== a pair is two sequences: tokens_seen, train_tokens, the start and eval logs"
[[ $(field one 1 tokens_seen) == 128.0 ]] || fail "tokens_seen after 4 pairs of 16 tokens is $(field one 1 tokens_seen), not 128"
grep -q "K=2 x 2 pairs (4 sequences) x 16 tokens x 1 processes = global batch 4 pairs" "$tmp/one.log" ||
  fail "the start line does not count pairs"
grep -q "the 13 pairs of $tmp/val.pairs (7 batches of 2 pairs)" "$tmp/one.log" || fail "the eval line does not count pairs"
# train_tokens=256 is 8 pairs of 2 x 16 tokens: 2 steps of 4 pairs, and the LR schedule in tokens ends there, so the
# cosine (no warmup, final fraction 0) is at its midpoint on step 2 (a pair counted as one sequence: 4 steps, 0.85).
run budget 0 10 "${std[@]}" train_tokens=256 warmup_steps_fraction=0 cosine_learning_rate_final_fraction=0
steps_run=$(grep -c '"step"' "$runs/budget/metrics.jsonl")
((steps_run == 2)) || fail "train_tokens=256 over pairs of 2 x 16 tokens ran $steps_run steps, not 2"
[[ $(field budget 2 tokens_seen) == 256.0 ]] || fail "train_tokens=256: tokens_seen at step 2 is $(field budget 2 tokens_seen)"
python3 -c 'import sys; sys.exit(abs(float(sys.argv[1]) - 0.25) > 1e-12)' "$(field budget 2 lr)" ||
  fail "train_tokens=256: step 2's lr is $(field budget 2 lr), not 0.25 (half of 0.5: the cosine's midpoint)"

echo "== Ctrl-C during the pass: exit 130 within the microbatch, what was scored kept; the same command continues it"
held() {  # held NAME EXTRA...: the trainer started in the background, held after 2 microbatches of the pass
  local name=$1 tries
  shift
  SHADOWGRAD_TEST_HOLD=reference-2 "$TRAINER" "${tiny[@]}" "${pref[@]}" "${std[@]}" "${eval_keys[@]}" steps=3 \
    checkpoint_period=3 run_name="$name" "$@" >"$tmp/$name.held.log" 2>&1 &
  pid=$!
  started+=("$pid")
  for ((tries = 0; tries < 600; tries++)); do
    grep -q "test hold: at reference-2" "$tmp/$name.held.log" && return
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  cat "$tmp/$name.held.log" >&2
  fail "$name: the trainer never announced its hold"
}
held interrupted
kill -INT "$pid"
rc=0
wait "$pid" || rc=$?
((rc == 130)) || { cat "$tmp/interrupted.held.log" >&2; fail "SIGINT during the pass exited $rc, not 130"; }
grep -q "stopped by SIGINT during the reference pass, 2 of 12 train microbatches scored and kept in" \
  "$tmp/interrupted.held.log" || fail "the stop does not say what it kept"
run interrupted 0 3 "${std[@]}" "${eval_keys[@]}" checkpoint_period=3
grep -q "2 already scored in" "$tmp/interrupted.log" || fail "the rerun did not continue the pass"
cmp "$runs/one/reference_logps.bin" "$runs/interrupted/reference_logps.bin" ||
  fail "a pass stopped and continued differs from the straight run's"
[[ $(field interrupted 1 rewards_chosen) == 0.0 ]] || fail "after a continued pass step 1's rewards are not 0"

echo "== Ctrl-C to rank 0 of 2 during the pass: both stop (130 and 143), 4 microbatches kept; the same command continues"
port=$(free_port)
for r in 0 1; do
  hold=()
  ((r == 0)) && hold=(SHADOWGRAD_TEST_HOLD=reference-2)  # rank 1 waits for rank 0 in the pass's stop check
  env "${hold[@]}" RANK=$r LOCAL_RANK=$r WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port "$TRAINER" "${tiny[@]}" \
    "${pref[@]}" learning_rate=0.5 gradient_accumulation_steps=1 "${eval_keys[@]}" steps=3 checkpoint_period=3 \
    run_name=two_stopped >"$tmp/two_stopped_$r.held.log" 2>&1 &
  rank_pids[$r]=$!
  started+=($!)
done
for ((tries = 0; tries < 600; tries++)); do
  grep -q "test hold: at reference-2" "$tmp/two_stopped_0.held.log" && break
  sleep 0.1
done
kill -INT "${rank_pids[0]}"
for r in 0 1; do
  rc=0
  wait "${rank_pids[$r]}" || rc=$?
  rank_rc[$r]=$rc
done
((rank_rc[0] == 130 && rank_rc[1] == 143)) ||
  { cat "$tmp"/two_stopped_*.held.log >&2; fail "ranks exited ${rank_rc[*]}, not 130 and 143"; }
grep -q "stopped by another process's signal during the reference pass, 4 of 12" "$tmp/two_stopped_1.held.log" ||
  fail "rank 1 does not say that rank 0's signal stopped it"
run two_stopped 2 3 learning_rate=0.5 gradient_accumulation_steps=1 "${eval_keys[@]}" checkpoint_period=3
grep -q "4 already scored in" "$tmp/two_stopped.log" || fail "the rerun on 2 processes did not continue the pass"
cmp "$runs/one/reference_logps.bin" "$runs/two_stopped/reference_logps.bin" ||
  fail "a 2-process pass stopped and continued differs from the straight run's"

echo "== kill -9 during the pass: the same command starts the run again"
held killed
kill -KILL "$pid"
wait "$pid" 2>/dev/null
run killed 0 3 "${std[@]}" "${eval_keys[@]}" checkpoint_period=3
grep -q "was stopped before its first checkpoint" "$tmp/killed.log" || fail "the rerun after kill -9 did not restart"

echo "== eval switched off and on at a resume"
run eval_off 0 3 "${std[@]}" "${eval_keys[@]}" checkpoint_period=3
run eval_off 0 6 "${std[@]}" checkpoint_period=3
run eval_on 0 3 "${std[@]}" checkpoint_period=3
run eval_on 0 6 "${std[@]}" "${eval_keys[@]}" checkpoint_period=3
grep -q "their reference comes from the starting weights" "$tmp/eval_on.log" || fail "no line about the eval reference"
cmp "$runs/one/reference_logps.eval.bin" "$runs/eval_on/reference_logps.eval.bin" ||
  fail "the eval reference computed at the resume differs from the one computed at the start"
[[ -n $(field eval_on 6 eval_loss) ]] || fail "the resumed run with eval added did not evaluate"
run eval_moved 0 3 "${std[@]}" checkpoint_period=3
rc=0
"$TRAINER" "${tiny[@]}" "${pref[@]}" "${std[@]}" "${eval_keys[@]}" steps=6 checkpoint_period=3 run_name=eval_moved \
  init_weights_seed=7 >"$tmp/eval_moved_refused.log" 2>&1 || rc=$?
((rc == 2)) || { cat "$tmp/eval_moved_refused.log" >&2; fail "eval added with other starting weights exited $rc, not 2"; }
grep -q "no longer give them" "$tmp/eval_moved_refused.log" || fail "the refusal does not say why"

echo "== eval_on_start: a step-0 line, kept (not repeated) by a resume"
run on_start 0 3 "${std[@]}" "${eval_keys[@]}" checkpoint_period=3 eval_on_start=true
run on_start 0 6 "${std[@]}" "${eval_keys[@]}" checkpoint_period=3 eval_on_start=true
[[ $(grep -c '"step": 0,' "$runs/on_start/metrics.jsonl") == 1 ]] || fail "metrics.jsonl should hold one step-0 line"
[[ $(field on_start 0 eval_rewards_margin) == 0.0 ]] && is_log2 on_start 0 eval_loss ||
  fail "eval_on_start: step 0's eval margin or loss is not 0 / log 2"
close_runs on_start one eval_loss 1e-12  # compare_runs reads a file with a step-0 line
echo "preference_pass_test: all passed"
