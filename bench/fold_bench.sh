#!/usr/bin/env bash
# Intent: what stochastic rounding costs the fold. Alternating pairs of trainer runs on the seed model (emb 512,
# 8 heads, mlp 2048, 4 layers, vocab 32000, seq 512, pdbs=1, K=4, bf16 compute, bf16 shadow): A with
# grad_accum_rounding=stochastic, B with nearest, A B A B ... Each run's fold_s (seconds spent folding gradients
# into the shadow tree, timed inside the trainer) and step_time_s are read from metrics.jsonl for every step after
# the first (warm-up); the table gives the median and range over runs of each run's median step.
# Cost: 2 x PAIRS runs of STEPS steps of the seed model (about 2 s a step on a quiet 2-core machine; PAIRS=3, STEPS=4).
#
# Usage: bench/fold_bench.sh [--pairs N] [--steps N] [--out DIR] [key=value ...]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib/args.sh"
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
pairs=3 steps=4
pair_args "${BASH_SOURCE[0]}" "$@"
trainer=$(study_trainer)
seed=(per_device_batch_size=1
      gradient_accumulation_steps=4 grad_dtype=bfloat16 enable_checkpointing=false log_period=1000 steps=$steps)

# median of "value" lines on stdin
median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
# the median over steps 2.. of KEY in a run's metrics.jsonl
run_median() {
  awk -v key="$1" 'NR > 1 { if (match($0, "\"" key "\": [^,}]*")) { s = substr($0, RSTART, RLENGTH); sub(/^[^:]*: /, "", s); print s } }' \
    "$2/metrics.jsonl" | median
}

for ((p = 1; p <= pairs; p++)); do
  for arm in stochastic nearest; do
    "$trainer" seed.yml "${seed[@]}" grad_accum_rounding=$arm "${overrides[@]}" base_output_directory="$out" \
      run_name="$arm-$p" >"$out/$arm-$p.log" 2>&1
    echo "$arm $p: fold_s $(run_median fold_s "$out/$arm-$p") step_time_s $(run_median step_time_s "$out/$arm-$p")"
  done
done | tee "$out/runs.txt"

echo
echo "| rounding | fold_s per step: median [min, max] | step_time_s: median [min, max] | runs |"
echo "|---|---|---|---:|"
for arm in stochastic nearest; do
  stats() { awk -v arm="$arm" -v col="$1" '$1 == arm { print $col }' "$out/runs.txt" | sort -g |
    awk '{ v[NR] = $1 } END { m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2;
                              printf "%.4g [%.4g, %.4g]", m, v[1], v[NR] }'; }
  echo "| $arm | $(stats 4) | $(stats 6) | $pairs |"
done
# The pairwise ratio: stochastic fold_s / nearest fold_s within each pair.
awk '$1 == "stochastic" { a[$2 + 0] = $4 } $1 == "nearest" { b[$2 + 0] = $4 }
     END { for (p in a) if (b[p] > 0) printf "%.3f\n", a[p] / b[p] }' "$out/runs.txt" | sort -g |
  awk '{ v[NR] = $1 } END { m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2;
                            printf "fold_s ratio stochastic/nearest per pair: median %.3f [%.3f, %.3f]\n", m, v[1], v[NR] }'
