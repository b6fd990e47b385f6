// libFuzzer target for the pair file reader (src/data/PairFile.h): the input is a whole file's bytes, through the same
// PairFile::parse() that PairFile::open runs on the file read. Any outcome but success or DataError (another exception
// type, which the trainer would report as exit 1 instead of 2, a sanitizer report, a timeout, or memory past
// -rss_limit_mb) is a finding.
//
//   scripts/fuzz_pairs.sh 60   # builds with clang -fsanitize=fuzzer,address,undefined and runs 60 s
#include <cstddef>
#include <cstdint>
#include <string>

#include "data/PairFile.h"
#include "util/Errors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using shadowgrad::data::Answer;
  try {
    const auto f = shadowgrad::data::PairFile::parse(std::string(reinterpret_cast<const char*>(data), size),
                                                     "dataset_path 'fuzz.pairs'");
    // What PairSource relies on afterwards: the parts tile the tokens in order, each at least 1 token long.
    const uint32_t* at = f.prompt(0).ids;
    for (int64_t i = 0; i < f.pairs(); ++i)
      for (const auto part : {f.prompt(i), f.answer(i, Answer::chosen), f.answer(i, Answer::rejected)}) {
        if (part.length < 1 || part.ids != at) __builtin_trap();
        at += part.length;
      }
    if (at != f.prompt(0).ids + f.total_tokens()) __builtin_trap();
  } catch (const shadowgrad::DataError&) {
    // Expected: a clear one-line error.
  }
  return 0;
}
