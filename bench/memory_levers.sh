#!/usr/bin/env bash
# Memory levers on the seed model (bench/memory_levers.py): remat_policy none/minimal/full at pdbs 1, 4, 8 (peak
# tracked bytes, peak RSS, step time), the largest pdbs each policy fits in none's pdbs=1 peak, and each lever's
# saving at pdbs=1 K=4 (grad_dtype, adam_state_dtype, remat, hoisting, the allocator cache) next to the peer's RSS.
# Prints Markdown (docs/memory.md holds a committed one). Options go to the script, e.g. --skip remat.
# Cost: about 17 trainer runs of 3 steps and one peer run: ~5 min on a quiet 2-core machine.
set -euo pipefail
source "$(dirname "$0")/lib/args.sh"
help_with_python "$0" "$(dirname "$0")/memory_levers.py" "$@"
source "$(dirname "$0")/../scripts/lib/setup.sh"
install_missing_packages
build_shadowgrad trainer >&2
exec "$SHADOWGRAD_PYTHON" "$SHADOWGRAD_ROOT/bench/memory_levers.py" "$@"
