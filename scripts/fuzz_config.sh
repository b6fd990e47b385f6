#!/usr/bin/env bash
# Fuzzes the config/override parser (src/config) with libFuzzer for SECONDS (default 60), under
# AddressSanitizer and UndefinedBehaviorSanitizer. Needs Debian's clang (clang-14, libclang-rt-14-dev).
# Cost: ~10 s to build the target (src/config only: yaml-cpp and fmt, no LibTorch), then SECONDS.
# Exit 0: no input crashed it. A crashing input is saved as build/fuzz/crash-* and printed.
# Usage: scripts/fuzz_config.sh [SECONDS | --build]   e.g. scripts/fuzz_config.sh 60
set -euo pipefail
[[ ${1:-} != -h && ${1:-} != --help ]] || { sed -n '2,/^set /{/^#/s/^# \{0,1\}//p}' "$0"; exit 0; }
SHADOWGRAD_ROOT="$(cd "$(dirname "$0")/.." && pwd)"
source "$SHADOWGRAD_ROOT/scripts/lib/fuzz.sh"
fuzz_name=fuzz_config fuzz_out="${SHADOWGRAD_FUZZ_DIR:-$SHADOWGRAD_ROOT/build/fuzz}" fuzz_max_len=4096
fuzz_srcs=("$SHADOWGRAD_ROOT/fuzz/config_fuzzer.cpp" "$SHADOWGRAD_ROOT"/src/config/*.cpp)
fuzz_deps=("$SHADOWGRAD_ROOT"/src/config/*.h "$SHADOWGRAD_ROOT"/src/config/*.def "$SHADOWGRAD_ROOT/src/util/Errors.h")
fuzz_libs=(-lyaml-cpp -lfmt) fuzz_seeds="$SHADOWGRAD_ROOT/fuzz/corpus"
run_fuzzer "${1:-60}"
