#!/usr/bin/env bash
# Intent: "what a 24 GiB machine can tune" (issue 43 §6, docs/lora.md): for six model shapes and three ways to train
# them, the peak RSS of 2 real steps at K=2 x 1 x 512 tokens (synthetic data, no checkpoints, dtype=auto), or "does
# not fit" when the trainer refuses the run before it allocates the model (exit 2, src/train/MemoryProbe.h
# refuse_what_cannot_fit). SmolLM2-135M is the real model (load_parameters_path, scripts/prepare_model.sh); the others
# are built from scratch with the shapes of their public config.json (the memory and the time do not depend on the
# values of the weights). Columns:
#   full      full fine-tuning at its leanest: grad_dtype=bfloat16 adam_state_dtype=bfloat16 hoist_weight_cast=false
#             remat_policy=full (docs/memory.md, "Memory levers"), fp32 master weights
#   lora      LoRA r=16 (alpha 32) on all seven projections, the frozen base in fp32, remat_policy=full,
#             hoist_weight_cast=false (under bf16 compute the default would hold a bf16 copy of the base per step)
#   lora_bf16 the same with the base in bf16 (weight_dtype=bfloat16)
# Cells run one at a time. Before each, the script waits until MemAvailable covers a rough need (bytes per parameter
# x parameters + 2 GiB) or the run is one the trainer will refuse; while it runs, a watchdog SIGKILLs the trainer if
# MemAvailable falls under --floor-gib, so that a shared machine never reaches the OOM killer (the cell then reads
# "stopped by the watchdog"). Finished cells are kept in OUT/results.tsv and skipped on a re-run.
# Cost: on 2 cores with AMX bf16 (2026-12-04) about 25-40 min for all 18 cells (the 3B and 8B LoRA cells take most),
# plus any wait for memory; the refusals take seconds each. Peak memory: up to ~18 GiB (the 8B shape with a bf16 base).
#
# Usage: bench/lora_memory_table.sh [--out DIR] [--models LIST] [--columns LIST] [--floor-gib N] [--wait-max S]
#   --models   comma list of smol135m,smol360m,llama1b,smol1.7b,llama3b,llama8b (default all, smallest first)
#   --columns  comma list of full,lora,lora_bf16 (default all)
#   --out      results directory (default runs/lora_memory_table); OUT/results.tsv, OUT/table.md, a log per cell
#   --floor-gib  the watchdog's MemAvailable floor (default 1.0)
#   --wait-max   seconds to wait for memory before a cell is marked "skipped: not enough free memory" (default 1800)
# Extra trainer keys: TRAINER_KEYS="cpu_allocator_cache_mib=0 ..."; TRAINER=PATH uses that binary.
# Exit: 0 ok (whatever the cells say); 2 bad usage or a missing model directory.
set -euo pipefail
[[ ${1:-} != -h && ${1:-} != --help ]] || { sed -n '2,/^set /{/^#/s/^# \{0,1\}//p}' "$0"; exit 0; }
source "$(dirname "$0")/../scripts/lib/setup.sh"
out=runs/lora_memory_table models=smol135m,smol360m,llama1b,smol1.7b,llama3b,llama8b columns=full,lora,lora_bf16
floor_gib=1.0 wait_max=1800 real_model=models/SmolLM2-135M-Instruct
while (($#)); do
  case $1 in
    --out) out=$2 ;; --models) models=$2 ;; --columns) columns=$2 ;; --floor-gib) floor_gib=$2 ;;
    --wait-max) wait_max=$2 ;; *) echo "lora_memory_table.sh: unknown option $1" >&2; exit 2 ;;
  esac
  shift 2
done
[ -n "${TRAINER:-}" ] || { build_shadowgrad trainer >&2; TRAINER=$SHADOWGRAD_ROOT/build/trainer; }
mkdir -p "$out"
results=$out/results.tsv

# The shapes, from each model's config.json on the Hugging Face hub (hidden_size, num_attention_heads,
# num_key_value_heads, head_dim, intermediate_size, num_hidden_layers, vocab_size, rope_theta, rope_scaling,
# rms_norm_eps, tie_word_embeddings), as the trainer's MaxText keys.
llama3_rope="rope_type=llama3 rope_low_freq_factor=1 rope_high_freq_factor=4 rope_original_max_position=8192"
shape() {
  case $1 in
    smol135m) echo "load_parameters_path=$real_model" ;;
    smol360m) echo "base_emb_dim=960 base_num_query_heads=15 base_num_kv_heads=5 head_dim=64 base_mlp_dim=2560" \
                   "base_num_decoder_layers=32 vocab_size=49152 rope_max_timescale=100000 logits_via_embedding=true" \
                   "normalization_layer_epsilon=1e-5" ;;
    llama1b) echo "base_emb_dim=2048 base_num_query_heads=32 base_num_kv_heads=8 head_dim=64 base_mlp_dim=8192" \
                  "base_num_decoder_layers=16 vocab_size=128256 rope_max_timescale=500000 $llama3_rope rope_factor=32" \
                  "logits_via_embedding=true normalization_layer_epsilon=1e-5" ;;
    smol1.7b) echo "base_emb_dim=2048 base_num_query_heads=32 base_num_kv_heads=32 head_dim=64 base_mlp_dim=8192" \
                   "base_num_decoder_layers=24 vocab_size=49152 rope_max_timescale=130000 logits_via_embedding=true" \
                   "normalization_layer_epsilon=1e-5" ;;
    llama3b) echo "base_emb_dim=3072 base_num_query_heads=24 base_num_kv_heads=8 head_dim=128 base_mlp_dim=8192" \
                  "base_num_decoder_layers=28 vocab_size=128256 rope_max_timescale=500000 $llama3_rope rope_factor=32" \
                  "logits_via_embedding=true normalization_layer_epsilon=1e-5" ;;
    llama8b) echo "base_emb_dim=4096 base_num_query_heads=32 base_num_kv_heads=8 head_dim=128 base_mlp_dim=14336" \
                  "base_num_decoder_layers=32 vocab_size=128256 rope_max_timescale=500000 $llama3_rope rope_factor=8" \
                  "logits_via_embedding=false normalization_layer_epsilon=1e-5" ;;
    *) echo "lora_memory_table.sh: unknown model $1" >&2; exit 2 ;;
  esac
}
# Parameters (for the wait only; the trainer makes its own, exact estimate): 135M, 362M, 1.24B, 1.71B, 3.21B, 8.03B.
params() { case $1 in smol135m) echo 0.135 ;; smol360m) echo 0.362 ;; llama1b) echo 1.236 ;; smol1.7b) echo 1.711 ;;
                      llama3b) echo 3.213 ;; llama8b) echo 8.030 ;; esac; }
column_keys() {
  case $1 in
    full) echo "grad_dtype=bfloat16 adam_state_dtype=bfloat16 hoist_weight_cast=false remat_policy=full" ;;
    lora) echo "lora_rank=16 lora_alpha=32 lora_target_modules=all-linear grad_dtype=bfloat16 remat_policy=full" \
               "hoist_weight_cast=false" ;;
    lora_bf16) echo "lora_rank=16 lora_alpha=32 lora_target_modules=all-linear grad_dtype=bfloat16 remat_policy=full" \
                    "weight_dtype=bfloat16" ;;
    *) echo "lora_memory_table.sh: unknown column $1" >&2; exit 2 ;;
  esac
}
bytes_per_param() { case $1 in full) echo 10 ;; lora) echo 4 ;; lora_bf16) echo 2 ;; esac; }
[[ ,$models, != *,smol135m,* ]] || [ -f "$real_model/model.safetensors" ] ||
  { echo "lora_memory_table.sh: no $real_model (run scripts/prepare_model.sh)" >&2; exit 2; }

mem_available_kib() { awk '/^MemAvailable:/{print $2}' /proc/meminfo; }
total_kib=$(awk '/^MemTotal:/{print $2}' /proc/meminfo)

run_cell() {  # model column -> one line in results.tsv
  local model=$1 column=$2 name=$1-$2 log=$out/$1-$2.log
  local need_kib
  need_kib=$(awk -v p="$(params "$model")" -v b="$(bytes_per_param "$column")" 'BEGIN{printf "%d", (p*1e9*b + 2*2^30)/1024}')
  # Wait for memory, unless the need is beyond the whole machine: then the trainer refuses in seconds.
  local waited=0
  if ((need_kib < total_kib)); then
    while (($(mem_available_kib) < need_kib)); do
      ((waited < wait_max)) || { printf '%s\t%s\tskipped\t\t\t\t\t%d\n' "$model" "$column" "$(($(mem_available_kib) >> 10))" >> "$results"; return; }
      echo "$name: waiting for $((need_kib >> 20)) GiB available (now $(($(mem_available_kib) >> 20)) GiB)" >&2
      sleep 30; waited=$((waited + 30))
    done
  fi
  local avail_mib=$(($(mem_available_kib) >> 10)) load
  load=$(cut -d' ' -f1-3 /proc/loadavg)
  rm -rf "$out/runs/$name"
  local start end
  start=$(date +%s.%N)
  # shellcheck disable=SC2046
  /usr/bin/time -v -o "$log.time" "$TRAINER" base.yml $(shape "$model") $(column_keys "$column") \
    steps=2 gradient_accumulation_steps=2 per_device_batch_size=1 max_target_length=512 dataset_type=synthetic \
    enable_checkpointing=false gradient_noise_scale=false eval_interval=-1 log_period=1 learning_rate=1e-5 \
    run_name="$name" base_output_directory="$out/runs" ${TRAINER_KEYS:-} > "$log" 2>&1 &
  local timer=$! watchdog=""
  while kill -0 "$timer" 2>/dev/null; do
    if (($(mem_available_kib) < $(awk -v g="$floor_gib" 'BEGIN{printf "%d", g*2^20}'))); then
      local child
      child=$(pgrep -P "$timer" || true)
      [ -n "$child" ] && kill -KILL "$child" 2>/dev/null || true
      watchdog="MemAvailable under $floor_gib GiB"
      echo "$name: watchdog stopped the trainer ($watchdog)" >&2
      break
    fi
    sleep 0.5
  done
  local rc=0
  wait "$timer" || rc=$?
  end=$(date +%s.%N)
  local wall rss status step_s tracked
  wall=$(awk -v a="$start" -v b="$end" 'BEGIN{printf "%.0f", b-a}')
  rss=$(awk -F': ' '/Maximum resident set size/{printf "%d", $2/1024}' "$log.time" 2>/dev/null || true)
  local metrics=$out/runs/$name/metrics.jsonl
  if [ -n "$watchdog" ]; then status="watchdog"
  elif ((rc == 0)) && [ -f "$metrics" ]; then status="ok"
  elif ((rc == 2)) && grep -q "does not fit, found before allocating" "$log"; then status="does_not_fit"
  else status="failed_rc$rc"; fi
  step_s="" tracked=""
  if [ "$status" = ok ]; then
    step_s=$("$SHADOWGRAD_PYTHON" -c 'import json,sys; print(" ".join("%.1f" % json.loads(l)["step_time_s"] for l in open(sys.argv[1])))' "$metrics")
    tracked=$("$SHADOWGRAD_PYTHON" -c 'import json,sys; print(int(json.load(open(sys.argv[1]))["peak_mem_bytes"])>>20)' "$out/runs/$name/summary.json")
  fi
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$model" "$column" "$status" "$rss" "$tracked" "$wall" "$step_s" \
    "$avail_mib" "$load" >> "$results"
  echo "$name: $status, peak RSS ${rss:-?} MiB, tracked peak ${tracked:--} MiB, ${wall} s (steps: ${step_s:--})," \
       "MemAvailable at start $avail_mib MiB, load $load" >&2
}

echo "$(date -u '+%Y-%m-%d %H:%M UTC'), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores," \
     "$((total_kib >> 20)) GiB, $(grep -qE 'amx_bf16' /proc/cpuinfo && echo 'AMX bf16' || echo 'no AMX')" | tee -a "$out/header.txt" >&2
for model in ${models//,/ }; do
  for column in ${columns//,/ }; do
    if [ -f "$results" ] && awk -F'\t' -v m="$model" -v c="$column" '$1==m && $2==c && $3!="skipped"{f=1} END{exit !f}' "$results"; then
      echo "$model-$column: done before (in $results)" >&2; continue
    fi
    run_cell "$model" "$column"
  done
done
"$SHADOWGRAD_PYTHON" - "$results" > "$out/table.md" <<'PY'
import sys
names = {"smol135m": "SmolLM2-135M (real)", "smol360m": "SmolLM2-360M", "llama1b": "Llama-3.2-1B",
         "smol1.7b": "SmolLM2-1.7B", "llama3b": "Llama-3.2-3B", "llama8b": "Llama-3.1-8B"}
cols = ["full", "lora", "lora_bf16"]
cells = {}
for line in open(sys.argv[1]):
    f = line.rstrip("\n").split("\t")
    model, col, status, rss, tracked, wall, steps = f[:7]
    if status == "ok":
        text = f"{int(rss) / 1024:.2f} GiB ({wall} s)"
    elif status == "does_not_fit":
        text = "does not fit"
    else:
        text = status.replace("_", " ")
    cells[(model, col)] = text
print("| shape | full fine-tuning, leanest | LoRA r=16, fp32 base | LoRA r=16, bf16 base |")
print("|---|---|---|---|")
for m, name in names.items():
    if any((m, c) in cells for c in cols):
        print(f"| {name} | " + " | ".join(cells.get((m, c), "-") for c in cols) + " |")
PY
cat "$out/table.md"
