#!/usr/bin/env bash
# What shadowgrad saves a PyTorch user: bench/peer.py's plain GA loop against the same loop with
# shadowgrad.ShadowAccumulator(grad_dtype=torch.bfloat16), seed model, bf16 autocast, pdbs=1, K=4, in alternating
# pairs; prints the Markdown tables of docs/python.md. Options go to bench/python_pairs.py, e.g.
#   bench/bench_python.sh --pairs 5 --variants torch,fused --profile
#   bench/bench_python.sh --pairs 5 --variants torch,fused --model resnet18 --pdbs 32
#   bench/bench_python.sh --pairs 3 --dtype float32        # where bf16 is not native (AVX2): autocast bf16 crawls
# Cost: builds the Python module if needed; about 1 min per pair and variant on 2 cores (far more under load).
set -euo pipefail
source "$(dirname "$0")/lib/args.sh"
help_with_python "$0" "$(dirname "$0")/python_pairs.py" "$@"
source "$(dirname "$0")/../scripts/lib/setup.sh"
install_missing_packages
build_shadowgrad shadowgrad_python >&2
exec "$SHADOWGRAD_PYTHON" "$SHADOWGRAD_ROOT/bench/python_pairs.py" "$@"
