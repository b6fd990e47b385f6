#!/usr/bin/env bash
# Intent: reproduce the seed PR's memory comparisons (MaxText: GA's fixed cost and its float32 carry) on the
# seed's model (emb 512, 8+8 heads, mlp 2048, 4 layers, head_dim 64, vocab 32000, seq 512, dtype bfloat16),
# measured by the tracking allocator, and print them as a Markdown table with a PASS/FAIL check per row;
# then the weight-cast hoisting trade-off (time and memory, hoist_weight_cast=false vs true).
# Cost: 6 trainer runs of 3 steps each, one after another: about 1-3 s per step on an idle 2-core machine, so
# about 1 minute (more when other jobs share the cores). Finished runs are skipped when it is re-run.
#
# Usage: bench/memory_table.sh [--out DIR] [key=value ...]
#   Runs go to DIR/<name> (default: a fresh temporary directory); extra key=value overrides apply to every run and
#   replace the seed model's value of the same key, e.g. `base_emb_dim=64 vocab_size=256` for a quick small table.
#   The keys the table varies (gradient_accumulation_steps, per_device_batch_size, grad_dtype, hoist_weight_cast,
#   steps, run_name, base_output_directory) cannot be overridden.
#   TRAINER=path overrides the trainer binary (default <repo>/build/trainer, built by scripts/build.sh if absent).
# Exit: 0 all rows pass; 1 a row fails or a run fails; 2 bad usage.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
trainer=${TRAINER:-$repo/build/trainer}
out="" extra=()
while (($#)); do
  case $1 in
  --out) out=$2; shift ;;
  --out=*) out=${1#--out=} ;;
  -h | --help) sed -n '/^# Usage:/,/^# Exit:/s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"; exit 0 ;;
  gradient_accumulation_steps=* | per_device_batch_size=* | grad_dtype=* | hoist_weight_cast=* | steps=* | run_name=* | \
    base_output_directory=*)
    echo "memory_table.sh: ${1%%=*} is what the table varies; it cannot be overridden" >&2; exit 2 ;;
  *=*) extra+=("$1") ;;
  *) echo "memory_table.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done
[ -x "$trainer" ] || "$repo/scripts/build.sh" trainer >&2
out=${out:-$(mktemp -d -t memory_table.XXXXXX)}
mkdir -p "$out"

seed=(log_period=1)
# An override replaces the seed's value of its key (the trainer refuses a key given twice).
for kv in "${extra[@]+"${extra[@]}"}"; do
  kept=()
  for s in "${seed[@]}"; do [[ ${s%%=*} == "${kv%%=*}" ]] || kept+=("$s"); done
  seed=("${kept[@]}")
done

# run NAME STEPS key=value...: one trainer run into $out/NAME (skipped if it already finished).
run() {
  local name=$1 steps=$2
  shift 2
  if [ -f "$out/$name/memory_report.json" ]; then return 0; fi
  rm -rf "${out:?}/$name"
  echo "running $name: $*" >&2
  "$trainer" seed.yml "${seed[@]}" steps="$steps" run_name="$name" base_output_directory="$out" "$@" \
    "${extra[@]+"${extra[@]}"}" >"$out/$name.log" 2>&1 || { echo "run $name failed; see $out/$name.log" >&2; exit 1; }
}

run ga1_b4_f32 3 gradient_accumulation_steps=1 per_device_batch_size=4 grad_dtype=float32
run ga4_b1_f32 3 gradient_accumulation_steps=4 per_device_batch_size=1 grad_dtype=float32
run ga2_b1_f32 3 gradient_accumulation_steps=2 per_device_batch_size=1 grad_dtype=float32
run ga2_b1_bf16 3 gradient_accumulation_steps=2 per_device_batch_size=1 grad_dtype=bfloat16
run ga1_b4_bf16 3 gradient_accumulation_steps=1 per_device_batch_size=4 grad_dtype=bfloat16
# Hoisting (the default, one cast of each weight per step): the ga=2 bfloat16 run again with hoist_weight_cast=false
# (one cast per microbatch).
run ga2_b1_bf16_nohoist 3 gradient_accumulation_steps=2 per_device_batch_size=1 grad_dtype=bfloat16 hoist_weight_cast=false

echo "<!-- bench/memory_table.sh, $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //'), runs in $out -->"
exec python3 "$repo/bench/lib/memory_table.py" "$out"
