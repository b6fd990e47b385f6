# Builds a libFuzzer target under AddressSanitizer and UndefinedBehaviorSanitizer (Debian's clang: clang-14,
# libclang-rt-14-dev) when it is missing or older than its sources, then fuzzes it for a number of seconds.
# Sourced by scripts/fuzz_*.sh, which set, before calling `run_fuzzer SECONDS`:
#   fuzz_name   the script's name, for messages        fuzz_out     the working folder (binary, corpus, log)
#   fuzz_srcs   sources to compile (array)             fuzz_deps    further files whose change forces a rebuild
#   fuzz_libs   link flags (array)                     fuzz_seeds   the committed seed corpus folder
#   fuzz_max_len  the longest input libFuzzer makes
# SECONDS "--build" builds the target and stops (scripts/test.sh builds them while the venv's torch installs).
# Exit 77 (skipped) without clang; 1 with the reproducers' names when an input crashed, hung or ran out of memory.
run_fuzzer() {
  local seconds=$1 cxx bin="$fuzz_out/${fuzz_name#fuzz_}_fuzzer" status
  cxx=$(command -v clang++ || command -v clang++-14 || true)
  if [[ -z $cxx ]]; then
    echo "$fuzz_name: SKIPPED: clang++ not found (apt-get install clang-14 libclang-rt-14-dev)" >&2
    exit 77
  fi
  mkdir -p "$fuzz_out/corpus"
  if [[ ! -x $bin ]] || [[ -n $(find "${fuzz_srcs[@]}" "${fuzz_deps[@]}" -newer "$bin" 2>/dev/null) ]]; then
    echo "$fuzz_name: building $bin" >&2
    "$cxx" -std=c++17 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
      -I"$SHADOWGRAD_ROOT/src" "${fuzz_srcs[@]}" "${fuzz_libs[@]}" -o "$bin"
  fi
  [[ $seconds != --build ]] || return 0
  cp -n "$fuzz_seeds"/* "$fuzz_out/corpus/" 2>/dev/null || true
  cd "$fuzz_out"
  # -rss_limit_mb guards against runaway memory; -timeout flags any single input taking over 10 s.
  set +e
  "$bin" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len="$fuzz_max_len" -print_final_stats=1 \
    "$fuzz_out/corpus" >"$fuzz_out/fuzz.log" 2>&1
  status=$?
  set -e
  grep -E "^(INFO: Seed|INFO: -max_len|#[0-9]+ +DONE|stat::number_of_executed_units|stat::peak_rss|==[0-9]+==|SUMMARY|.*Test unit written)" \
    "$fuzz_out/fuzz.log" || true
  if [[ $status -ne 0 ]]; then
    tail -40 "$fuzz_out/fuzz.log" >&2
    echo "$fuzz_name: FAILED (exit $status); reproducer(s): $(ls "$fuzz_out"/crash-* "$fuzz_out"/timeout-* "$fuzz_out"/oom-* 2>/dev/null)" >&2
    exit 1
  fi
  echo "$fuzz_name: OK, no crash in ${seconds}s (log: $fuzz_out/fuzz.log)"
}
