// libFuzzer target for the SFT file reader (src/data/SftFile.h): the input is a whole file's bytes, and goes through
// the same SftFile::parse() that SftFile::open runs on the file read. Any outcome but success or DataError (another
// exception type, which the trainer would report as exit 1 instead of 2, a sanitizer report, a timeout, or memory
// past -rss_limit_mb) is a finding.
//
//   scripts/fuzz_sft.sh 60   # builds with clang -fsanitize=fuzzer,address,undefined and runs 60 s
#include <cstddef>
#include <cstdint>
#include <string>

#include "data/SftFile.h"
#include "util/Errors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const auto f = shadowgrad::data::SftFile::parse(std::string(reinterpret_cast<const char*>(data), size),
                                                    "dataset_path 'fuzz.sft'");
    // What the sources rely on afterwards: the examples tile the tokens, each at least 2 long, its first not a target.
    int64_t at = 0;
    for (int64_t i = 0; i < f.examples(); ++i) {
      if (f.length(i) < 2 || f.tokens(i) != f.tokens(0) + at || f.targets(i)[0] != 0) __builtin_trap();
      at += f.length(i);
    }
    if (at != f.total_tokens()) __builtin_trap();
  } catch (const shadowgrad::DataError&) {
    // Expected: a clear one-line error.
  }
  return 0;
}
