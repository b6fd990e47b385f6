#!/usr/bin/env bash
# Usage: bench/resume_parity.sh [--steps N] [key=value ...]
# Intent: the parity figures of docs/distributed.md for resuming at another process count. For each case a run is
# trained N/2 steps at WORLD_SIZE=W, then resumed to N at W' with the same global batch (per_device_batch_size x K x
# WORLD_SIZE = 8), and its losses are compared step by step with N straight steps at W (compare_runs: max relative
# difference, and whether bitwise). Cases: 2x2 -> 1x4, 1x4 -> 2x2, 4x1 -> 2x2, ZeRO-1 2x2 -> 1x4,
# ZeRO-1 2x2 -> ZeRO-1 4x1 (processes x K). Default model: configs/base.yml in fp32 with per_device_batch_size=2;
# extra key=value pairs go to every run.
# Cost: 4 straight runs of N steps and 5 resumed ones, each process with one thread: about 3 minutes with N=20 on
# 2 cores.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
steps=20
if [[ ${1:-} == -h || ${1:-} == --help ]]; then
  sed -n '2,/^set /p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'
  exit 0
fi
if [[ ${1:-} == --steps ]]; then
  steps=$2
  shift 2
fi
((steps >= 2 && steps % 2 == 0)) || { echo "resume_parity.sh: --steps must be even and >= 2" >&2; exit 2; }
half=$((steps / 2))
trainer=${TRAINER:-$root/build/trainer}
compare=${COMPARE_RUNS:-$root/build/compare_runs}
[[ -x $trainer && -x $compare ]] || { echo "resume_parity.sh: build first (scripts/build.sh)" >&2; exit 2; }
export TRAINER=$trainer
unset RANK WORLD_SIZE LOCAL_RANK MASTER_ADDR MASTER_PORT
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
common=(base.yml dtype=float32 per_device_batch_size=2 num_threads=1 log_period=1000 base_output_directory=$out/runs
        learning_rate_schedule_steps=$steps checkpoint_period=$half "$@")

# run NAME NPROC STEPS K [key=value ...]
run() {
  local name=$1 n=$2 to=$3 k=$4
  shift 4
  if ((n == 1)); then
    "$trainer" "${common[@]}" run_name="$name" steps="$to" gradient_accumulation_steps="$k" "$@" >>"$out/$name.log" 2>&1
  else
    "$root/scripts/launch.sh" --nproc "$n" "${common[@]}" run_name="$name" steps="$to" gradient_accumulation_steps="$k" \
      "$@" >>"$out/$name.log" 2>&1
  fi || { tail -5 "$out/$name.log" >&2; exit 1; }
}
# case LABEL REFERENCE NPROC K [ZERO] -> NPROC' K' [ZERO']: resumes a copy of the reference's half-way checkpoint.
report() {
  local label=$1 resumed=$2 straight=$3 line bitwise=no
  line=$("$compare" "$out/runs/$resumed" "$out/runs/$straight" --metric loss --rtol 1e-5 | tail -1)
  "$compare" "$out/runs/$resumed" "$out/runs/$straight" --metric loss --rtol 0 --atol 0 >/dev/null && bitwise=yes
  printf '%-40s %s | bitwise: %s\n' "$label" "$line" "$bitwise"
}
straight_and_half() {  # NAME NPROC K [key=value]: N straight steps, and a separate run stopped half-way
  local name=$1 n=$2 k=$3
  shift 3
  run "$name" "$n" "$steps" "$k" "$@"
  run "$name.half" "$n" "$half" "$k" "$@"
}
resume() {  # FROM NAME NPROC K [key=value]
  local from=$1 name=$2 n=$3 k=$4
  shift 4
  cp -r "$out/runs/$from.half" "$out/runs/$name"
  run "$name" "$n" "$steps" "$k" "$@"
}

zero=shard_optimizer_over_data=true
straight_and_half p2 2 2
straight_and_half p1 1 4
straight_and_half p4 4 1
straight_and_half z2 2 2 $zero
resume p2 p2_p1 1 4
resume p1 p1_p2 2 2
resume p4 p4_p2 2 2
resume z2 z2_p1 1 4
resume z2 z2_z4 4 1 $zero
echo "resume at step $half of $steps, global batch 8, fp32 ($(date -u '+%Y-%m-%d'))"
report "2 processes K=2 -> 1 process K=4" p2_p1 p2
report "1 process K=4 -> 2 processes K=2" p1_p2 p1
report "4 processes K=1 -> 2 processes K=2" p4_p2 p4
report "ZeRO-1 2x2 -> 1 process K=4" z2_p1 z2
report "ZeRO-1 2x2 -> ZeRO-1 4 processes K=1" z2_z4 z2
report "(for scale) 2x2 straight vs 1x4 straight" p2 p1
