#pragma once
// The project's two non-cryptographic hashes, each written once. Header-only with no dependencies: the installed
// engine header accumulate/StochasticRounding.h includes it too.
//
//   uint64_t h = util::fnv1a64(bytes, n);             // checksums, fingerprints (chain with the third argument)
//   uint64_t z = util::mix64(seed ^ counter);         // SplitMix64's finaliser: counter-based random bits
#include <cstddef>
#include <cstdint>

namespace shadowgrad::util {

constexpr uint64_t kFnv1aOffset = 1469598103934665603ull;

// FNV-1a, 64-bit, over n bytes, continuing from `h` (kFnv1aOffset to start).
inline uint64_t fnv1a64(const void* data, size_t n, uint64_t h = kFnv1aOffset) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

// SplitMix64's finaliser: a bijective, well-mixed 64-bit function (platform independent).
constexpr uint64_t mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

} // namespace shadowgrad::util
