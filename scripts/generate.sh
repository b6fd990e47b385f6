#!/usr/bin/env bash
# Intent: see what a model says: text in, text out, through the model's own tokenizer and chat template, from a run
# directory, a Hugging Face model directory or a base plus a peft adapter (docs/generate.md).
# Cost: ~1 s for the tokenizer (transformers without torch: scripts/lib/hf_tokenizer.py), then the model load and
# build/generate's speed.
#
# Usage: scripts/generate.sh SOURCE (--prompt TEXT [--template] | --prompts FILE.jsonl [--out OUT.jsonl] | --chat)
#          [--step N] [--adapter DIR] [--tokenizer DIR] [--max-new N] [--temperature T] [--top-k K] [--top-p P]
#          [--seed S] [--system TEXT] [--max-length N] [--dtype float32|bfloat16] [--verbose]
#   SOURCE: a run directory (latest checkpoint or --step N; LoRA runs too) or a Hugging Face model directory.
#   Greedy unless --temperature > 0; stops at the tokenizer's EOS and generation_config.json's EOS ids, or --max-new.
# Exit: 0 ok; 1 failure; 2 bad input (empty or too long prompt, token id outside the vocabulary, adapter for another
# base, bad JSONL line); Ctrl-C in --chat ends with 0.
set -euo pipefail
[[ ${1:-} != -h && ${1:-} != --help ]] || { sed -n '/^# Usage:/,/^# Exit:/s/^# \{0,1\}//p' "$0"; exit 0; }
SHADOWGRAD_VENV="${SHADOWGRAD_VENV:-$(cd "$(dirname "$0")/.." && pwd)/.venv}"
[[ -x $SHADOWGRAD_VENV/bin/python ]] || { echo "generate.sh: no venv at $SHADOWGRAD_VENV (run scripts/build.sh)" >&2; exit 2; }
exec "$SHADOWGRAD_VENV/bin/python" "$(dirname "$0")/lib/generate.py" "$@"
