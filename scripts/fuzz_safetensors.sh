#!/usr/bin/env bash
# Fuzzes the safetensors reader (src/hub/SafeTensorsHeader.cpp) with libFuzzer for SECONDS (default 60), under
# AddressSanitizer and UndefinedBehaviorSanitizer. Needs Debian's clang (clang-14, libclang-rt-14-dev).
# Cost: ~1 min to build the target (one file: nlohmann-json and fmt, no LibTorch), then SECONDS.
# Exit 0: no input crashed it. A crashing input is saved as build/fuzz/crash-* and printed.
# Usage: scripts/fuzz_safetensors.sh [SECONDS]   e.g. scripts/fuzz_safetensors.sh 60
set -euo pipefail
[[ ${1:-} != -h && ${1:-} != --help ]] || { sed -n '2,/^set /{/^#/s/^# \{0,1\}//p}' "$0"; exit 0; }
seconds=${1:-60}
root="$(cd "$(dirname "$0")/.." && pwd)"
out="${SHADOWGRAD_FUZZ_DIR:-$root/build/fuzz}/safetensors"
cxx=$(command -v clang++ || command -v clang++-14 || true)
if [[ -z $cxx ]]; then
  echo "fuzz_safetensors: SKIPPED: clang++ not found (apt-get install clang-14 libclang-rt-14-dev)" >&2
  exit 77
fi
mkdir -p "$out/corpus"
bin="$out/safetensors_fuzzer"
srcs=("$root/fuzz/safetensors_fuzzer.cpp" "$root/src/hub/SafeTensorsHeader.cpp")
if [[ ! -x $bin ]] || [[ -n $(find "${srcs[@]}" "$root/src/hub/SafeTensorsHeader.h" "$root/src/util/Errors.h" \
                              -newer "$bin" 2>/dev/null) ]]; then
  echo "fuzz_safetensors: building $bin" >&2
  "$cxx" -std=c++17 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
    -I"$root/src" "${srcs[@]}" -lfmt -o "$bin"
fi
cp -n "$root"/fuzz/safetensors_corpus/* "$out/corpus/" 2>/dev/null || true
cd "$out"
# -rss_limit_mb guards against runaway memory; -timeout flags any single input taking over 10 s.
set +e
"$bin" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=2048 -print_final_stats=1 "$out/corpus" \
  >"$out/fuzz.log" 2>&1
status=$?
set -e
grep -E "^(INFO: Seed|INFO: -max_len|#[0-9]+ +DONE|stat::number_of_executed_units|stat::peak_rss|==[0-9]+==|SUMMARY|.*Test unit written)" \
  "$out/fuzz.log" || true
if [[ $status -ne 0 ]]; then
  tail -40 "$out/fuzz.log" >&2
  echo "fuzz_safetensors: FAILED (exit $status); reproducer(s): $(ls "$out"/crash-* "$out"/timeout-* "$out"/oom-* 2>/dev/null)" >&2
  exit 1
fi
echo "fuzz_safetensors: OK, no crash in ${seconds}s (log: $out/fuzz.log)"
