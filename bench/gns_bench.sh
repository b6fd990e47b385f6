#!/usr/bin/env bash
# Intent: what the online gradient noise scale costs (docs/batch-size.md). Alternating pairs of trainer runs on
# configs/base.yml's default model (not configs/seed.yml): emb 256, 4 layers, vocab 256, seq 128,
# per_device_batch_size 8, bf16 compute, fp32 shadow, at K=4: A with gradient_noise_scale=true, B with false, A B A B ... For each run the median
# over steps 2.. of step_time_s and fold_s (read from metrics.jsonl); the table gives the median and range over
# pairs of the ratio A/B within each pair (pairing cancels the machine's drift), and of the per-step difference.
# Cost: 2 x PAIRS runs of STEPS steps; a step took 4-29 s on the shared 2-core machine (load ~22), so
# --pairs 5 --steps 8 took 17 min there (docs/batch-size.md); the defaults (7 pairs of 30 steps) need a quiet machine.
#
# Usage: bench/gns_bench.sh [--pairs N] [--steps N] [--out DIR] [key=value ...]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib/args.sh"
pairs=7 steps=30
pair_args "${BASH_SOURCE[0]}" "$@"
trainer=$(study_trainer)
common=(gradient_accumulation_steps=4 dtype=bfloat16 enable_checkpointing=false log_period=1000 steps=$steps)

median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
run_median() {
  awk -v key="$1" 'NR > 1 { if (match($0, "\"" key "\": [^,}]*")) { s = substr($0, RSTART, RLENGTH); sub(/^[^:]*: /, "", s); print s } }' \
    "$2/metrics.jsonl" | median
}

echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores, load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
for ((p = 1; p <= pairs; p++)); do
  for arm in on off; do
    flag=$([[ $arm == on ]] && echo true || echo false)
    "$trainer" base.yml "${common[@]}" gradient_noise_scale=$flag "${overrides[@]}" base_output_directory="$out" \
      run_name="$arm-$p" >"$out/$arm-$p.log" 2>&1
    echo "$arm $p step_time_s $(run_median step_time_s "$out/$arm-$p") fold_s $(run_median fold_s "$out/$arm-$p")"
  done
done | tee "$out/runs.txt"
echo "# load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"

# stat COL EXPR: median [min, max] over pairs of EXPR(a, b), a = on's value, b = off's, in column COL.
stat() {
  awk -v col="$1" -v expr="$2" '$1 == "on" { a[$2 + 0] = $col } $1 == "off" { b[$2 + 0] = $col }
    END { for (p in a) if (p in b) print (expr == "ratio" ? a[p] / b[p] : a[p] - b[p]) }' "$out/runs.txt" | sort -g |
    awk -v expr="$2" '{ v[NR] = $1 } END { m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2;
      if (expr == "ratio") printf "%+.2f %% [%+.2f, %+.2f]", 100 * (m - 1), 100 * (v[1] - 1), 100 * (v[NR] - 1);
      else printf "%+.2f ms [%+.2f, %+.2f]", 1000 * m, 1000 * v[1], 1000 * v[NR] }'
}
echo
echo "| quantity (on vs off, per pair; $pairs pairs) | median [min, max] |"
echo "|---|---|"
echo "| step_time_s, on/off - 1 | $(stat 4 ratio) |"
echo "| step_time_s, on - off | $(stat 4 diff) |"
echo "| fold_s, on - off | $(stat 6 diff) |"
echo "| step_time_s of the off runs | $(awk '$1 == "off" { print $4 }' "$out/runs.txt" | sort -g | awk '{ v[NR] = $1 } END { m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2; printf "%.4g s [%.4g, %.4g]", m, v[1], v[NR] }') |"
