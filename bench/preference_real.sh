#!/usr/bin/env bash
# Intent: a real preference run (issue 55 §8, docs/preference.md "A real preference run"): SmolLM2-135M-Instruct with
# LoRA (r=16, alpha 32, all seven projections) tuned by DPO (sigmoid, beta 0.1) on pairs from a real instruction
# set, the Jargon File (scripts/lib/jargon_sft.py: "what does TERM mean?" -> the entry's first paragraph, here cut
# near 300 characters). Chosen = the Jargon File's own answer; rejected = the base model's greedy answer to the same
# question through scripts/generate.sh (chat template, --max-new 64). --train pairs from the Jargon training split
# (spread over the alphabet) train; --eval pairs from its held-out split are evaluated (eval_rewards_accuracy and
# the other eval_* metrics) every --eval-interval steps and after the last. K=4 microbatches of 1 pair, packed into
# rows of 256 tokens, fp32. Then the adapter goes out through export_hf --adapter and the base with it answers the
# first three held-out questions through scripts/generate.sh, beside the base's answers (the rejected ones).
# "Before": at step 0 the policy is the reference, so every reward is 0 and eval_rewards_accuracy is 0 by TRL's
# definition (chosen > rejected, strictly); the summary also gives, from the stored reference log-probs, how many
# held-out pairs the base itself scores higher on the chosen answer.
# Cost: fp32 on the AVX2-only 2-core EPYC, shared with other builds at load 5-7 (2026-12-07): 321 s to generate the
# 52 rejected answers (reused on a re-run), 1154 s for the trainer (the reference pass 166 s, 30 steps 738 s at 33
# tokens/s, 6 evaluations), ~40 s for the rest; on a quiet machine about half. ~80 MB under OUT.
#
# Usage: bench/preference_real.sh [--out DIR] [--bin DIR] [--config YML] [--train N] [--eval N] [--steps N]
#                                 [--lr LR] [--eval-interval N] [--threads N]
#   defaults: runs/preference_real, build/, 40 train and 12 held-out pairs, 30 steps (3 epochs of K=4 pairs),
#   learning rate 1e-4 (cosine, 10 % warmup), an evaluation every 5 steps, 2 threads.
#   --bin DIR: where trainer, export_hf and generate are (copies of build/'s, so a rebuild cannot move them);
#   --config YML: the trainer's config (default base.yml; one that matches an older copy of the trainer).
# Needs models/SmolLM2-135M-Instruct (scripts/prepare_model.sh) and Debian's dict-jargon (installed when missing).
# Writes OUT/summary.txt (also printed).
set -euo pipefail
[[ ${1:-} != -h && ${1:-} != --help ]] || { sed -n '2,/^set /{/^#/s/^# \{0,1\}//p}' "$0"; exit 0; }
source "$(dirname "$0")/../scripts/lib/setup.sh"
out=runs/preference_real bin=$SHADOWGRAD_ROOT/build config=base.yml
n_train=40 n_eval=12 steps=30 lr=1e-4 every=5 threads=2
model=models/SmolLM2-135M-Instruct
while (($#)); do
  (($# >= 2)) || { echo "preference_real.sh: $1 needs a value" >&2; exit 2; }
  case $1 in
    --out) out=$2 ;; --bin) bin=$2 ;; --config) config=$2 ;;
    --train) n_train=$2 ;; --eval) n_eval=$2 ;; --steps) steps=$2 ;;
    --lr) lr=$2 ;; --eval-interval) every=$2 ;; --threads) threads=$2 ;;
    *) echo "preference_real.sh: unknown option $1" >&2; exit 2 ;;
  esac
  shift 2
done
[ -f "$model/model.safetensors" ] || { echo "preference_real.sh: no $model (scripts/prepare_model.sh)" >&2; exit 2; }
for b in trainer export_hf generate; do
  [ -x "$bin/$b" ] || { echo "preference_real.sh: no $bin/$b (scripts/build.sh, or --bin DIR)" >&2; exit 2; }
done
install_missing_packages dict-jargon
export SHADOWGRAD_GENERATE=$bin/generate  # scripts/generate.sh's model process
data=$out/data
mkdir -p "$data"
log() { echo "[$(date -u +%H:%M:%S)] $* (load $(cut -d' ' -f1-3 /proc/loadavg))" >&2; }

# 1. Questions and reference answers: every k-th Jargon entry of each split, as chat messages.
python3 "$SHADOWGRAD_ROOT/scripts/lib/jargon_sft.py" "$data/jargon" --max-chars 300 >&2
"$SHADOWGRAD_PYTHON" - "$data" "$n_train" "$n_eval" <<'PY'
import json, sys
d, n = sys.argv[1], {"train": int(sys.argv[2]), "val": int(sys.argv[3])}
with open(f"{d}/questions.jsonl", "w") as g:
    for split in ("train", "val"):
        rows = [json.loads(l) for l in open(f"{d}/jargon/{split}.jsonl")]
        step = max(1, len(rows) // n[split])
        for r in rows[::step][: n[split]]:
            q = r["prompt"].removeprefix("Q: ").removesuffix("\nA:")
            g.write(json.dumps({"split": split, "reference": r["completion"].strip(),
                                "messages": [{"role": "user", "content": q}]}) + "\n")
PY

# 2. The base model's greedy answers (the rejected side), kept across re-runs of the same questions.
want=$(wc -l < "$data/questions.jsonl")
if ! cmp -s "$data/questions.jsonl" "$data/answered_questions.jsonl" || [ ! -s "$data/base_answers.jsonl" ]; then
  log "generating the base model's answers to $want questions"
  start=$SECONDS
  "$SHADOWGRAD_ROOT/scripts/generate.sh" "$model" --prompts "$data/questions.jsonl" --out "$data/base_answers.jsonl" \
    --max-new 64 >/dev/null
  cp "$data/questions.jsonl" "$data/answered_questions.jsonl"
  log "base answers: $((SECONDS - start)) s"
fi

# 3. Conversational pairs (TRL's form): prompt = the user turn, chosen / rejected = one assistant turn each.
"$SHADOWGRAD_PYTHON" - "$data" <<'PY'
import json, sys
d = sys.argv[1]
files = {s: open(f"{d}/{s}.jsonl", "w") for s in ("train", "val")}
for line in open(f"{d}/base_answers.jsonl"):
    r = json.loads(line)
    if not r["completion"].strip():
        continue
    files[r["split"]].write(json.dumps({"prompt": r["messages"],
                                        "chosen": [{"role": "assistant", "content": r["reference"]}],
                                        "rejected": [{"role": "assistant",
                                                      "content": r["completion"].strip()}]}) + "\n")
PY
for split in train val; do
  "$SHADOWGRAD_ROOT/scripts/prepare_preference.sh" "$data/$split.jsonl" "$data/$split.pair" --tokenizer "$model" \
    --max-length 256 >&2
done

# 4. DPO with LoRA; a finished run of the same command is kept.
run=$out/runs/dpo
cmd=("$bin/trainer" "$config" load_parameters_path="$model"
  dataset_type=preference use_dpo=true dpo_beta=0.1 dpo_loss_type=sigmoid
  dataset_path="$data/train.pair" eval_dataset_path="$data/val.pair" max_target_length=256
  lora_rank=16 lora_alpha=32 lora_target_modules=all-linear
  per_device_batch_size=1 gradient_accumulation_steps=4 eval_per_device_batch_size=4
  steps="$steps" eval_interval="$every" eval_on_start=true learning_rate="$lr" adam_weight_decay=0 dtype=float32 num_threads="$threads"
  gradient_noise_scale=false log_period=5 checkpoint_period=1000000
  base_output_directory="$out/runs" run_name=dpo)
if [[ "$(cat "$out/dpo.cmd" 2>/dev/null)" == "${cmd[*]}" ]] && grep -q '\] done:' "$out/dpo.log" 2>/dev/null; then
  log "training: kept the finished run $run"
else
  rm -rf "$run"
  log "training: $steps steps"
  start=$SECONDS
  /usr/bin/time -f "peak_kib %M" -o "$out/dpo.time" "${cmd[@]}" > "$out/dpo.log" 2>&1
  echo "${cmd[*]}" > "$out/dpo.cmd"
  log "training: $((SECONDS - start)) s, peak RSS $(awk '/peak_kib/{print int($2/1024)}' "$out/dpo.time") MiB"
fi

# 5. The adapter out through export_hf, and the base with it on the first three held-out questions.
rm -rf "$out/adapter"
"$bin/export_hf" "$run" "$out/adapter" --adapter >&2
"$SHADOWGRAD_PYTHON" -c '
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if json.loads(l)["split"] == "val"]
for r in rows[:3]: print(json.dumps(r))' "$data/base_answers.jsonl" > "$data/heldout3.jsonl"
"$SHADOWGRAD_ROOT/scripts/generate.sh" "$model" --adapter "$out/adapter" --prompts "$data/heldout3.jsonl" \
  --out "$out/after_answers.jsonl" --max-new 64 >/dev/null

# 6. The figures.
"$SHADOWGRAD_PYTHON" - "$out" "$run" <<'PY' | tee "$out/summary.txt"
import json, struct, sys
out, run = sys.argv[1], sys.argv[2]
rows = [json.loads(l) for l in open(f"{run}/metrics.jsonl")]
train = [r for r in rows if "rewards_accuracy" in r]
secs = sum(r["step_time_s"] for r in train)
toks = sum(r["input_tokens"] for r in train)
print(f"{len(train)} steps, {toks:.0f} input tokens (prompt + answer, both sequences of each pair), {secs:.0f} s of "
      f"steps, {toks / secs:.1f} tokens/s")
print(f"train loss first/last {train[0]['loss']:.4f}/{train[-1]['loss']:.4f}; train rewards_accuracy first/last "
      f"{train[0]['rewards_accuracy']:.3f}/{train[-1]['rewards_accuracy']:.3f}")
blob = open(f"{run}/reference_logps.eval.bin", "rb").read()
n_eval, _, chunks = struct.unpack_from("<QQQ", blob, 40)  # pairs, pairs a microbatch, microbatches
ref = struct.unpack_from(f"<{2 * n_eval}d", blob, 64 + (chunks + 7) // 8 * 8)  # chosen, rejected of each pair
prefers = sum(ref[2 * k] > ref[2 * k + 1] for k in range(n_eval))
print(f"step 0 (policy = reference): eval_rewards_accuracy 0 by definition (every reward is 0); the base scores the "
      f"chosen answer above the rejected on {prefers} of {n_eval} held-out pairs (summed log-probs)")
print("step  eval_loss  eval_rewards_accuracy  eval_rewards_margin  eval_rewards_chosen  eval_rewards_rejected  "
      "eval_logps_chosen  eval_logps_rejected")
for r in rows:
    if "eval_rewards_accuracy" in r:
        print(f"{int(r['step']):4d}  {r['eval_loss']:9.4f}  {r['eval_rewards_accuracy']:21.3f}  "
              f"{r['eval_rewards_margin']:19.3f}  {r['eval_rewards_chosen']:19.3f}  "
              f"{r['eval_rewards_rejected']:21.3f}  "
              f"{r['eval_logps_chosen']:17.2f}  {r['eval_logps_rejected']:19.2f}")
for b, a in zip(open(f"{out}/data/heldout3.jsonl"), open(f"{out}/after_answers.jsonl")):
    b, a = json.loads(b), json.loads(a)
    print(f"\nQ: {b['messages'][0]['content']}\nJargon File: {b['reference']}\nbase (greedy, 64 new tokens max): "
          f"{b['completion'].strip()}\nafter DPO (base + exported adapter, scripts/generate.sh): "
          f"{a['completion'].strip()}")
PY
