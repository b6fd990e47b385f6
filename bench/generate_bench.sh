#!/usr/bin/env bash
# Intent: generation speed against transformers' generate with its KV cache, on the same prompts, in alternating
# rounds: decode tokens/s and time to the first token (docs/generate.md, "Speed").
# Cost: ~3 min for 3 rounds on SmolLM2-135M in fp32 on 2 cores (both sides load the model once).
#
# Usage: bench/generate_bench.sh MODEL_DIR [--rounds N] [--max-new N] [--threads N] [--dtype float32|bfloat16]
#          [--generate-bin PATH]
#   MODEL_DIR: a Hugging Face model directory (scripts/prepare_model.sh makes SmolLM2-135M-Instruct).
# Prints per round and side the medians over 6 prompts, then the medians over rounds and ours/theirs per round.
# Exit: 0 ok; 1 failure; 2 bad usage.
set -euo pipefail
[[ ${1:-} != -h && ${1:-} != --help ]] || { sed -n '/^# Usage:/,/^# Exit:/s/^# \{0,1\}//p' "$0"; exit 0; }
SHADOWGRAD_VENV="${SHADOWGRAD_VENV:-$(cd "$(dirname "$0")/.." && pwd)/.venv}"
[[ -x $SHADOWGRAD_VENV/bin/python ]] || { echo "generate_bench.sh: no venv at $SHADOWGRAD_VENV (run scripts/build.sh)" >&2; exit 2; }
# The same thread environment on both sides: build/generate sets OMP_WAIT_POLICY=passive itself
# (apps/ThreadEnvironment.h); with transformers' default (spinning OpenMP threads) its decode ran at 2.2 tokens/s on
# the loaded 2-core machine, against 7-11 with passive waits (2026-12-04). A value the user set is kept.
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-passive}"
exec "$SHADOWGRAD_VENV/bin/python" "$(dirname "$0")/lib/generate_bench.py" "$@"
