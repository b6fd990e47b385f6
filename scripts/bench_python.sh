#!/usr/bin/env bash
# What shadowgrad saves a PyTorch user: bench/peer.py's plain GA loop against the same loop with
# shadowgrad.ShadowAccumulator(grad_dtype=torch.bfloat16), seed model, bf16 autocast, pdbs=1, K=4, in alternating
# pairs; prints the Markdown table of docs/python.md. Options go to bench/python_pairs.py (e.g. --pairs 5).
# Cost: builds the Python module if needed; about 1 min per pair on 2 cores.
set -euo pipefail
if [[ ${1:-} == -h || ${1:-} == --help ]]; then  # the header, then python_pairs.py's own options
  sed -n '2,/^set /{/^#/s/^# \{0,1\}//p}' "$0"
  exec /usr/bin/python3 "$(dirname "$0")/../bench/python_pairs.py" --help
fi
source "$(dirname "$0")/lib/setup.sh"
install_missing_packages
build_shadowgrad shadowgrad_python >&2
exec /usr/bin/python3 "$SHADOWGRAD_ROOT/bench/python_pairs.py" "$@"
