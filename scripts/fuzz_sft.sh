#!/usr/bin/env bash
# Fuzzes the SFT file reader (src/data/SftFile.cpp) with libFuzzer for SECONDS (default 60), under
# AddressSanitizer and UndefinedBehaviorSanitizer. Needs Debian's clang (clang-14, libclang-rt-14-dev).
# Cost: ~5 s to build the target (SftFile.cpp and util/File.cpp: fmt, no LibTorch), then SECONDS.
# Exit 0: no input crashed it. A crashing input is saved as build/fuzz/sft/crash-* and printed.
# Usage: scripts/fuzz_sft.sh [SECONDS | --build]   e.g. scripts/fuzz_sft.sh 60
set -euo pipefail
[[ ${1:-} != -h && ${1:-} != --help ]] || { sed -n '2,/^set /{/^#/s/^# \{0,1\}//p}' "$0"; exit 0; }
SHADOWGRAD_ROOT="$(cd "$(dirname "$0")/.." && pwd)"
source "$SHADOWGRAD_ROOT/scripts/lib/fuzz.sh"
fuzz_name=fuzz_sft fuzz_out="${SHADOWGRAD_FUZZ_DIR:-$SHADOWGRAD_ROOT/build/fuzz}/sft" fuzz_max_len=2048
fuzz_srcs=("$SHADOWGRAD_ROOT/fuzz/sft_fuzzer.cpp" "$SHADOWGRAD_ROOT/src/data/SftFile.cpp" "$SHADOWGRAD_ROOT/src/data/DataFileHeader.cpp" "$SHADOWGRAD_ROOT/src/util/File.cpp")
fuzz_deps=("$SHADOWGRAD_ROOT/src/data/DataFileHeader.h" "$SHADOWGRAD_ROOT/src/data/LittleEndian.h" "$SHADOWGRAD_ROOT/src/data/SftFile.h" "$SHADOWGRAD_ROOT/src/util/File.h" "$SHADOWGRAD_ROOT/src/util/Errors.h")
fuzz_libs=(-lfmt) fuzz_seeds="$SHADOWGRAD_ROOT/fuzz/sft_corpus"
run_fuzzer "${1:-60}"
