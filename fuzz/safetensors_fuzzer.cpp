// libFuzzer target for our safetensors reader (src/hub/SafeTensorsHeader.h): the input is a whole file's bytes, and
// goes through the same parse_safetensors() that SafeTensorsFile::open runs on the mapped file. Any outcome but
// success or ModelFileError (another exception type, which the trainer would report as exit 1 instead of 2, a
// sanitizer report, a timeout, or memory past -rss_limit_mb) is a finding.
//
//   scripts/fuzz_safetensors.sh 60   # builds with clang -fsanitize=fuzzer,address,undefined and runs 60 s
#include <cstddef>
#include <cstdint>

#include "hub/SafeTensorsHeader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const auto parsed = shadowgrad::hub::parse_safetensors(data, size, "fuzz.safetensors");
    // What the reader relies on afterwards: every tensor lies inside the file.
    for (const auto& t : parsed.tensors)
      if (parsed.data_start + t.end > size || t.begin > t.end) __builtin_trap();
  } catch (const shadowgrad::hub::ModelFileError&) {
    // Expected: a clear one-line error.
  }
  return 0;
}
