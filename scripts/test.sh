#!/usr/bin/env bash
# Installs missing packages, builds everything, and runs the whole suite through ctest: Catch2, the Python
# unittests against the pip-installed module (ctest pip_install) and the installed package with its out-of-tree
# example (ctest package).
# Cost from a fresh clone on 2 cores (docs/setup.md): 511-534 s on an AMD EPYC with avx512_bf16, 2026-12-06 (venv
# 32-38 s, build 174-185 s, ctest 305-328 s); over 35 min on an AVX2-only EPYC (before the larger unity batches). CI
# runs exactly this.
set -euo pipefail
[[ ${1:-} != -h && ${1:-} != --help ]] || { sed -n '2,/^set /{/^#/s/^# \{0,1\}//p}' "$0"; exit 0; }
source "$(dirname "$0")/lib/setup.sh"
# The fuzz targets (clang, no LibTorch; the three take about 21 s of CPU) build on the core pip leaves idle while it unpacks
# the venv's torch, not inside ctest's busy minutes; their ctest entries then find them built.
build_fuzz_targets() {
  local fuzzer
  for fuzzer in "$SHADOWGRAD_ROOT"/scripts/fuzz_*.sh; do "$fuzzer" --build >/dev/null 2>&1; done
}
SHADOWGRAD_BESIDE_TORCH=build_fuzz_targets install_and_build
cd "$SHADOWGRAD_ROOT/build"
# Twice as many tests as cores: many of them mostly wait (process start-up, torchrun's rendezvous, collective
# timeouts), so with one test per core the cores sat partly idle: 233 s at -j2 against 191 s at -j4, medians of 3
# alternating pairs on 2 cores, 2026-12-01 (docs/setup.md).
ctest --output-on-failure -j "$((2 * $(nproc 2>/dev/null || echo 2)))" "$@"
