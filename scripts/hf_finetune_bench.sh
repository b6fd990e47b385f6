#!/usr/bin/env bash
# Intent: fine-tuning a Hugging Face model, the trainer against the loop a transformers user writes
# (bench/hf_finetune_loop.py: LlamaForCausalLM with SDPA, AdamW(fused=True), loss / K into .grad), eager and under
# torch.compile, in alternating rounds: each round runs every arm once, as fresh processes. Prints per-run tokens/s
# (steps after the first) and peak RSS (/usr/bin/time), then the median and range over the rounds, and each arm's
# ratio to the trainer taken within a round (docs/performance.md, "Fine-tuning a Hugging Face model"). Compute is
# fp32, or bf16 on a CPU with avx512_bf16 or AMX: the trainer's dtype=auto, the loop's torch.autocast.
# Cost: with the defaults (SmolLM2-135M, K=4 x 1 x 512 tokens, 3 steps, 3 rounds, 3 arms) about 15-25 min on 2 cores.
# Usage: scripts/hf_finetune_bench.sh [--model DIR] [--tokens FILE] [--rounds N] [--steps N] [--k K] [--arms LIST]
#   defaults: models/SmolLM2-135M-Instruct (scripts/prepare_model.sh), data/smol/train.bin
#   (scripts/prepare_data.sh --model-dir ... --out data/smol), 3 rounds, 3 steps, K=4, arms trainer,eager,compile.
#   Extra trainer keys go in TRAINER_KEYS (e.g. TRAINER_KEYS="grad_dtype=float32"); TRAINER=PATH uses that binary
#   instead of building build/trainer.
set -euo pipefail
[[ ${1:-} != -h && ${1:-} != --help ]] || { sed -n '2,/^set /{/^#/s/^# \{0,1\}//p}' "$0"; exit 0; }
source "$(dirname "$0")/lib/setup.sh"
model=models/SmolLM2-135M-Instruct tokens=data/smol/train.bin rounds=3 steps=3 k=4 arms=trainer,eager,compile
while (($#)); do
  case $1 in
    --model) model=$2 ;; --tokens) tokens=$2 ;; --rounds) rounds=$2 ;; --steps) steps=$2 ;; --k) k=$2 ;;
    --arms) arms=$2 ;; *) echo "unknown option $1" >&2; exit 2 ;;
  esac
  shift 2
done
[ -f "$model/config.json" ] && [ -f "$tokens" ] || { echo "need $model (prepare_model.sh) and $tokens (prepare_data.sh --model-dir)" >&2; exit 2; }
[ -n "${TRAINER:-}" ] || { build_shadowgrad trainer >&2; TRAINER=$SHADOWGRAD_ROOT/build/trainer; }
# The loop's twin of the trainer's dtype=auto (src/util/NativeBf16.cpp reads the same flags through torch's cpuinfo).
autocast=$(grep -qE 'avx512_bf16|amx_bf16' /proc/cpuinfo && echo --bf16 || true)
out=$(mktemp -d /tmp/hf_finetune_bench.XXXXXX)
results=$out/results.tsv
run_arm() {  # arm round -> appends "arm round tokens_per_s peak_kib" to results
  local arm=$1 round=$2 log=$out/$1-$2.log
  case $arm in
    trainer)
      /usr/bin/time -f "peak_kib %M" -o "$log.time" "$TRAINER" base.yml \
        load_parameters_path="$model" dataset_type=tokens dataset_path="$tokens" max_target_length=512 \
        per_device_batch_size=1 gradient_accumulation_steps="$k" grad_dtype=bfloat16 steps="$steps" learning_rate=1e-5 \
        warmup_steps_fraction=0 enable_checkpointing=false gradient_noise_scale=false log_period=1 \
        run_name="r$round" base_output_directory="$out/runs" ${TRAINER_KEYS:-} > "$log" 2>&1
      tps=$("$SHADOWGRAD_PYTHON" -c 'import json,sys
rows=[json.loads(l) for l in open(sys.argv[1])][1:]
print(sum(r["input_tokens"] for r in rows) / sum(r["step_time_s"] for r in rows))' "$out/runs/r$round/metrics.jsonl") ;;
    eager|compile)
      /usr/bin/time -f "peak_kib %M" -o "$log.time" "$SHADOWGRAD_PYTHON" "$SHADOWGRAD_ROOT/bench/hf_finetune_loop.py" \
        "$model" "$tokens" --steps "$steps" --k "$k" $([ "$arm" = compile ] && echo --compile) $autocast > "$log" 2>&1
      tps=$(awk '/^tokens_per_s/{print $2}' "$log") ;;
  esac
  printf '%s\t%s\t%s\t%s\n' "$arm" "$round" "$tps" "$(awk '/peak_kib/{print $2}' "$log.time")" >> "$results"
  echo "round $round $arm: $tps tokens/s, peak $(awk '/peak_kib/{print int($2/1024)}' "$log.time") MiB" >&2
}
echo "$(date -u '+%Y-%m-%d %H:%M UTC'), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores, compute $([ -n "$autocast" ] && echo bf16 || echo fp32)" >&2
for ((r = 1; r <= rounds; r++)); do
  for arm in ${arms//,/ }; do run_arm "$arm" "$r"; done
done
"$SHADOWGRAD_PYTHON" - "$results" <<'PY'
import collections, statistics, sys
rows = [l.split("\t") for l in open(sys.argv[1]).read().split("\n") if l]
by = collections.defaultdict(dict)
for arm, rnd, tps, kib in rows:
    by[arm][rnd] = (float(tps), int(kib) / 1024)
def mr(xs, f=".3g"):
    return f"{statistics.median(xs):{f}} ({min(xs):{f}}-{max(xs):{f}})"
print("| arm | tokens/s | peak RSS MiB | tokens/s vs trainer | peak vs trainer |\n|---|---:|---:|---:|---:|")
for arm, runs in by.items():
    t = [v[0] for v in runs.values()]; m = [v[1] for v in runs.values()]
    rt = [runs[r][0] / by["trainer"][r][0] for r in runs if r in by.get("trainer", {})]
    rm = [runs[r][1] / by["trainer"][r][1] for r in runs if r in by.get("trainer", {})]
    print(f"| {arm} | {mr(t)} | {mr(m, '.0f')} | {mr(rt) if rt else '-'} | {mr(rm) if rm else '-'} |")
PY
