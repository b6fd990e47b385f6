#!/usr/bin/env bash
# Intent: does the GA carry's dtype and rounding change the training outcome at a large K? Trains the same model
# on the same data with grad_dtype=float32, bfloat16 + nearest and bfloat16 + stochastic (plus stochastic with
# another rounding seed, to show how far rounding noise alone moves the result), K=32 microbatches per step, and
# tabulates the final loss of each. bf16 arms log grad_rel_error every 10 steps (grad_fidelity_period).
# Cost: four trainer runs at once (niced), by default a 0.75 M-parameter decoder, 100 steps of 32 x 32 tokens:
# a few minutes each on a quiet 2-core machine. Finished runs are skipped when re-run.
#
# Usage: bench/rounding_outcome.sh [--out DIR] [--arms LIST] [key=value ...]
#   --arms: a comma-separated subset of fp32,bf16-nearest,bf16-stochastic,bf16-stochastic-seed1 (default: all).
#   key=value overrides apply to every arm and replace the study's own value of that key (e.g. dataset_type=tokens
#   dataset_path=... for a real corpus, steps=N).
#   Writes DIR/<arm>/ (run directories), DIR/<arm>.log and DIR/summary.md (default DIR: runs/rounding-outcome).
#   "final loss" is the mean training loss of the last 20 steps: with dataset_type=synthetic every step's batch is
#   new data, so it is a held-out loss; eval_loss is reported too when the trainer logs it.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib/args.sh"
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=runs/rounding-outcome overrides=() arm_list=fp32,bf16-nearest,bf16-stochastic,bf16-stochastic-seed1
while (($#)); do
  case $1 in
  --out) out=$2 && shift ;;
  --arms) arm_list=$2 && shift ;;
  *) other_argument "${BASH_SOURCE[0]}" "$1" ;;
  esac
  shift
done
trainer=$(study_trainer)

# The harder synthetic task: vocab 1024 (4x base.yml's), so the progressions take longer to learn.
common=(steps=100 gradient_accumulation_steps=32 per_device_batch_size=1 max_target_length=32 vocab_size=1024
        base_emb_dim=128 base_num_query_heads=4 base_num_kv_heads=2 head_dim=32 base_mlp_dim=512
        base_num_decoder_layers=2 num_threads=1 log_period=25 checkpoint_period=25)
declare -A arms=(
  [fp32]="grad_dtype=float32"
  [bf16-nearest]="grad_dtype=bfloat16 grad_accum_rounding=nearest grad_fidelity_period=10"
  [bf16-stochastic]="grad_dtype=bfloat16 grad_accum_rounding=stochastic grad_fidelity_period=10"
  [bf16-stochastic-seed1]="grad_dtype=bfloat16 grad_accum_rounding=stochastic grad_accum_rounding_seed=1 grad_fidelity_period=10"
)
IFS=, read -ra order <<<"$arm_list"
for arm in "${order[@]}"; do [[ -n ${arms[$arm]:-} ]] || { echo "rounding_outcome.sh: unknown arm $arm" >&2 && exit 2; }; done
# An override replaces the study's own setting of the same key (the trainer rejects a key given twice).
for o in "${overrides[@]}"; do
  for i in "${!common[@]}"; do [[ ${common[$i]%%=*} == "${o%%=*}" ]] && unset 'common[i]'; done
done
mkdir -p "$out"
pids=()
for arm in "${order[@]}"; do
  [[ -f $out/$arm/summary.json ]] && continue
  # shellcheck disable=SC2086
  nice -n 5 "$trainer" base.yml "${common[@]}" ${arms[$arm]} "${overrides[@]}" base_output_directory="$out" \
    run_name="$arm" >"$out/$arm.log" 2>&1 &
  pids+=($!)
done
status=0
for pid in "${pids[@]}"; do wait "$pid" || status=1; done

{
  echo "| arm | final loss (mean of last 20 steps) | loss at the last step | eval_loss (last) | grad_rel_error (mean) |"
  echo "|---|---:|---:|---:|---:|"
  for arm in "${order[@]}"; do
    m=$out/$arm/metrics.jsonl
    [[ -f $m ]] || continue
    awk -v arm="$arm" '
      function field(name,   re, s) {
        re = "\"" name "\": [^,}]*"
        if (!match($0, re)) return ""
        s = substr($0, RSTART, RLENGTH); sub(/^[^:]*: /, "", s); return s
      }
      { loss[NR] = field("loss"); e = field("grad_rel_error"); if (e != "") { err += e; errs++ }
        ev = field("eval_loss"); if (ev != "" && ev != "null") eval_last = ev }
      END {
        n = NR < 20 ? NR : 20; s = 0; for (i = NR - n + 1; i <= NR; i++) s += loss[i]
        printf "| %s | %.4f | %s | %s | %s |\n", arm, s / n, loss[NR], eval_last == "" ? "-" : eval_last,
               errs ? sprintf("%.3g (%d steps)", err / errs, errs) : "-"
      }' "$m"
  done
} | tee "$out/summary.md"
exit $status
