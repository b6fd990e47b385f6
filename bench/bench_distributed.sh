#!/usr/bin/env bash
# Usage: bench/bench_distributed.sh [--nproc N] [--rounds R] [--single-threads T] [key=value ...]
# Intent: training throughput of ONE global batch split over 1 process and over N processes on this machine,
# measured side by side (alternating, R rounds each) so a drift in machine load hits both alike.
#   1 process:   gradient_accumulation_steps=N, num_threads=T (default 0: all cores)
#   N processes: gradient_accumulation_steps=1, num_threads=<cores/N> each, through scripts/launch.sh
# Prints each run's tokens/s (the trainer's own figure: global valid tokens / training seconds, start-up excluded)
# and the median of each side. Extra key=value pairs go to both (default: configs/base.yml with steps=30).
# Cost: 2 x R short runs of the default model, about 10 s each on 2 cores.
set -euo pipefail
[[ ${1:-} != -h && ${1:-} != --help ]] || { sed -n '2,/^set /{/^#/s/^# \{0,1\}//p}' "$0"; exit 0; }
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
nproc=2
rounds=3
single_threads=0
while [[ $# -gt 0 && $1 == --* ]]; do
  case $1 in
    --nproc) nproc=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --single-threads) single_threads=$2; shift 2 ;;
    *) echo "usage: bench/bench_distributed.sh [--nproc N] [--rounds R] [--single-threads T] [key=value ...]" >&2; exit 2 ;;
  esac
done
trainer=${TRAINER:-$root/build/trainer}
cores=$(nproc)
per=$((cores / nproc > 0 ? cores / nproc : 1))
out=$(mktemp -d)
common=(base.yml steps=30 log_period=1000 base_output_directory=$out "$@")

tokens_per_s() { python3 -c 'import json,sys; print(round(json.load(open(sys.argv[1]))["avg_tokens_per_s"]))' "$1"; }
median() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print (NR % 2 ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2)}'; }

one=() many=()
echo "machine: $cores cores; load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
for ((i = 1; i <= rounds; i++)); do
  "$trainer" "${common[@]}" run_name=p1_$i gradient_accumulation_steps=$nproc num_threads=$single_threads >"$out/p1_$i.log" 2>&1
  one+=("$(tokens_per_s "$out/p1_$i/summary.json")")
  TRAINER=$trainer "$root/scripts/launch.sh" --nproc "$nproc" "${common[@]}" run_name=p${nproc}_$i \
    gradient_accumulation_steps=1 num_threads=$per >"$out/pN_$i.log" 2>&1
  many+=("$(tokens_per_s "$out/p${nproc}_$i/summary.json")")
  echo "round $i: 1 process (num_threads=$single_threads) ${one[-1]} tokens/s | $nproc processes ${many[-1]} tokens/s"
done
m1=$(median "${one[@]}")
mn=$(median "${many[@]}")
echo "median: 1 process $m1 tokens/s | $nproc processes $mn tokens/s | ratio $(python3 -c "print(round($mn / $m1, 2))")"
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg); runs kept in $out"
