#pragma once
// Sizes computed from what a user or a file gave (a config.yml, config.json or adapter_config.json): non-negative
// int64 arithmetic that stops at INT64_MAX instead of wrapping, so a crafted shape whose product cannot be represented
// is simply more than any budget, and a check against one refuses it.
//
//   int64_t bytes = util::sat_mul(util::sat_mul(rows, cols), 4);   // INT64_MAX when the product passes it
#include <cstdint>
#include <limits>

namespace shadowgrad::util {

inline int64_t sat_mul(int64_t a, int64_t b) {
  int64_t r = 0;
  return __builtin_mul_overflow(a, b, &r) ? std::numeric_limits<int64_t>::max() : r;
}

inline int64_t sat_add(int64_t a, int64_t b) {
  int64_t r = 0;
  return __builtin_add_overflow(a, b, &r) ? std::numeric_limits<int64_t>::max() : r;
}

} // namespace shadowgrad::util
