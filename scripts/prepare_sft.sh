#!/usr/bin/env bash
# Intent: turn a JSONL file of instruction data into the binary SFT file dataset_type=sft reads (docs/data.md).
# Cost: tokenizing is the only work: seconds for a few thousand examples (a Hugging Face tokenizer loads in ~2 s).
#
# Usage: scripts/prepare_sft.sh IN.jsonl OUT [--tokenizer MODEL_DIR] [--max-length N] [--long truncate|drop]
#   Forms: {"prompt","completion"}; {"messages":[...]} through MODEL_DIR's chat template (assistant turns are the
#   targets); Alpaca {"instruction","input","output"}; pre-tokenized {"input_ids","labels"} (-100: not a target).
#   MODEL_DIR: a Hugging Face model directory (tokenizer.json) or a SentencePiece tokenizer.model (build/tokenize's).
#   --max-length N truncates (or, with --long drop, drops) examples over N tokens; by default the trainer does it.
# Prints examples, tokens, target tokens, and how many were truncated or dropped and why.
# Exit: 0 ok; 2 a bad line (FILE:LINE named), bad usage, or no example left.
set -euo pipefail
[[ ${1:-} != -h && ${1:-} != --help ]] || { sed -n '/^# Usage:/,/^# Exit:/s/^# \{0,1\}//p' "$0"; exit 0; }
SHADOWGRAD_VENV="${SHADOWGRAD_VENV:-$(cd "$(dirname "$0")/.." && pwd)/.venv}"
[[ -x $SHADOWGRAD_VENV/bin/python ]] || { echo "prepare_sft.sh: no venv at $SHADOWGRAD_VENV (run scripts/build.sh)" >&2; exit 2; }
exec "$SHADOWGRAD_VENV/bin/python" "$(dirname "$0")/lib/prepare_sft.py" "$@"
