#!/usr/bin/env bash
# Fuzzes the safetensors reader (src/hub/SafeTensorsHeader.cpp) with libFuzzer for SECONDS (default 60), under
# AddressSanitizer and UndefinedBehaviorSanitizer. Needs Debian's clang (clang-14, libclang-rt-14-dev).
# Cost: ~8 s to build the target (one file: nlohmann-json and fmt, no LibTorch), then SECONDS.
# Exit 0: no input crashed it. A crashing input is saved as build/fuzz/safetensors/crash-* and printed.
# Usage: scripts/fuzz_safetensors.sh [SECONDS | --build]   e.g. scripts/fuzz_safetensors.sh 60
set -euo pipefail
[[ ${1:-} != -h && ${1:-} != --help ]] || { sed -n '2,/^set /{/^#/s/^# \{0,1\}//p}' "$0"; exit 0; }
SHADOWGRAD_ROOT="$(cd "$(dirname "$0")/.." && pwd)"
source "$SHADOWGRAD_ROOT/scripts/lib/fuzz.sh"
fuzz_name=fuzz_safetensors fuzz_out="${SHADOWGRAD_FUZZ_DIR:-$SHADOWGRAD_ROOT/build/fuzz}/safetensors" fuzz_max_len=2048
fuzz_srcs=("$SHADOWGRAD_ROOT/fuzz/safetensors_fuzzer.cpp" "$SHADOWGRAD_ROOT/src/hub/SafeTensorsHeader.cpp")
fuzz_deps=("$SHADOWGRAD_ROOT/src/hub/SafeTensorsHeader.h" "$SHADOWGRAD_ROOT/src/util/Errors.h")
fuzz_libs=(-lfmt) fuzz_seeds="$SHADOWGRAD_ROOT/fuzz/safetensors_corpus"
run_fuzzer "${1:-60}"
