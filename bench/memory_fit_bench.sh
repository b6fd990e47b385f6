#!/usr/bin/env bash
# Intent: how good per_device_batch_size=auto's prediction is. For each microbatch size, the trainer predicts the
# step peak from its probe (one forward + backward at microbatch 1 and 2, src/train/MicrobatchFit.h) and then
# trains 3 steps; the table compares that prediction with the measured peak (peak_step_bytes in memory_report.json,
# the tracking allocator's largest step peak). Then one pdbs=auto run with a budget between two sizes, to show the
# decision and the peak it reached. Target: every prediction within 10 % of the measured peak. The last column, the
# process's max RSS (/usr/bin/time), is what the tracking allocator does not see: code, allocator cache, BLAS scratch.
# Cost: 6 trainer runs of 3 steps each on the chosen model, one after another; on the seed model (below) about
# 1-5 s per step on an idle 2-core machine: 1-2 minutes (more when other jobs share the cores).
#
# Usage: bench/memory_fit_bench.sh [--model seed|base] [--out DIR] [key=value ...]
#   --model seed (default): configs/seed.yml, the seed model of docs/memory.md (emb 512, 8+8 heads, mlp 2048,
#   4 layers, head_dim 64, vocab 32000, seq 512, bf16 compute, 49549824 parameters); base: configs/base.yml's model.
#   Runs go to DIR (default: a fresh temporary directory). key=value overrides apply to every run.
#   TRAINER=path overrides the trainer binary (default <repo>/build/trainer).
# Exit: 0 every prediction within 10 %; 1 one is not, or a run failed; 2 bad usage.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
source "$repo/bench/lib/args.sh"
model=seed out="" overrides=()
while (($#)); do
  case $1 in
  --model) model=${2:-}; shift ;;
  --model=*) model=${1#--model=} ;;
  --out) out=${2:-}; shift ;;
  --out=*) out=${1#--out=} ;;
  *) other_argument "${BASH_SOURCE[0]}" "$1" ;;
  esac
  shift
done
case $model in
seed | base) config=$model.yml ;;
*) echo "memory_fit_bench.sh: --model is seed or base" >&2 && exit 2 ;;
esac
trainer=$(study_trainer)
out=${out:-$(mktemp -d -t memory_fit_bench.XXXXXX)}
mkdir -p "$out"
common=("$config" steps=3 log_period=1 enable_checkpointing=false base_output_directory="$out"
        "${overrides[@]}")

# run NAME key=value...: one run; its log is $out/NAME.log
run() {
  local name=$1
  shift
  rm -rf "${out:?}/$name"
  nice -n 10 /usr/bin/time -f %M -o "$out/$name.rss_kib" "$trainer" "${common[@]}" run_name="$name" "$@" \
    >"$out/$name.log" 2>&1 ||
    { tail -20 "$out/$name.log" >&2; echo "memory_fit_bench.sh: run $name failed" >&2; exit 1; }
}
rss_mib() { echo $(($(tail -1 "$out/$1.rss_kib") / 1024)); }
measured_mib() { python3 -c 'import json,sys; print("%.1f" % (json.load(open(sys.argv[1]))["peak_step_bytes"] / 2**20))' "$out/$1/memory_report.json"; }

echo "<!-- bench/memory_fit_bench.sh --model $model, $(date -u '+%Y-%m-%d %H:%M') UTC, $(nproc) cores," \
     "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'), load average $(cut -d' ' -f1-3 /proc/loadavg) -->"
echo
echo "| per_device_batch_size | K | predicted peak (MiB) | measured peak (MiB) | error | process max RSS (MiB) |"
echo "|---:|---:|---:|---:|---:|---:|"
worst=0
for spec in 1:1 2:1 4:1 8:1 2:4; do
  b=${spec%:*} k=${spec#*:}
  # memory_budget_mib far above the peak: the trainer checks the fit and logs its prediction, then trains.
  run "b${b}_k$k" per_device_batch_size="$b" gradient_accumulation_steps="$k" memory_budget_mib=1000000
  predicted=$(sed -n 's/.*fits: predicted peak \([0-9.e+]*\) MiB.*/\1/p' "$out/b${b}_k$k.log" | head -1)
  measured=$(measured_mib "b${b}_k$k")
  error=$(python3 -c "print('%+.1f %%' % (100 * ($predicted - $measured) / $measured))")
  echo "| $b | $k | $predicted | $measured | $error | $(rss_mib "b${b}_k$k") |"
  worst=$(python3 -c "print(max($worst, abs($predicted - $measured) / $measured))")
done
per_seq=$(sed -n 's/.*MiB of [0-9.e+]*; \([0-9.e+]*\) MiB per sequence.*/\1/p' "$out/b1_k1.log" | head -1)
at1=$(sed -n 's/.*fits: predicted peak \([0-9.e+]*\) MiB.*/\1/p' "$out/b1_k1.log" | head -1)
budget=$(python3 -c "print(round($at1 + 2.5 * $per_seq))")  # between the predicted peaks of 2 and 4
echo
run auto per_device_batch_size=auto global_batch_size=8 memory_budget_mib="$budget"
echo "pdbs=auto, global_batch_size=8, memory_budget_mib=$budget:"
grep -o 'pdbs=auto: .*' "$out/auto.log" | head -1
echo "measured peak: $(measured_mib auto) MiB (process max RSS $(rss_mib auto) MiB)"
echo
python3 -c "import sys; w = $worst; print('largest error %.1f %%: %s' % (100 * w, 'within 10 %' if w <= 0.10 else 'OVER 10 %')); sys.exit(0 if w <= 0.10 else 1)"
