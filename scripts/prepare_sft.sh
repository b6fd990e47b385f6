#!/usr/bin/env bash
# Intent: turn instruction data (JSONL, a JSON list, or Parquet) into the binary SFT file dataset_type=sft reads
# (docs/data.md).
# Cost: tokenizing is the only work: seconds for a few thousand examples (a Hugging Face tokenizer loads in ~1 s).
#
# Usage: scripts/prepare_sft.sh IN OUT [--tokenizer MODEL_DIR] [--max-length N] [--long truncate|drop]
#   IN: JSON Lines, a JSON list of objects, or Parquet; OUT's directory is created.
#   Forms: {"prompt","completion"} as text (prompt + completion tokenized as one string, as TRL 1.16 does), or as
#   lists of messages (TRL's conversational prompt/completion);
#   {"messages":[...]} and ShareGPT {"conversations":[{"from","value"}]} through MODEL_DIR's chat template (assistant
#   turns are the targets); Alpaca {"instruction","input","output"}; {"text"} (every token a target: continued
#   pretraining); pre-tokenized {"input_ids","labels"} (-100: not a target).
#   MODEL_DIR: a Hugging Face model directory (tokenizer.json) or a SentencePiece tokenizer.model (build/tokenize's).
#   --max-length N truncates (or, with --long drop, drops) examples over N tokens; by default the trainer does it.
# Prints examples, tokens, target tokens, and how many were truncated or dropped and why.
# Exit: 0 ok; 2 a bad row (FILE:LINE or FILE:row N, and the field), bad usage, or no example left.
set -euo pipefail
[[ ${1:-} != -h && ${1:-} != --help ]] || { sed -n '/^# Usage:/,/^# Exit:/s/^# \{0,1\}//p' "$0"; exit 0; }
SHADOWGRAD_VENV="${SHADOWGRAD_VENV:-$(cd "$(dirname "$0")/.." && pwd)/.venv}"
[[ -x $SHADOWGRAD_VENV/bin/python ]] || { echo "prepare_sft.sh: no venv at $SHADOWGRAD_VENV (run scripts/build.sh)" >&2; exit 2; }
exec "$SHADOWGRAD_VENV/bin/python" "$(dirname "$0")/lib/prepare_sft.py" "$@"
