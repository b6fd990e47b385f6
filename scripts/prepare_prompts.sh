#!/usr/bin/env bash
# Intent: the prompts file eval_prompts_path reads: text or chat prompts encoded once with the model's own tokenizer
# and chat template, as token ids and stop ids, so the trainer (which has no tokenizer in its process) can write
# greedy samples at each evaluation (docs/generate.md, "Samples while training").
# Cost: a Hugging Face tokenizer loads in ~2 s; encoding is instant for a few hundred prompts.
#
# Usage: scripts/prepare_prompts.sh IN OUT.jsonl --tokenizer MODEL_DIR [--limit N]
#   IN: JSON Lines, a JSON list of objects, or Parquet; OUT's directory is created.
#   Forms: {"prompt": TEXT} (encoded as it stands, with the BOS the tokenizer adds); {"messages": [...]} through the
#   chat template with the assistant header added; an SFT line works too: {"prompt", "completion"} or messages ending
#   in an assistant turn, whose answer is kept as "reference" and not shown to the model.
#   --limit N keeps the first N prompts.
# Exit: 0 ok; 2 a bad line (FILE:LINE named) or bad usage.
set -euo pipefail
[[ ${1:-} != -h && ${1:-} != --help ]] || { sed -n '/^# Usage:/,/^# Exit:/s/^# \{0,1\}//p' "$0"; exit 0; }
SHADOWGRAD_VENV="${SHADOWGRAD_VENV:-$(cd "$(dirname "$0")/.." && pwd)/.venv}"
[[ -x $SHADOWGRAD_VENV/bin/python ]] || { echo "prepare_prompts.sh: no venv at $SHADOWGRAD_VENV (run scripts/build.sh)" >&2; exit 2; }
exec "$SHADOWGRAD_VENV/bin/python" "$(dirname "$0")/lib/prepare_prompts.py" "$@"
