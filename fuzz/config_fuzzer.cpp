// libFuzzer target for the config parser: YAML text plus key=value overrides, through the same
// load_config_text() the trainer uses. Input layout: the YAML text, then zero or more NUL-separated
// overrides. Any outcome but success or ConfigError (for instance another exception type escaping,
// which the trainer would report as exit 1 instead of 2, or a sanitizer report) is a finding.
//
//   scripts/fuzz_config.sh 60      # builds with clang -fsanitize=fuzzer,address,undefined and runs 60 s
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "config/ConfigLoader.h"
#include "util/Errors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  size_t nul = input.find('\0');
  const std::string yaml = input.substr(0, nul);
  std::vector<std::string> overrides;
  while (nul != std::string::npos) {
    size_t next = input.find('\0', nul + 1);
    overrides.push_back(input.substr(nul + 1, next == std::string::npos ? std::string::npos : next - nul - 1));
    nul = next;
  }
  try {
    shadowgrad::config::load_config_text(yaml, "fuzz.yml", overrides);
  } catch (const shadowgrad::ConfigError&) {
    // Expected: a clear one-line error.
  }
  return 0;
}
