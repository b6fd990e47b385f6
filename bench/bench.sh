#!/usr/bin/env bash
# Side-by-side benchmark: this machine's matmul limit (build/matmul_bench), shadowgrad's trainer and the PyTorch
# 2.x loop of bench/peer.py (SDPA, fused AdamW, bf16 autocast) in eager mode and under torch.compile, in alternating
# rounds, on the seed model (emb 512, 4 layers, vocab 32000, seq 512), bf16 and fp32, plus K scaling and GA
# overhead. Prints Markdown tables (docs/performance.md holds a committed one). Options go to bench/bench.py, e.g.
#   bench/bench.sh --skip scaling,ga --repeats 3                  # the headline: trainer vs eager vs compiled
#   bench/bench.sh --dtypes bfloat16 --arms trainer,peer-eager --repeats 1
#   bench/bench.sh --skip scaling,ga --variant 'lowest memory:grad_dtype=bfloat16,adam_state_dtype=bfloat16,...'
# The peer runs under the venv's interpreter ($SHADOWGRAD_PYTHON, from scripts/lib/setup.sh).
# Cost: about 20 min on 2 cores with the defaults (estimated: 15 before the compiled peer, which adds one first
# compile per dtype, about a minute each on a tiny 4-layer model, and 3 runs per dtype on a warm inductor cache).
set -euo pipefail
source "$(dirname "$0")/lib/args.sh"
help_with_python "$0" "$(dirname "$0")/bench.py" "$@"
source "$(dirname "$0")/../scripts/lib/setup.sh"
install_missing_packages
build_shadowgrad trainer matmul_bench >&2
exec "$SHADOWGRAD_PYTHON" "$SHADOWGRAD_ROOT/bench/bench.py" "$@"
