#!/usr/bin/env bash
# Side-by-side benchmark: this machine's matmul limit (build/matmul_bench), shadowgrad's trainer and the idiomatic
# PyTorch eager loop (bench/peer.py, Debian's python3-torch 1.13), on the seed model (emb 512, 4 layers,
# vocab 32000, seq 512), bf16 and fp32, plus K scaling and GA overhead. Prints a Markdown table
# (docs/performance.md holds a committed one). Options go to bench/bench.py, e.g. --repeats 1 --dtypes bfloat16.
# Cost: installs python3-torch once (~300 MB); about 15 min on 2 cores with the defaults.
set -euo pipefail
source "$(dirname "$0")/lib/args.sh"
help_with_python "$0" "$(dirname "$0")/../bench/bench.py" "$@"
source "$(dirname "$0")/lib/setup.sh"
install_missing_packages python3-torch
build_shadowgrad trainer matmul_bench >&2
exec /usr/bin/python3 "$SHADOWGRAD_ROOT/bench/bench.py" "$@"
