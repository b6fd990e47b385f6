#!/usr/bin/env bash
# Fuzzes the pair file reader (src/data/PairFile.cpp) with libFuzzer for SECONDS (default 60), under
# AddressSanitizer and UndefinedBehaviorSanitizer. Needs Debian's clang (clang-14, libclang-rt-14-dev).
# Cost: ~5 s to build the target (PairFile.cpp and util/File.cpp: fmt, no LibTorch), then SECONDS.
# Exit 0: no input crashed it. A crashing input is saved as build/fuzz/pairs/crash-* and printed.
# Usage: scripts/fuzz_pairs.sh [SECONDS | --build]   e.g. scripts/fuzz_pairs.sh 60
set -euo pipefail
[[ ${1:-} != -h && ${1:-} != --help ]] || { sed -n '2,/^set /{/^#/s/^# \{0,1\}//p}' "$0"; exit 0; }
SHADOWGRAD_ROOT="$(cd "$(dirname "$0")/.." && pwd)"
source "$SHADOWGRAD_ROOT/scripts/lib/fuzz.sh"
fuzz_name=fuzz_pairs fuzz_out="${SHADOWGRAD_FUZZ_DIR:-$SHADOWGRAD_ROOT/build/fuzz}/pairs" fuzz_max_len=2048
fuzz_srcs=("$SHADOWGRAD_ROOT/fuzz/pair_fuzzer.cpp" "$SHADOWGRAD_ROOT/src/data/PairFile.cpp" "$SHADOWGRAD_ROOT/src/data/DataFileHeader.cpp" "$SHADOWGRAD_ROOT/src/util/File.cpp")
fuzz_deps=("$SHADOWGRAD_ROOT/src/data/DataFileHeader.h" "$SHADOWGRAD_ROOT/src/data/PairFile.h" "$SHADOWGRAD_ROOT/src/data/LittleEndian.h" "$SHADOWGRAD_ROOT/src/util/File.h"
           "$SHADOWGRAD_ROOT/src/util/Errors.h" "$SHADOWGRAD_ROOT/src/util/Hash.h")
fuzz_libs=(-lfmt) fuzz_seeds="$SHADOWGRAD_ROOT/fuzz/pair_corpus"
run_fuzzer "${1:-60}"
