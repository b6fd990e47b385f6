#!/usr/bin/env bash
# Intent: run the given test command as an AVX2-only host (no avx512_bf16, no AMX) would, on a host that has them:
# the trainer's own bf16 detection says slow (SHADOWGRAD_CPU_BF16), oneDNN is capped below its bf16 ISA
# (ONEDNN_MAX_CPU_ISA) and ATen's kernels to AVX2 (ATEN_CPU_CAPABILITY). On a host without avx512_bf16 or AMX the
# command's own ctest entries already ran natively, so this one is skipped (exit 77) rather than run twice.
# Usage: tests/avx2_host_test.sh COMMAND [ARG ...]
# Cost: that of COMMAND (ctest avx2_host: about a minute of CPU).
set -euo pipefail
if ! grep -qw -e avx512_bf16 -e amx_bf16 /proc/cpuinfo; then
  echo "avx2_host: this CPU has no avx512_bf16 or AMX, so the suite's own entries already ran as on an AVX2 host"
  exit 77
fi
exec env SHADOWGRAD_CPU_BF16=slow ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2 "$@"
