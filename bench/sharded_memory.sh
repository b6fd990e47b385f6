#!/usr/bin/env bash
# Intent: what each process holds under data parallel, ZeRO-1, ZeRO-2 (shard_gradients_over_data) and ZeRO-3
# (shard_parameters_over_data, with the carry whole or sharded), measured by the
# trainer's tracking allocator and getrusage per process, and the bytes each process contributes to collectives,
# counted in the communicator: a full fine-tune with AdamW (fp32 moments), fp32 weights and a bf16 carry, the same
# global batch at N = 1, 2 and 4 processes (docs/distributed.md, "Sharded training").
# Cost: about 3-4 minutes on 2 cores with the default shape (0.27 B parameters: width 1024, 12 layers, MLP 4096,
# vocab 32000), 2 steps per run, one thread per process; peak memory about 9 GiB in all (the N=4 runs).
#
# Usage: [ONLY="zero3s_2 zero3s_4"] [SKIP_ONE=1] [EXTRA="key=value ..."] bench/sharded_memory.sh [--small | --1.1b]
#   ONLY: run just the named cases (the names below); SKIP_ONE=1: not the one-process row; EXTRA: keys every run
#   adds (cpu_allocator_cache_mib=0 keeps each process's RSS near its tensors, for 4 processes of 1.1 B on 24 GiB)
#   --small: a 2-layer width-128 shape, to check the script in seconds
#   --1.1b:  TinyLlama's 1.1 B shape (width 2048, 22 layers, MLP 5632, 32 heads, 4 KV heads, vocab 32000), at N = 1, 2
#            and 4 with ZeRO-3 (carry sharded) only: up to about 19 GiB in all, 10-15 minutes on 2 cores
set -euo pipefail
[[ ${1:-} != -h && ${1:-} != --help ]] || { sed -n '2,/^set /{/^#/s/^# \{0,1\}//p}' "$0"; exit 0; }
repo=$(cd "$(dirname "$0")/.." && pwd)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
shape=(base_emb_dim=1024 base_num_query_heads=16 base_num_kv_heads=16 head_dim=64 base_mlp_dim=4096
       base_num_decoder_layers=12 vocab_size=32000 max_target_length=32 per_device_batch_size=1)
common=(steps=2 dtype=float32 weight_dtype=float32 grad_dtype=bfloat16 opt_type=adamw num_threads=1
        enable_checkpointing=false gradient_noise_scale=false base_output_directory="$out/runs" log_period=1
        grad_reduce_bucket_mb=25)
read -ra extra <<<"${EXTRA:-}"
common+=("${extra[@]}")
if [[ ${1:-} == --1.1b ]]; then
  shape=(base_emb_dim=2048 base_num_query_heads=32 base_num_kv_heads=4 head_dim=64 base_mlp_dim=5632
         base_num_decoder_layers=22 vocab_size=32000 max_target_length=32 per_device_batch_size=1)
fi
if [[ ${1:-} == --small ]]; then
  shape=(base_emb_dim=128 base_num_query_heads=4 base_num_kv_heads=4 head_dim=32 base_mlp_dim=256
         base_num_decoder_layers=2 vocab_size=1000 max_target_length=32 per_device_batch_size=1)
fi

# case NAME NPROC K key=value...: one run; prints each process's memory and collective lines
case_run() {
  local name=$1 n=$2 k=$3
  shift 3
  [[ -z ${ONLY:-} || " $ONLY " == *" $name "* ]] || return 0
  local log=$out/$name.log
  if ((n == 1)); then
    "$repo/build/trainer" "$repo/configs/base.yml" "${shape[@]}" "${common[@]}" run_name="$name" \
      gradient_accumulation_steps="$k" "$@" >"$log" 2>&1
  else
    "$repo/scripts/launch.sh" --nproc "$n" "$repo/configs/base.yml" "${shape[@]}" "${common[@]}" run_name="$name" \
      gradient_accumulation_steps="$k" "$@" >"$log" 2>&1
  fi || { tail -20 "$log" >&2; echo "run $name failed" >&2; exit 1; }
  python3 - "$name" "$n" "$log" <<'PY'
import re, sys
name, n, log = sys.argv[1], int(sys.argv[2]), open(sys.argv[3]).read()
mem = re.findall(r"(?:\[rank (\d+)\].*?)?memory on this process: tensors peaked at ([\d.]+) MiB; weights ([\d.]+) MiB, "
                 r"shadow tree ([\d.]+) MiB, optimizer state ([\d.]+) MiB; peak RSS ([\d.]+) MiB", log)
# by rank: the model built and loaded (its peak so far), and the steps alone (without the start's gathers)
built = {r or "0": v for r, v in re.findall(r"(?:\[rank (\d+)\].*?)?model built: tensors peaked at ([\d.]+) MiB", log)}
steps = {r or "0": v for r, v in re.findall(r"(?:\[rank (\d+)\].*?)?the steps alone peaked at ([\d.]+) MiB", log)}
col = re.findall(r"collectives on this process: (\d+) all_reduce, (\d+) all_gather, (\d+) broadcast, (\d+) bytes", log)
for i, m in enumerate(mem):
    sent = f"{int(col[i][3]) / 2 / 2**20:9.1f}" if i < len(col) else "      -"
    print(f"{name:18s} N={n} rank {m[0] or 0}: tensors peak {float(m[1]):8.1f} MiB | weights {float(m[2]):7.1f} "
          f"shadow {float(m[3]):7.1f} optimizer {float(m[4]):7.1f} | RSS {float(m[5]):8.1f} MiB | MiB sent/step {sent}")
    r = m[0] or "0"
    if r in built and r in steps:
        print(f"{name:18s} N={n} rank {r}: built and loaded at {float(built[r]):8.1f} MiB | steps alone "
              f"{float(steps[r]):8.1f} MiB")
plan = re.search(r"memory plan of each of the \d+ processes: .*?at least ([\d.]+) (GiB|MiB)", log)
if plan:
    planned = float(plan.group(1)) * (1024 if plan.group(2) == "GiB" else 1)
    print(f"{name:18s} N={n} plan (train/MemoryProbe.cpp): {planned:8.1f} MiB, measured/plan "
          f"{float(mem[0][1]) / planned:.2f}")
if not mem: sys.exit(f"{name}: no memory line in the log")
PY
}

echo "# $(date -u +%F) $(lscpu | sed -n 's/^Model name: *//p') $(nproc) cores"
z3=(shard_optimizer_over_data=true shard_parameters_over_data=true)
[[ -n ${SKIP_ONE:-} ]] || case_run one 1 4  # SKIP_ONE=1: the one-process row is already at hand
if [[ ${1:-} == --1.1b ]]; then  # the carry sharded: with it whole, 2 processes need more than this 24 GiB machine
  case_run zero3s_2 2 2 "${z3[@]}" shard_gradients_over_data=true
  case_run zero3s_4 4 1 "${z3[@]}" shard_gradients_over_data=true
  exit 0
fi
case_run dp2 2 2
case_run zero1_2 2 2 shard_optimizer_over_data=true
case_run zero2_2 2 2 shard_optimizer_over_data=true shard_gradients_over_data=true
case_run zero1_4 4 1 shard_optimizer_over_data=true
case_run zero2_4 4 1 shard_optimizer_over_data=true shard_gradients_over_data=true
case_run zero3_2 2 2 "${z3[@]}"
case_run zero3s_2 2 2 "${z3[@]}" shard_gradients_over_data=true
case_run zero3_4 4 1 "${z3[@]}"
case_run zero3s_4 4 1 "${z3[@]}" shard_gradients_over_data=true
