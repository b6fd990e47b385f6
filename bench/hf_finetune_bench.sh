#!/usr/bin/env bash
# Intent: fine-tuning a Hugging Face model, the trainer against the loop a transformers user writes
# (bench/hf_finetune_loop.py: LlamaForCausalLM with SDPA, AdamW(fused=True), loss / K into .grad), eager and under
# torch.compile, in alternating rounds: each round runs every arm once, as fresh processes. Prints per-run tokens/s
# (steps after the first) and peak RSS (/usr/bin/time), then the median and range over the rounds, and each arm's
# ratio to the trainer taken within a round (docs/performance.md, "Fine-tuning a Hugging Face model"). Compute is
# fp32, or bf16 on a CPU with avx512_bf16 or AMX: the trainer's dtype=auto, the loop's torch.autocast.
# LoRA (docs/lora.md, "Speed"): the arms trainer_lora (lora_rank=R lora_alpha=2R, all seven projections, the base
# frozen in fp32) and trainer_lora_bf16 (the same, weight_dtype=bfloat16) against peft and peft_compile (the same loop
# through peft.get_peft_model with the same LoraConfig, AdamW over the adapters), e.g.
#   bench/hf_finetune_bench.sh --arms trainer,trainer_lora,peft,peft_compile
# Ratios: peft arms to trainer_lora, trainer_lora(_bf16) to trainer, eager/compile to trainer, within a round. The
# trainer arms also print where a step's time goes (metrics.jsonl: forward_s, backward_s, fold_s, optimizer_s).
# Cost: with the defaults (SmolLM2-135M, K=4 x 1 x 512 tokens, 3 steps, 3 rounds, 3 arms) about 15-25 min on 2 cores;
# each further arm adds about a third (2026-12-04, AMX bf16, loaded: see docs/lora.md).
# Usage: bench/hf_finetune_bench.sh [--model DIR] [--tokens FILE] [--rounds N] [--steps N] [--k K] [--arms LIST]
#                                     [--lora-rank R]
#   defaults: models/SmolLM2-135M-Instruct (scripts/prepare_model.sh), data/smol/train.bin
#   (scripts/prepare_data.sh --model-dir ... --out data/smol), 3 rounds, 3 steps, K=4, arms trainer,eager,compile,
#   LoRA rank 16.
#   Extra trainer keys go in TRAINER_KEYS (e.g. TRAINER_KEYS="grad_dtype=float32"); TRAINER=PATH uses that binary
#   instead of building build/trainer.
set -euo pipefail
[[ ${1:-} != -h && ${1:-} != --help ]] || { sed -n '2,/^set /{/^#/s/^# \{0,1\}//p}' "$0"; exit 0; }
source "$(dirname "$0")/../scripts/lib/setup.sh"
model=models/SmolLM2-135M-Instruct tokens=data/smol/train.bin rounds=3 steps=3 k=4 arms=trainer,eager,compile rank=16
while (($#)); do
  case $1 in
    --model) model=$2 ;; --tokens) tokens=$2 ;; --rounds) rounds=$2 ;; --steps) steps=$2 ;; --k) k=$2 ;;
    --arms) arms=$2 ;; --lora-rank) rank=$2 ;; *) echo "unknown option $1" >&2; exit 2 ;;
  esac
  shift 2
done
[ -f "$model/config.json" ] && [ -f "$tokens" ] || { echo "need $model (prepare_model.sh) and $tokens (prepare_data.sh --model-dir)" >&2; exit 2; }
[ -n "${TRAINER:-}" ] || { build_shadowgrad trainer >&2; TRAINER=$SHADOWGRAD_ROOT/build/trainer; }
# The loop's twin of the trainer's dtype=auto (src/util/NativeBf16.cpp reads the same flags through torch's cpuinfo).
autocast=$(grep -qE 'avx512_bf16|amx_bf16' /proc/cpuinfo && echo --bf16 || true)
out=$(mktemp -d /tmp/hf_finetune_bench.XXXXXX)
results=$out/results.tsv
lora_keys="lora_rank=$rank lora_alpha=$((2 * rank)) lora_target_modules=all-linear"
run_arm() {  # arm round -> appends "arm round tokens_per_s peak_kib [forward backward fold optimizer]" to results
  local arm=$1 round=$2 log=$out/$1-$2.log parts=""
  case $arm in
    trainer|trainer_lora|trainer_lora_bf16)
      local keys=""
      [ "$arm" = trainer ] || keys=$lora_keys
      [ "$arm" = trainer_lora_bf16 ] && keys="$keys weight_dtype=bfloat16"
      # shellcheck disable=SC2086
      /usr/bin/time -f "peak_kib %M" -o "$log.time" "$TRAINER" base.yml \
        load_parameters_path="$model" dataset_type=tokens dataset_path="$tokens" max_target_length=512 \
        per_device_batch_size=1 gradient_accumulation_steps="$k" grad_dtype=bfloat16 steps="$steps" learning_rate=1e-5 \
        warmup_steps_fraction=0 enable_checkpointing=false gradient_noise_scale=false log_period=1 \
        run_name="$arm-r$round" base_output_directory="$out/runs" $keys ${TRAINER_KEYS:-} > "$log" 2>&1
      read -r tps parts < <("$SHADOWGRAD_PYTHON" -c 'import json,sys
rows=[json.loads(l) for l in open(sys.argv[1])][1:]
print(sum(r["input_tokens"] for r in rows) / sum(r["step_time_s"] for r in rows),
      *("%.3f" % (sum(r[k] for r in rows) / len(rows)) for k in ("forward_s", "backward_s", "fold_s", "optimizer_s")))' \
        "$out/runs/$arm-r$round/metrics.jsonl") ;;
    eager|compile|peft|peft_compile)
      # shellcheck disable=SC2046
      /usr/bin/time -f "peak_kib %M" -o "$log.time" "$SHADOWGRAD_PYTHON" "$SHADOWGRAD_ROOT/bench/hf_finetune_loop.py" \
        "$model" "$tokens" --steps "$steps" --k "$k" $([[ $arm = *compile ]] && echo --compile) \
        $([[ $arm = peft* ]] && echo --lora "$rank") $autocast > "$log" 2>&1
      tps=$(awk '/^tokens_per_s/{print $2}' "$log") ;;
    *) echo "unknown arm $arm" >&2; exit 2 ;;
  esac
  printf '%s\t%s\t%s\t%s\t%s\n' "$arm" "$round" "$tps" "$(awk '/peak_kib/{print $2}' "$log.time")" "$parts" >> "$results"
  echo "round $round $arm: $tps tokens/s, peak $(awk '/peak_kib/{print int($2/1024)}' "$log.time") MiB${parts:+, step s: forward backward fold optimizer $parts}, load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
}
echo "$(date -u '+%Y-%m-%d %H:%M UTC'), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores, compute $([ -n "$autocast" ] && echo bf16 || echo fp32)" >&2
for ((r = 1; r <= rounds; r++)); do
  for arm in ${arms//,/ }; do run_arm "$arm" "$r"; done
done
"$SHADOWGRAD_PYTHON" - "$results" <<'PY'
import collections, statistics, sys
rows = [l.split("\t") for l in open(sys.argv[1]).read().split("\n") if l]
by = collections.defaultdict(dict)
parts = collections.defaultdict(list)
for arm, rnd, tps, kib, *rest in rows:
    by[arm][rnd] = (float(tps), int(kib) / 1024)
    if rest and rest[0].strip():
        parts[arm].append([float(x) for x in rest[0].split()])
def mr(xs, f=".3g"):
    return f"{statistics.median(xs):{f}} ({min(xs):{f}}-{max(xs):{f}})"
# Each arm against the arm it stands beside: a peft loop against the trainer's LoRA, the rest against the trainer.
def reference(arm):
    return "trainer_lora" if arm.startswith("peft") else "trainer"
print("| arm | tokens/s | peak RSS MiB | against | tokens/s ratio | peak ratio |\n|---|---:|---:|---|---:|---:|")
for arm, runs in by.items():
    ref = by.get(reference(arm), {})
    t = [v[0] for v in runs.values()]; m = [v[1] for v in runs.values()]
    rt = [runs[r][0] / ref[r][0] for r in runs if r in ref] if arm != reference(arm) else []
    rm = [runs[r][1] / ref[r][1] for r in runs if r in ref] if arm != reference(arm) else []
    print(f"| {arm} | {mr(t)} | {mr(m, '.0f')} | {reference(arm) if rt else '-'} | {mr(rt) if rt else '-'} | "
          f"{mr(rm) if rm else '-'} |")
if parts:
    print("\n| trainer arm | forward s | backward s | fold s | optimizer s | (mean per step after the first; median over rounds) |"
          "\n|---|---:|---:|---:|---:|---|")
    for arm, ps in parts.items():
        print(f"| {arm} | " + " | ".join(mr([p[i] for p in ps]) for i in range(4)) + " | |")
PY
