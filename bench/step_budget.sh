#!/usr/bin/env bash
# Where a training step's time goes: for the seed model and SmolLM2-135M (models/SmolLM2-135M-Instruct, from
# scripts/prepare_model.sh), full fine-tuning and LoRA (rank 16, all linear layers), K=4 x 1 row, prints the
# unprofiled step time beside the profiled step's split (GEMM, attention, elementwise, casts and copies, the fold,
# the loss, the optimizer) with the MiB each part's innermost ops moved, the op counts per step (add_, copy_, fill_,
# casts, matmuls, all) and the bytes moved, which do not depend on the host, and each matmul shape's achieved rate
# against build/matmul_bench at that shape.
# Options go to bench/step_budget.py (--models, --modes, --dtypes, --steps, --k, --keys), e.g.
#   bench/step_budget.sh --models smollm2 --modes full,lora
#   bench/step_budget.sh --models seed --modes full --dtypes bfloat16 --keys max_target_length=32   # no native bf16
# Cost: about 3 min on 2 AVX2 cores in fp32, quiet (3 steps per configuration, the last profiled).
set -euo pipefail
source "$(dirname "$0")/lib/args.sh"
help_with_python "$0" "$(dirname "$0")/step_budget.py" "$@"
source "$(dirname "$0")/../scripts/lib/setup.sh"
build_shadowgrad trainer matmul_bench >&2
exec "$SHADOWGRAD_PYTHON" "$SHADOWGRAD_ROOT/bench/step_budget.py" "$@"
