#!/usr/bin/env bash
# Intent: step time of ZeRO-2 (shard_gradients_over_data) against plain data parallel at N=2 on one host, as the
# trainer's own tokens/s (training seconds, start-up excluded), in alternating pairs; and ZeRO-1 and ZeRO-3
# (shard_parameters_over_data, carry whole) beside them.
# Cost: 3 pairs x 4 runs of configs/base.yml (4.07 M parameters) for 15 steps, 2 processes of one thread each:
# about 3 minutes on 2 cores.
#
# Usage: bench/sharded_speed.sh [PAIRS] [key=value ...]
set -euo pipefail
[[ ${1:-} != -h && ${1:-} != --help ]] || { sed -n '2,/^set /{/^#/s/^# \{0,1\}//p}' "$0"; exit 0; }
repo=$(cd "$(dirname "$0")/.." && pwd)
pairs=${1:-3}
shift || true
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
common=(steps=15 dtype=float32 num_threads=1 gradient_accumulation_steps=2 enable_checkpointing=false
        base_output_directory="$out/runs" "$@")
speed() {  # speed NAME key=value...: the run's avg_tokens_per_s
  local name=$1
  shift
  "$repo/scripts/launch.sh" --nproc 2 "$repo/configs/base.yml" "${common[@]}" run_name="$name" "$@" >"$out/$name.log" 2>&1 ||
    { tail -20 "$out/$name.log" >&2; exit 1; }
  python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["avg_tokens_per_s"])' "$out/runs/$name/summary.json"
}
echo "# $(date -u +%F) $(lscpu | sed -n 's/^Model name: *//p') $(nproc) cores, load $(cut -d' ' -f1 /proc/loadavg)"
ratios2=() ratios1=() ratios3=()
for i in $(seq "$pairs"); do
  dp=$(speed dp$i)
  z2=$(speed z2_$i shard_optimizer_over_data=true shard_gradients_over_data=true)
  z1=$(speed z1_$i shard_optimizer_over_data=true)
  z3=$(speed z3_$i shard_optimizer_over_data=true shard_parameters_over_data=true)
  ratios2+=("$(python3 -c "print($z2 / $dp)")")
  ratios1+=("$(python3 -c "print($z1 / $dp)")")
  ratios3+=("$(python3 -c "print($z3 / $dp)")")
  echo "pair $i: data parallel $dp tok/s, ZeRO-2 $z2 tok/s (x$(python3 -c "print(round($z2 / $dp, 3))")), ZeRO-1 $z1 tok/s (x$(python3 -c "print(round($z1 / $dp, 3))")), ZeRO-3 $z3 tok/s (x$(python3 -c "print(round($z3 / $dp, 3))"))"
done
python3 - "${ratios2[*]}" "${ratios1[*]}" "${ratios3[*]}" <<'PY'
import statistics, sys
for name, arg in (("ZeRO-2", sys.argv[1]), ("ZeRO-1", sys.argv[2]), ("ZeRO-3", sys.argv[3])):
    r = [float(x) for x in arg.split()]
    print(f"{name} / data parallel tokens/s: median {statistics.median(r):.3f} (range {min(r):.3f}-{max(r):.3f}) over {len(r)} pairs")
PY
echo "# load after: $(cut -d' ' -f1 /proc/loadavg)"
