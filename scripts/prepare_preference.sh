#!/usr/bin/env bash
# Intent: turn preference pairs (prompt, chosen, rejected) into the binary pair file dataset_type=preference reads
# (docs/data.md, "The pair file").
# Cost: tokenizing is the only work: seconds for a few thousand pairs (a Hugging Face tokenizer loads in ~1 s).
#
# Usage: scripts/prepare_preference.sh IN OUT [--tokenizer MODEL_DIR] [--max-length N] [--long truncate|drop]
#   IN: JSONL, a JSON list of objects, or Parquet. Forms (TRL's, detected from the first row):
#   standard {"prompt","chosen","rejected"} as text (prompt + answer tokenized as one string as TRL 1.16 does, the
#   EOS appended to an answer that lacks it); conversational (prompt, chosen and rejected as lists of messages,
#   through MODEL_DIR's chat template); implicit prompt {"chosen","rejected"} as whole conversations (the prompt is
#   their common leading messages) or as text like HH-RLHF's (the prompt is their longest common prefix);
#   pre-tokenized {"prompt_ids","chosen_ids","rejected_ids"}, stored as given.
#   MODEL_DIR: a Hugging Face model directory (tokenizer.json) or a SentencePiece tokenizer.model.
#   --max-length N keeps the first N tokens of each prompt + answer (or, with --long drop, drops the pair).
# Prints pairs, tokens, the form, pairs with identical answers, the length range and the largest token id.
# Exit: 0 ok; 2 a bad row (FILE:LINE or FILE:row N, and the field), bad usage, or no pair left.
set -euo pipefail
[[ ${1:-} != -h && ${1:-} != --help ]] || { sed -n '/^# Usage:/,/^# Exit:/s/^# \{0,1\}//p' "$0"; exit 0; }
SHADOWGRAD_VENV="${SHADOWGRAD_VENV:-$(cd "$(dirname "$0")/.." && pwd)/.venv}"
[[ -x $SHADOWGRAD_VENV/bin/python ]] || { echo "prepare_preference.sh: no venv at $SHADOWGRAD_VENV (run scripts/build.sh)" >&2; exit 2; }
exec "$SHADOWGRAD_VENV/bin/python" "$(dirname "$0")/lib/prepare_preference.py" "$@"
