#!/usr/bin/env bash
# Intent: runs that survive real clusters, end to end with the real trainer on loopback, its ranks started by
# hand (tests/lib/multiprocess_test.sh's ranks), and once through scripts/launch.sh:
#   - ZeRO-1 checkpoints: 2 processes trained 3 steps then resumed to 6 give bitwise the losses of 6 straight steps;
#     every rank writes its optimizer shard into the same step-N, listed in the manifest; SIGTERM to one rank stops
#     both after the same step with such a checkpoint;
#   - ZeRO-2 (shard_gradients_over_data) resumed 4 -> 2 -> 1 processes and 1 -> 4, within 1e-6 of unbroken runs;
#     ZeRO-3 (shard_parameters_over_data, both carry modes) the same: each rank writes its model shard (no model.pt),
#     the checkpoint exports, and that export read back as load_parameters_path by 4 ZeRO-3 processes (built unit by
#     unit) is within 1e-6 of one process; a damaged or missing model shard exits 2 on every rank naming it, kill -9
#     of both processes resumes from their shards, and per_device_batch_size=auto plans and trains;
#   - resume at another process count with the same global batch (8 = per_device_batch_size 2 x K x WORLD_SIZE):
#     2x2 -> 1x4, 1x4 -> 2x2, 4x1 -> 2x2, ZeRO-1 2x2 -> 1x4 and -> ZeRO-1 4x1, whole 1x4 -> ZeRO-1 2x2; each within
#     1e-5 relative of continuing unchanged, every step (the max rel diff is printed; bitwise is reported, not
#     required: the order of the sums changes with the split);
#   - a truncated shard file: the previous checkpoint is used with a warning naming the file, and asking for that
#     step exits 2 on every rank, each naming it (the ranks agree on the verdict before any exits); a global-batch
#     mismatch exits 2 naming the three keys;
#   - one writer per run directory: a second trainer on a live run exits 2 naming the directory, pid and host,
#     and the first run goes on undisturbed; after kill -9 of the holder the same command resumes.
# Cost: about 40 trainer processes of a 2-layer, 32-wide model (num_threads=1 each): 3 min 15 s on this machine's 2
# cores while other jobs kept them busy (load average 17).
#
# Usage: tests/elastic_test.sh TRAINER COMPARE_RUNS
# Exit: 0 pass; 1 fail (the scratch directory is kept and its path printed).
set -uo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/lib/multiprocess_test.sh" elastic_test "$@"
tiny+=(checkpoint_period=3 learning_rate_schedule_steps=6)

# train NAME NPROC STEPS key=value...: NPROC=1 runs the trainer alone (no rendezvous variables), more are ranks
# started by hand, or through scripts/launch.sh with via_launch=1. Sets rc and log.
train() {
  local name=$1 n=$2 steps=$3
  shift 3
  log=$tmp/$name.$steps.$n.log
  rc=0
  if ((n == 1)); then
    "$TRAINER" "${tiny[@]}" run_name="$name" steps="$steps" "$@" >"$log" 2>&1 || rc=$?
  elif [[ -n ${via_launch:-} ]]; then
    "$launch" --nproc "$n" "${tiny[@]}" run_name="$name" steps="$steps" "$@" >"$log" 2>&1 || rc=$?
  else
    ranks "$n" "${tiny[@]}" run_name="$name" steps="$steps" "$@" >"$log" 2>&1 || rc=$?
  fi
}
train_ok() {
  train "$@"
  ((rc == 0)) || { cat "$log" >&2; fail "run $1 ($2 processes, to step $3) exited $rc"; }
}
# parity RESUMED STRAIGHT LABEL: every step's loss within 1e-5 relative; prints the max rel diff, and whether bitwise.
parity() {
  local out rc=0 bitwise=no
  out=$("$compare" "$runs/$1" "$runs/$2" --metric loss --rtol 1e-5) || rc=$?
  ((rc == 0)) || { echo "$out" >&2; fail "$3: losses differ by more than 1e-5"; }
  [[ $(grep -c '"step"' "$runs/$1/metrics.jsonl") == 6 ]] || fail "$1 has not 6 steps"
  "$compare" "$runs/$1" "$runs/$2" --metric loss --rtol 0 --atol 0 >/dev/null && bitwise=yes
  echo "parity: $3: $(echo "$out" | tail -1 | sed 's/.*(\(.*\)).*/\1/') | bitwise: $bitwise"
}
# from_step3 NAME COPY: a copy of run NAME as it was after its step-3 checkpoint.
from_step3() {
  cp -r "$runs/$1.at3" "$runs/$2"
}
# first3 NAME NPROC key=value...: trains 3 steps and keeps a copy (NAME.at3) to resume from in several ways.
first3() {
  local name=$1 n=$2
  shift 2
  train_ok "$name" "$n" 3 "$@"
  cp -r "$runs/$name" "$runs/$name.at3"
}

echo "== ZeRO-1, 2 processes: 3 steps, then the same command to 6, bitwise equal to 6 straight steps"
zero=(shard_optimizer_over_data=true gradient_accumulation_steps=2 grad_reduce_bucket_mb=0.001)
train_ok zero_straight 2 6 "${zero[@]}"
first3 zero 2 "${zero[@]}"
ls "$runs/zero/checkpoints/step-3" | tr '\n' ' '
echo
for f in optimizer-shard-00000-of-00002.pt optimizer-shard-00001-of-00002.pt; do
  [[ -f $runs/zero/checkpoints/step-3/$f ]] || fail "step-3 has no $f"
  grep -q "$f" "$runs/zero/checkpoints/step-3/manifest.yml" || fail "the manifest does not list $f"
done
[[ ! -e $runs/zero/checkpoints/step-3/optimizer.pt ]] || fail "a ZeRO-1 checkpoint has an optimizer.pt"
grep -q 'checkpoints are not supported' "$log" && fail "ZeRO-1 still turns checkpoints off"
train_ok zero 2 6 "${zero[@]}"
for r in 0 1; do grep -q "\[rank $r\].*resumed from .*step-3" "$log" || fail "rank $r did not resume from step-3"; done
parity zero zero_straight "ZeRO-1 2x2 -> ZeRO-1 2x2 (same command)"
"$compare" "$runs/zero" "$runs/zero_straight" --metric loss --rtol 0 --atol 0 >/dev/null ||
  fail "ZeRO-1 resumed losses are not bitwise those of the uninterrupted run"

echo "== ZeRO-1: SIGTERM to one rank stops both after the same step, with a checkpoint holding both shards"
port=$(free_port)
for r in 0 1; do
  RANK=$r WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port "$TRAINER" "${tiny[@]}" "${zero[@]}" run_name=zero_term \
    steps=1000000 collective_timeout_s=20 >"$tmp/zero_term.$r.log" 2>&1 &
  started+=($!)
  eval "pid$r=$!"
done
for _ in $(seq 600); do [[ -s $runs/zero_term/metrics.jsonl ]] && break; sleep 0.1; done
kill -TERM "$pid1"
wait "$pid1"; code1=$?
wait "$pid0"; code0=$?
((code0 == 143 && code1 == 143)) || fail "ZeRO-1 ranks exited $code0 and $code1 after SIGTERM, expected 143 and 143"
stopped=$(sed -n 's/.*stopped by .* after step \([0-9]*\).*/\1/p' "$tmp/zero_term.0.log")
[[ -n $stopped ]] || fail "rank 0 does not say after which step it stopped"
ls "$runs/zero_term/checkpoints/step-$stopped"
for f in manifest.yml optimizer-shard-0000{0,1}-of-00002.pt; do
  [[ -f $runs/zero_term/checkpoints/step-$stopped/$f ]] || fail "the checkpoint of step $stopped has no $f"
done

echo "== resume at another process count, same global batch of 8"
train_ok p2_straight 2 6 gradient_accumulation_steps=2
first3 p2 2 gradient_accumulation_steps=2
from_step3 p2 p2_to_p1
train_ok p2_to_p1 1 6 gradient_accumulation_steps=4
grep -q 'resharding: the checkpoint was written by 2 processes .* this run has 1 process' "$log" ||
  fail "no resharding line in the log of p2_to_p1"
parity p2_to_p1 p2_straight "2 processes K=2 -> 1 process K=4"

train_ok p1_straight 1 6 gradient_accumulation_steps=4
first3 p1 1 gradient_accumulation_steps=4
from_step3 p1 p1_to_p2
train_ok p1_to_p2 2 6 gradient_accumulation_steps=2
parity p1_to_p2 p1_straight "1 process K=4 -> 2 processes K=2"
from_step3 p1 p1_to_zero2
train_ok p1_to_zero2 2 6 gradient_accumulation_steps=2 shard_optimizer_over_data=true
parity p1_to_zero2 p1_straight "1 process K=4 (whole state) -> ZeRO-1 2 processes K=2"

train_ok p4_straight 4 6 gradient_accumulation_steps=1
first3 p4 4 gradient_accumulation_steps=1
from_step3 p4 p4_to_p2
train_ok p4_to_p2 2 6 gradient_accumulation_steps=2
parity p4_to_p2 p4_straight "4 processes K=1 -> 2 processes K=2"

from_step3 zero zero_to_p1
train_ok zero_to_p1 1 6 gradient_accumulation_steps=4
parity zero_to_p1 zero_straight "ZeRO-1 2 processes K=2 -> 1 process K=4 (shards put together)"
from_step3 zero zero_to_zero4
train_ok zero_to_zero4 4 6 gradient_accumulation_steps=1 shard_optimizer_over_data=true
parity zero_to_zero4 zero_straight "ZeRO-1 2 processes K=2 -> ZeRO-1 4 processes K=1 (2 shards cut into 4)"

echo "== sharded gradients (ZeRO-2): the resume re-shards, 4 -> 2 -> 1 and 1 -> 4, within 1e-6 of an unbroken run"
z2=(shard_optimizer_over_data=true shard_gradients_over_data=true grad_reduce_bucket_mb=0.001)
tight() {  # tight RESUMED STRAIGHT LABEL: every step's loss within 1e-6 relative
  local out rc=0
  out=$("$compare" "$runs/$1" "$runs/$2" --metric loss --rtol 1e-6) || rc=$?
  ((rc == 0)) || { echo "$out" >&2; fail "$3: losses differ by more than 1e-6"; }
  [[ $(grep -c '"step"' "$runs/$1/metrics.jsonl") == 6 ]] || fail "$1 has not 6 steps"
  echo "parity: $3: $(echo "$out" | tail -1 | sed 's/.*(\(.*\)).*/\1/')"
}
train_ok z2_straight 4 6 gradient_accumulation_steps=1 "${z2[@]}"
grep -q 'gradient reduction: sharded' "$log" || fail "the ZeRO-2 run did not log its sharded reduction"
train_ok z2 4 2 gradient_accumulation_steps=1 "${z2[@]}"
train_ok z2 2 4 gradient_accumulation_steps=2 "${z2[@]}"
grep -q 'resharding: the checkpoint was written by 4 processes' "$log" || fail "no resharding line at 4 -> 2"
train_ok z2 1 6 gradient_accumulation_steps=4
tight z2 z2_straight "ZeRO-2 4 processes K=1 -> 2 processes K=2 -> 1 process K=4"
# A sharded run's checkpoint exports as any other (rank 0 wrote the whole weights).
"$(dirname "$TRAINER")/export_hf" "$runs/z2_straight" "$tmp/z2_hf" >"$tmp/z2_export.log" 2>&1 ||
  { cat "$tmp/z2_export.log"; fail "export_hf of a ZeRO-2 run failed"; }
[[ -f $tmp/z2_hf/config.json && -f $tmp/z2_hf/model.safetensors ]] || fail "the ZeRO-2 export has no config.json/model.safetensors"
from_step3 p1 p1_to_z2
train_ok p1_to_z2 4 6 gradient_accumulation_steps=1 "${z2[@]}"
tight p1_to_z2 p1_straight "1 process K=4 -> ZeRO-2 4 processes K=1"

echo "== sharded weights (ZeRO-3): the resume re-shards, 4 -> 2 -> 1 and 1 -> 4, within 1e-6 of an unbroken run"
z3=(shard_optimizer_over_data=true shard_parameters_over_data=true)
train_ok z3 4 2 gradient_accumulation_steps=1 "${z3[@]}"
grep -q 'weights on this process (shard_parameters_over_data)' "$log" || fail "the ZeRO-3 run did not log its range"
# Each process wrote its own range of the weights; no process gathered the whole model to write model.pt.
step2=$runs/z3/checkpoints/step-2
[[ ! -e $step2/model.pt ]] || fail "the ZeRO-3 checkpoint holds a whole model.pt"
for r in 0 1 2 3; do
  grep -q "model-shard-0000$r-of-00004.pt" "$step2/manifest.yml" || fail "the ZeRO-3 manifest lists no model shard $r"
done
grep -q '^model_shards: 4$' "$step2/manifest.yml" || fail "the ZeRO-3 manifest does not name its 4 model shards"
train_ok z3 2 4 gradient_accumulation_steps=2 "${z3[@]}" shard_gradients_over_data=true  # the other carry mode
grep -q 'resharding: the checkpoint was written by 4 processes' "$log" || fail "no resharding line at ZeRO-3 4 -> 2"
train_ok z3 1 6 gradient_accumulation_steps=4
tight z3 z2_straight "ZeRO-3 4 processes K=1 -> ZeRO-3 (carry sharded too) 2 processes K=2 -> 1 process K=4"
# per_device_batch_size=auto plans each process's range of the weights (the plan counts 1/N) and trains.
train_ok z3_auto 2 2 "${z3[@]}" per_device_batch_size=auto global_batch_size=8
grep -q '\[rank 0\] .*pdbs=auto: [0-9]' "$log" || fail "the ZeRO-3 run did not pick per_device_batch_size"
from_step3 p1 p1_to_z3
train_ok p1_to_z3 4 6 gradient_accumulation_steps=1 "${z3[@]}"
tight p1_to_z3 p1_straight "1 process K=4 -> ZeRO-3 4 processes K=1"
# export_hf puts the 4 model shards of its last checkpoint together.
"$(dirname "$TRAINER")/export_hf" "$runs/p1_to_z3" "$tmp/z3_hf" >"$tmp/z3_export.log" 2>&1 ||
  { cat "$tmp/z3_export.log"; fail "export_hf of a ZeRO-3 run failed"; }
[[ -f $tmp/z3_hf/model.safetensors ]] || fail "the ZeRO-3 export has no model.safetensors"
# generate reads the run's model shards as export_hf does: the same greedy tokens from the run and from its export.
gen=("$(dirname "$TRAINER")/generate" --prompt-ids "3 1 4 1 5" --max-new 6 --threads 1)
from_run=$("${gen[@]}" "$runs/p1_to_z3" 2>"$tmp/gen_run.log") || { cat "$tmp/gen_run.log"; fail "generate from a ZeRO-3 run failed"; }
from_hf=$("${gen[@]}" "$tmp/z3_hf" 2>"$tmp/gen_hf.log") || { cat "$tmp/gen_hf.log"; fail "generate from the ZeRO-3 export failed"; }
[[ -n $from_run && $from_run == "$from_hf" ]] || fail "generate: '$from_run' from the ZeRO-3 run, '$from_hf' from its export"
echo "generate from the ZeRO-3 run and from its export: $from_run"
# That model directory as load_parameters_path: 4 ZeRO-3 processes build and read it unit by unit, as one process reads
# it whole.
train_ok hf1 1 6 gradient_accumulation_steps=4 load_parameters_path="$tmp/z3_hf"
train_ok hf_z3 4 6 gradient_accumulation_steps=1 "${z3[@]}" load_parameters_path="$tmp/z3_hf"
grep -q "weights from $tmp/z3_hf" "$log" || fail "the ZeRO-3 run did not read the model directory"
tight hf_z3 hf1 "from a model directory: ZeRO-3 4 processes K=1 (built unit by unit) against 1 process K=4"

echo "== a damaged ZeRO-3 model shard: every rank exits 2 naming the file, none hangs in a collective"
cp -r "$runs/p1_to_z3" "$runs/z3_bad"  # step-6 written by 4 ZeRO-3 processes
shard=$runs/z3_bad/checkpoints/step-6/model-shard-00002-of-00004.pt
printf 'X' | dd of="$shard" bs=1 seek=200 conv=notrunc 2>/dev/null
train z3_bad 2 6 "${z3[@]}" load_checkpoint_step=6
[[ ${rank_codes[*]} == "2 2" ]] || { cat "$log" >&2; fail "loading the damaged model shard: ranks exited ${rank_codes[*]}, expected 2 2"; }
for r in 0 1; do
  grep -q "\[rank $r\] error: .*$shard' is corrupt" "$log" || { cat "$log" >&2; fail "rank $r does not name $shard"; }
done
rm "$shard"
train z3_bad 2 6 "${z3[@]}" load_checkpoint_step=6
[[ ${rank_codes[*]} == "2 2" ]] || { cat "$log" >&2; fail "a missing model shard: ranks exited ${rank_codes[*]}, expected 2 2"; }
grep -q "error: .*$shard' is missing" "$log" || { cat "$log" >&2; fail "the missing model shard is not named"; }

echo "== a global batch that differs from the checkpoint's: exit 2 naming the three keys"
from_step3 p2 p2_batch
train p2_batch 1 6 gradient_accumulation_steps=2
((rc == 2)) || { cat "$log" >&2; fail "global-batch mismatch exited $rc, expected 2"; }
grep 'error:' "$log"
grep -q 'error: .*global batch of 8 (per_device_batch_size=2 x gradient_accumulation_steps=2 x WORLD_SIZE=2).*this run.s is 4 (per_device_batch_size=2 x gradient_accumulation_steps=2 x WORLD_SIZE=1)' "$log" ||
  fail "the mismatch message does not name the three keys and both global batches"
[[ $(grep -c '"step"' "$runs/p2_batch/metrics.jsonl") == 3 ]] || fail "the refused resume changed metrics.jsonl"
from_step3 p1 p1_batch  # and with 2 processes through launch.sh: rank 0's exit 2, whichever rank is reaped first
via_launch=1 train p1_batch 2 6 gradient_accumulation_steps=1
((rc == 2)) || { cat "$log" >&2; fail "global-batch mismatch with 2 processes: launch.sh exited $rc, expected 2"; }

echo "== a truncated ZeRO-1 shard: fall back to the previous checkpoint, or exit 2 naming the file"
cp -r "$runs/zero" "$runs/zero_trunc"  # holds step-3 and step-6
shard=$runs/zero_trunc/checkpoints/step-6/optimizer-shard-00001-of-00002.pt
truncate -s 100 "$shard"
train zero_trunc 2 6 "${zero[@]}" load_checkpoint_step=6
[[ ${rank_codes[*]} == "2 2" ]] || { cat "$log" >&2; fail "loading the truncated step-6: ranks exited ${rank_codes[*]}, expected 2 2"; }
# Every rank agrees on the verdict before any exits: each names the file (rank 1 quoting rank 0, which found it
# first), and none fails a collective instead (the exit 1 that torchrun used to report when it saw it first).
for r in 0 1; do
  grep -q "\[rank $r\] error: .*$shard' is corrupt" "$log" || { cat "$log" >&2; fail "rank $r does not name $shard"; }
done
grep -q 'Connection closed\|failed (exitcode: 1)' "$log" && { cat "$log" >&2; fail "a rank failed a collective"; }
train zero_trunc 2 6 "${zero[@]}"
((rc == 0)) || { cat "$log" >&2; fail "the fallback run exited $rc"; }
grep -q "warn.*$shard' is corrupt.*falling back" "$log" || fail "no warning naming $shard"
grep -q 'resumed from .*step-3' "$log" || fail "did not fall back to step-3"
parity zero_trunc zero_straight "ZeRO-1 after falling back from a truncated shard to step-3"

echo "== one writer per run directory"
# The first trainer holds the directory, held before step 2 (SHADOWGRAD_TEST_HOLD) until our SIGTERM, however long
# the second takes to load LibTorch.
SHADOWGRAD_TEST_HOLD=step-2 "$TRAINER" "${tiny[@]}" run_name=locked steps=6 >"$tmp/locked.first.log" 2>&1 &
first=$!
started+=($first)
wait_for_hold "$tmp/locked.first.log" step-2 1 "$first"
train locked 1 6
echo "second trainer: exit $rc: $(grep 'error' "$log")"
((rc == 2)) || { cat "$log" >&2; fail "a second trainer on a live run directory exited $rc, expected 2"; }
grep -q "error: run directory '$runs/locked' is in use by another trainer (pid $first on host $(hostname))" "$log" ||
  fail "the message does not name the directory, the holder's pid $first and host"
kill -0 "$first" 2>/dev/null || fail "the first trainer did not survive the second"
kill -TERM "$first"
code=0
wait "$first" || code=$?
((code == 143)) || { cat "$tmp/locked.first.log" >&2; fail "the first trainer exited $code after SIGTERM, expected 143"; }
[[ $(grep -c '"step"' "$runs/locked/metrics.jsonl") == 2 && -d $runs/locked/checkpoints/step-2 ]] ||
  fail "the first run did not stop after step 2 with its checkpoint: $(grep -c '"step"' "$runs/locked/metrics.jsonl") rows"

echo "== kill -9 of the holder: the same command resumes"
# Held before step 5 (SHADOWGRAD_TEST_HOLD), after step 3's checkpoint: the kill finds the run under way.
SHADOWGRAD_TEST_HOLD=step-5 "$TRAINER" "${tiny[@]}" run_name=killed steps=10 >"$tmp/killed.first.log" 2>&1 &
first=$!
started+=($first)
wait_for_hold "$tmp/killed.first.log" step-5 1 "$first"
[[ -d $runs/killed/checkpoints/step-3 ]] || fail "the first trainer wrote no checkpoint of step 3"
kill -KILL "$first"
wait "$first" 2>/dev/null
[[ ! -f $runs/killed/summary.json ]] || fail "the first trainer finished before it could be killed"
train killed 1 10
((rc == 0)) || { cat "$log" >&2; fail "resuming after kill -9 exited $rc"; }
grep -q 'resumed from' "$log" || fail "the run after kill -9 did not resume"
grep -q 'in use' "$log" && fail "the lock of the killed trainer was still held"
[[ $(grep -c '"step"' "$runs/killed/metrics.jsonl") == 10 ]] || fail "the resumed run does not have 10 steps"

echo "== kill -9 of both ZeRO-3 processes mid-run: the same command resumes from their shards"
port=$(free_port)
pids=()
for r in 0 1; do
  SHADOWGRAD_TEST_HOLD=step-5 RANK=$r WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port "$TRAINER" "${tiny[@]}" \
    "${z3[@]}" run_name=z3_killed steps=6 gradient_accumulation_steps=2 >>"$tmp/z3_killed.first.log" 2>&1 &
  pids+=($!)
  started+=($!)
done
wait_for_hold "$tmp/z3_killed.first.log" step-5 2 "${pids[0]}"
kill -KILL "${pids[@]}"
wait "${pids[@]}" 2>/dev/null
[[ -f $runs/z3_killed/checkpoints/step-3/model-shard-00001-of-00002.pt ]] || fail "the killed ZeRO-3 run left no shards of step 3"
train_ok z3_killed 2 6 "${z3[@]}" gradient_accumulation_steps=2
grep -q 'resumed from .*step-3' "$log" || fail "the ZeRO-3 run after kill -9 did not resume from step 3"
tight z3_killed z2_straight "ZeRO-3 2 processes killed after step 4, resumed from step 3"

echo "elastic_test: PASS"
rm -rf "$tmp"
