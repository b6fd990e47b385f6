#!/usr/bin/env bash
# Intent: multi-process data parallel end to end with the real trainer on loopback, its ranks started by hand
# (tests/lib/multiprocess_test.sh's ranks), and under scripts/launch.sh for a hung rank:
#   - every step's loss over 6 steps on padded data, within 1e-5 relative (fp32 compute): 1 process K=4 against
#     2 processes K=2 and 4 processes K=1, and the same for eval_loss (each process evaluates its slice), and on an
#     llm.c token file; remat_policy=full against none (bitwise); ZeRO-1 on against off; a bf16 shadow on 2
#     processes reduced through many buckets against one bucket;
#   - only rank 0 writes a run directory; the other ranks' logs carry "[rank N]";
#   - resume: 2 processes trained 3 steps then resumed to 6 give bitwise the losses of 6 straight steps, every rank
#     loading rank 0's checkpoint; SIGTERM to one rank stops both after the same step with a checkpoint (143);
#   - a killed rank makes the other exit non-zero within collective_timeout_s; a hung (SIGSTOPped) rank makes the
#     other time out, and torchrun (under launch.sh) then kills the hung one, 30 s later; launch.sh exits 1.
# Cost: about 15 trainer processes of a 2-layer, 32-wide model (num_threads=1 each), 1 torchrun start-up (through
# launch.sh), an 8 s and a 4 s timeout, and torchrun's fixed 30 s before it kills the hung rank: 160 s on this
# machine's 2 cores shared with other jobs (load average 16-22).
#
# Usage: tests/distributed_test.sh TRAINER COMPARE_RUNS
# Exit: 0 pass; 1 fail (the scratch directory is kept and its path printed).
set -uo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/lib/multiprocess_test.sh" distributed_test "$@"

# run NAME NPROC key=value...: trains one run; NPROC=0 means the trainer alone, without any rendezvous variable.
run() {
  local name=$1 n=$2 rc=0
  shift 2
  if ((n == 0)); then
    "$TRAINER" "${tiny[@]}" steps=6 run_name="$name" "$@" >"$tmp/$name.log" 2>&1 || rc=$?
  else
    ranks "$n" "${tiny[@]}" steps=6 run_name="$name" "$@" >"$tmp/$name.log" 2>&1 || rc=$?
  fi
  ((rc == 0)) || { cat "$tmp/$name.log" >&2; fail "run $name ($n processes) exited $rc"; }
  [[ -f $runs/$name/summary.json ]] || fail "run $name wrote no summary.json"
}

same_losses() {  # same_losses A B: every step's loss within 1e-5 relative
  local out rc=0
  out=$("$compare" "$runs/$1" "$runs/$2" --metric loss --rtol 1e-5) || rc=$?
  echo "$out" | tail -1
  ((rc == 0)) || { echo "$out" >&2; fail "$1 vs $2: losses differ"; }
  [[ $(grep -c '"step"' "$runs/$1/metrics.jsonl") == 6 ]] || fail "$1 has not 6 steps"
}

echo "== loss and eval_loss parity: 1 process K=4, 2 processes K=2, 4 processes K=1 (same global batch of 8)"
# eval: 2 batches of 8 sequences in all (eval_per_device_batch_size x processes), each process its slice.
evals=(eval_interval=3 eval_steps=2)
run p1_k4 0 gradient_accumulation_steps=4 "${evals[@]}" eval_per_device_batch_size=8
run p2_k2 2 gradient_accumulation_steps=2 "${evals[@]}" eval_per_device_batch_size=4
run p4_k1 4 gradient_accumulation_steps=1 "${evals[@]}" eval_per_device_batch_size=2
same_losses p2_k2 p1_k4
same_losses p4_k1 p1_k4
same_eval() {  # same_eval A B: eval_loss at steps 3 and 6 within 1e-5 relative
  local out rc=0
  out=$("$compare" "$runs/$1" "$runs/$2" --metric eval_loss --rtol 1e-5) || rc=$?
  echo "$out" | tail -1
  ((rc == 0)) || { echo "$out" >&2; fail "$1 vs $2: eval_loss differs"; }
  [[ $(grep -c '"eval_loss"' "$runs/$1/metrics.jsonl") == 2 ]] || fail "$1 has not 2 evaluations"
}
same_eval p2_k2 p1_k4
same_eval p4_k1 p1_k4

echo "== a token file (llm.c uint16): 1 process K=2 against 2 processes K=1, with eval"
python3 - "$tmp/train.bin" "$tmp/val.bin" <<'PY'
import struct, sys
for path, n, seed in ((sys.argv[1], 4000, 1), (sys.argv[2], 16 * 8 + 1, 2)):
    x, toks = seed, []
    for i in range(n):
        x = (x * 1103515245 + 12345) % 2**31
        toks.append((i + (x >> 20)) % 64 if x % 7 == 0 else i % 64)
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", 20240520, 1, n, *([0] * 253)) + struct.pack(f"<{n}H", *toks))
PY
files=(dataset_type=tokens "dataset_path=$tmp/train.bin" "eval_dataset_path=$tmp/val.bin" "${evals[@]}")
run p1_tokens 0 gradient_accumulation_steps=2 "${files[@]}" eval_per_device_batch_size=4
run p2_tokens 2 gradient_accumulation_steps=1 "${files[@]}" eval_per_device_batch_size=2
same_losses p2_tokens p1_tokens
same_eval p2_tokens p1_tokens
[[ $(ls "$runs" | wc -l) == 5 ]] || fail "expected 5 run directories (rank 0 only), found: $(ls "$runs")"
grep -q '\[rank 3\]' "$tmp/p4_k1.log" || fail "no [rank 3] prefix in the 4-process log"
grep -q 'tokens' "$runs/p4_k1/metrics.jsonl" || fail "no metrics from rank 0"
# The global batch holds the same valid tokens whatever the split.
cmp <(grep -o '"tokens":[0-9]*' "$runs/p1_k4/metrics.jsonl") <(grep -o '"tokens":[0-9]*' "$runs/p4_k1/metrics.jsonl") ||
  fail "valid-token counts differ between 1 and 4 processes"

echo "== remat_policy=full on 2 processes K=2 against none (same losses: the nested backward folds every gradient)"
run p2_k2_remat 2 gradient_accumulation_steps=2 remat_policy=full
same_losses p2_k2_remat p2_k2
cmp <(grep -o '"loss":[^,]*' "$runs/p2_k2_remat/metrics.jsonl") <(grep -o '"loss":[^,]*' "$runs/p2_k2/metrics.jsonl") ||
  fail "remat_policy=full changed a loss bit on 2 processes"

echo "== ZeRO-1 on against off (2 processes)"
run p2_k2_zero 2 gradient_accumulation_steps=2 shard_optimizer_over_data=true grad_reduce_bucket_mb=0.01
same_losses p2_k2_zero p2_k2
grep -h 'optimizer state on this process' "$tmp/p2_k2.log" "$tmp/p2_k2_zero.log"
state_bytes() { sed -n "s/.*\[rank $2\].*optimizer state on this process: \([0-9]*\) bytes.*/\1/p" "$tmp/$1.log"; }
for r in 0 1; do
  full=$(state_bytes p2_k2 $r) sharded=$(state_bytes p2_k2_zero $r)
  [[ -n $full && -n $sharded ]] || fail "rank $r did not log its optimizer state"
  # 1/WORLD_SIZE of the full state, give or take the padding of the last slice.
  ((sharded * 2 >= full * 99 / 100 && sharded * 2 <= full * 101 / 100)) ||
    fail "rank $r: ZeRO-1 optimizer state $sharded bytes is not half of $full bytes"
done

echo "== bf16 shadow on 2 processes: many fp32 buckets against one"
run p2_bf16_buckets 2 gradient_accumulation_steps=2 grad_dtype=bfloat16 grad_reduce_bucket_mb=0.01
run p2_bf16_one 2 gradient_accumulation_steps=2 grad_dtype=bfloat16 grad_reduce_bucket_mb=64
grep -h 'gradient reduction:' "$tmp/p2_bf16_buckets.log" "$tmp/p2_bf16_one.log" | grep 'rank 0'
grep -q 'rank 0.*gradient reduction: .* in [2-9][0-9]* fp32 buckets' "$tmp/p2_bf16_buckets.log" ||
  fail "the small-bucket run did not use several buckets"
grep -q 'rank 0.*gradient reduction: .* in 1 fp32 buckets' "$tmp/p2_bf16_one.log" || fail "expected one bucket"
same_losses p2_bf16_buckets p2_bf16_one
# Against ONE process with a bf16 shadow the rounding differs (there each microbatch is rounded into bf16 as it is
# folded; here each process rounds its part, then the fp32 sum is rounded once), so only a looser match holds.
run p1_bf16_k4 0 gradient_accumulation_steps=4 grad_dtype=bfloat16
"$compare" "$runs/p2_bf16_buckets" "$runs/p1_bf16_k4" --metric loss --rtol 1e-4 | tail -1
"$compare" "$runs/p2_bf16_buckets" "$runs/p1_bf16_k4" --metric loss --rtol 1e-4 >/dev/null ||
  fail "bf16 on 2 processes is not within 1e-4 of bf16 on 1 process"

# start_pair NAME: starts rank 0 and rank 1 of a long run directly (no launcher); sets pid0 pid1.
start_pair() {
  local name=$1 port
  port=$(python3 "$(dirname "$0")/../scripts/lib/free_port.py")
  for r in 0 1; do
    RANK=$r WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port "$TRAINER" "${tiny[@]}" run_name="$name" \
      steps=1000000 collective_timeout_s=8 >"$tmp/$name.$r.log" 2>&1 &
    started+=($!)
    eval "pid$r=$!"
  done
}
wait_for_training() {  # until rank 0 has written a metrics line (at most 60 s)
  for _ in $(seq 600); do
    [[ -s $runs/$1/metrics.jsonl ]] && return 0
    sleep 0.1
  done
  fail "$1 never started training"
}
# exits_within PID SECONDS: waits for PID to exit; sets code and elapsed.
exits_within() {
  local t0=$SECONDS
  for _ in $(seq $(($2 * 10))); do
    kill -0 "$1" 2>/dev/null || break
    sleep 0.1
  done
  kill -0 "$1" 2>/dev/null && fail "pid $1 still running after $2 s"
  wait "$1"
  code=$?
  elapsed=$((SECONDS - t0))
}

echo "== resume with 2 processes: 3 steps, then the same command to 6, bitwise equal to 6 straight steps"
dp_run() {  # dp_run NAME STEPS LOG: 2 processes, K=2, a checkpoint every 3 steps
  ranks 2 "${tiny[@]}" gradient_accumulation_steps=2 checkpoint_period=3 learning_rate_schedule_steps=6 \
    run_name="$1" steps="$2" \
    >"$3" 2>&1 || { cat "$3" >&2; fail "2-process run $1 to step $2 exited non-zero"; }
}
dp_run dp_straight 6 "$tmp/dp_straight.log"
dp_run dp_resumed 3 "$tmp/dp_resumed.1.log"
dp_run dp_resumed 6 "$tmp/dp_resumed.2.log"
for r in 0 1; do
  grep -q "\[rank $r\].*resumed from .*step-3" "$tmp/dp_resumed.2.log" || fail "rank $r did not resume from step-3"
done
same_losses dp_resumed dp_straight
out=$("$compare" "$runs/dp_resumed" "$runs/dp_straight" --metric loss --rtol 0 --atol 0) ||
  { echo "$out" >&2; fail "resumed 2-process losses are not bitwise those of the uninterrupted run"; }

echo "== SIGTERM to one rank: both stop after the same step, rank 0 checkpoints, both exit 143"
start_pair dp_sigterm
wait_for_training dp_sigterm
kill -TERM "$pid1"
exits_within "$pid1" 30
((code == 143)) || fail "the signalled rank exited $code, expected 143"
exits_within "$pid0" 30
((code == 143)) || fail "the other rank exited $code, expected 143"
grep -q "stopped by another process's signal" "$tmp/dp_sigterm.0.log" || fail "rank 0 does not say why it stopped"
compgen -G "$runs/dp_sigterm/checkpoints/step-*" >/dev/null || fail "no checkpoint written on SIGTERM"

echo "== a killed rank: the other exits non-zero within collective_timeout_s=8"
start_pair killed
wait_for_training killed
kill -KILL "$pid1"
exits_within "$pid0" 20
echo "rank 0 exited with code $code ${elapsed}s after rank 1 was killed: $(grep 'error' "$tmp/killed.0.log")"
((code == 1)) || fail "rank 0 exited $code, expected 1"
((elapsed <= 9)) || fail "rank 0 took ${elapsed}s (timeout 8 s)"
grep -q 'failed' "$tmp/killed.0.log" || fail "no clear error from rank 0"

echo "== a hung rank under launch.sh: the other times out, torchrun stops the hung one (SIGKILL after its fixed 30 s)"
"$launch" --nproc 2 "${tiny[@]}" run_name=hung steps=1000000 collective_timeout_s=4 >"$tmp/hung.log" 2>&1 &
launcher=$!
started+=($launcher)
wait_for_training hung
pids=($(trainer_pid "$launcher" 0) $(trainer_pid "$launcher" 1))
((${#pids[@]} == 2)) || fail "could not find the 2 trainers under launch.sh"
started+=("${pids[@]}")
kill -STOP "${pids[1]}"
exits_within "$launcher" 60
echo "launch.sh exited with code $code ${elapsed}s after rank 1 was stopped"
grep -E 'error|failed \(exitcode' "$tmp/hung.log"
((code == 1)) || fail "launch.sh exited $code, expected rank 0's 1"
((elapsed >= 3)) || fail "launch.sh exited after ${elapsed}s, before the 4 s timeout could expire"
grep -q 'failed (exitcode: 1) local_rank: 0' "$tmp/hung.log" || fail "rank 0 did not fail first"
kill -0 "${pids[1]}" 2>/dev/null && fail "launch.sh left the hung rank 1 running"
grep -q 'did not answer within collective_timeout_s=4' "$tmp/hung.log" || fail "no timeout message"

echo "distributed_test: PASS"
rm -rf "$tmp"
