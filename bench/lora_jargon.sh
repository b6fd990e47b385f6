#!/usr/bin/env bash
# Intent: a real fine-tune (issue 43 §8, docs/lora.md "A real fine-tune"): SmolLM2-135M-Instruct taught the Jargon
# File's definitions (scripts/lib/jargon_sft.py: "what does TERM mean?" -> the entry's first paragraph; 2049 training
# and 117 held-out pairs), as chat turns through the model's own template, completion-only loss, packed into rows of
# 512 tokens. Three runs on the same examples in the same order: the base alone (lr 0, one step: its held-out loss),
# LoRA r=16 (alpha 32, all seven projections, fp32 base, lr 2e-4) and full fine-tuning (grad_dtype=bfloat16, lr 2e-5),
# at equal steps and tokens (K=8 x 1 x 512 per step), each evaluated on the whole held-out file. Then the adapter
# goes out through export_hf --adapter, peft loads it on the base (every tensor must land), its held-out loss is
# computed again in transformers, and the base, the LoRA model and the full fine-tune answer held-out prompts
# greedily: in the runs' samples.jsonl (eval_prompts_path), in transformers + peft, and through scripts/generate.sh
# (the base, the LoRA run directory, and the base with the exported adapter).
# Cost: fp32 on an AVX2-only 2-core EPYC (2026-12-05), ~55 tokens/s: --steps 20 took 3 min (base), 22 min (LoRA)
# and 26 min (full), plus ~3 min of Python; a CPU with AMX bf16 should be several times faster. ~1.5 GB under OUT.
#
# Usage: bench/lora_jargon.sh [--out DIR] [--steps N] [--lora-lr LR] [--full-lr LR] [--prompts N]
#   defaults: runs/lora_jargon, 50 steps (about one epoch), 2e-4, 2e-5, 3 held-out prompts answered
# Needs models/SmolLM2-135M-Instruct (scripts/prepare_model.sh) and Debian's dict-jargon (installed when missing).
set -euo pipefail
[[ ${1:-} != -h && ${1:-} != --help ]] || { sed -n '2,/^set /{/^#/s/^# \{0,1\}//p}' "$0"; exit 0; }
source "$(dirname "$0")/../scripts/lib/setup.sh"
out=runs/lora_jargon steps=50 lora_lr=2e-4 full_lr=2e-5 prompts=3 model=models/SmolLM2-135M-Instruct
while (($#)); do
  case $1 in
    --out) out=$2 ;; --steps) steps=$2 ;; --lora-lr) lora_lr=$2 ;; --full-lr) full_lr=$2 ;; --prompts) prompts=$2 ;;
    *) echo "lora_jargon.sh: unknown option $1" >&2; exit 2 ;;
  esac
  shift 2
done
[ -f "$model/model.safetensors" ] || { echo "lora_jargon.sh: no $model (scripts/prepare_model.sh)" >&2; exit 2; }
install_missing_packages dict-jargon
[ -n "${TRAINER:-}" ] || { build_shadowgrad trainer export_hf >&2; TRAINER=$SHADOWGRAD_ROOT/build/trainer; }
EXPORT_HF=${EXPORT_HF:-$(dirname "$TRAINER")/export_hf}
data=$out/data
mkdir -p "$data"
# The pairs as bench/prepare_jargon_sft.sh makes them, then as chat turns for an instruct model.
python3 "$SHADOWGRAD_ROOT/scripts/lib/jargon_sft.py" "$data/pairs" >&2
"$SHADOWGRAD_PYTHON" - "$data" <<'PY'
import json, sys
d = sys.argv[1]
for split in ("train", "val"):
    with open(f"{d}/pairs/{split}.jsonl") as f, open(f"{d}/{split}.jsonl", "w") as g:
        for line in f:
            r = json.loads(line)
            question = r["prompt"].removeprefix("Q: ").removesuffix("\nA:")
            g.write(json.dumps({"messages": [{"role": "user", "content": question},
                                             {"role": "assistant", "content": r["completion"].strip()}]}) + "\n")
PY
for split in train val; do
  "$SHADOWGRAD_ROOT/scripts/prepare_sft.sh" "$data/$split.jsonl" "$data/$split.sft" --tokenizer "$model" >&2
done
# The first held-out questions as eval_prompts_path: each run writes its greedy answers to samples.jsonl at each eval.
"$SHADOWGRAD_ROOT/scripts/prepare_prompts.sh" "$data/val.jsonl" "$data/prompts.jsonl" --tokenizer "$model" \
  --limit "$prompts" >&2

common="load_parameters_path=$model dataset_type=sft dataset_path=$data/train.sft eval_dataset_path=$data/val.sft
  max_target_length=512 per_device_batch_size=1 gradient_accumulation_steps=8 eval_per_device_batch_size=4
  gradient_noise_scale=false log_period=5 base_output_directory=$out/runs checkpoint_period=1000000
  eval_prompts_path=$data/prompts.jsonl eval_prompts_max_new=80"
train() {  # name steps eval_interval keys... -> the run directory, its log, and its eval_loss lines
  local name=$1 n=$2 every=$3
  shift 3
  rm -rf "$out/runs/$name"
  local start=$SECONDS
  # shellcheck disable=SC2086
  /usr/bin/time -f "peak_kib %M" -o "$out/$name.time" "$TRAINER" base.yml $common run_name="$name" steps="$n" \
    eval_interval="$every" "$@" > "$out/$name.log" 2>&1
  echo "$name: $((SECONDS - start)) s, peak RSS $(awk '/peak_kib/{print int($2/1024)}' "$out/$name.time") MiB," \
       "load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
}
lora_keys="lora_rank=16 lora_alpha=32 lora_target_modules=all-linear"
# The base's held-out loss: one step at learning rate 0 changes nothing (B is zero, so the adapted model is the base).
train base 1 1 $lora_keys learning_rate=0 enable_checkpointing=false
train lora "$steps" $((steps / 2)) $lora_keys learning_rate="$lora_lr" grad_dtype=bfloat16
train full "$steps" $((steps / 2)) learning_rate="$full_lr" grad_dtype=bfloat16
rm -rf "$out/adapter" "$out/full-hf"
"$EXPORT_HF" "$out/runs/lora" "$out/adapter" --adapter >&2
"$EXPORT_HF" "$out/runs/full" "$out/full-hf" --dtype float32 >&2

"$SHADOWGRAD_PYTHON" - "$out" "$model" "$prompts" <<'PY'
# The trainer's eval_loss lines, then peft's own reading of the exported adapter: the held-out completion loss in
# transformers (sum over completion tokens / their count, as the trainer's eval), and greedy answers.
import json, re, sys
import torch, transformers, peft
transformers.utils.logging.set_verbosity_error()
out, base_dir, n_prompts = sys.argv[1], sys.argv[2], int(sys.argv[3])
torch.set_num_threads(2)
for run in ("base", "lora", "full"):
    rows = [json.loads(l) for l in open(f"{out}/runs/{run}/metrics.jsonl")]
    evals = [(r["step"], r["eval_loss"]) for r in rows if r.get("eval_loss") is not None]
    toks = sum(r.get("input_tokens", 0) for r in rows)
    secs = sum(r["step_time_s"] for r in rows)
    print(f"{run}: eval_loss by step {evals}; train loss first/last {rows[0]['loss']:.4f}/{rows[-1]['loss']:.4f}; "
          f"{len(rows)} steps, {toks} input tokens, {secs:.0f} s of steps")
tok = transformers.AutoTokenizer.from_pretrained(base_dir)
val = [json.loads(l)["messages"] for l in open(f"{out}/data/val.jsonl")]
def held_out_loss(model):
    total, count = 0.0, 0
    with torch.no_grad():
        for m in val:
            prompt = tok.apply_chat_template(m[:1], add_generation_prompt=True, tokenize=False)
            full = tok.apply_chat_template(m, tokenize=False)
            p = tok(prompt, add_special_tokens=False)["input_ids"]
            ids = tok(full, add_special_tokens=False)["input_ids"]
            x = torch.tensor([ids])
            logits = model(input_ids=x).logits[0, :-1].float()
            labels = x[0, 1:].clone()
            labels[: len(p) - 1] = -100  # the prompt (system + user turns and the assistant header) carries no loss
            total += torch.nn.functional.cross_entropy(logits, labels, ignore_index=-100, reduction="sum").item()
            count += int((labels != -100).sum())
    return total / count
base = transformers.AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32).eval()
print(f"transformers, base: held-out completion loss {held_out_loss(base):.4f}")
lora = peft.PeftModel.from_pretrained(transformers.AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32),
                                      f"{out}/adapter").eval()
exported = __import__("safetensors.torch", fromlist=["load_file"]).load_file(f"{out}/adapter/adapter_model.safetensors")
landed = sum(1 for n, p in lora.named_parameters() if "lora_" in n)
print(f"peft: {len(exported)} tensors in the adapter file, {landed} LoRA tensors in the PeftModel; "
      f"nonzero lora_B: {sum(1 for n, p in lora.named_parameters() if 'lora_B' in n and p.abs().sum() > 0)}")
print(f"transformers + peft, exported adapter: held-out completion loss {held_out_loss(lora):.4f}")
full = transformers.AutoModelForCausalLM.from_pretrained(f"{out}/full-hf", dtype=torch.float32).eval()
print(f"transformers, full fine-tune export: held-out completion loss {held_out_loss(full):.4f}")
def answer(model, m):
    ids = tok.apply_chat_template(m[:1], add_generation_prompt=True, return_tensors="pt", return_dict=True)
    with torch.no_grad():
        g = model.generate(**ids, max_new_tokens=80, do_sample=False, pad_token_id=tok.eos_token_id)
    return tok.decode(g[0, ids["input_ids"].shape[1]:], skip_special_tokens=True).strip()
for m in val[:n_prompts]:
    print(f"\nQ: {m[0]['content']}\nreference: {m[1]['content']}")
    for name, model in (("base", base), ("LoRA (peft, exported adapter)", lora), ("full fine-tune", full)):
        print(f"{name}: {answer(model, m)}")
PY

# The same first held-out question through scripts/generate.sh: the base, the LoRA run, the base plus the adapter.
question=$("$SHADOWGRAD_PYTHON" -c 'import json,sys; print(json.loads(open(sys.argv[1]).readline())["messages"][0]["content"])' \
  "$data/prompts.jsonl")
echo
echo "scripts/generate.sh --template --max-new 80, Q: $question"
for source in "$model" "$out/runs/lora" "$model --adapter $out/adapter"; do
  # shellcheck disable=SC2086
  echo "[$source] $("$SHADOWGRAD_ROOT/scripts/generate.sh" $source --prompt "$question" --template --max-new 80)"
done
