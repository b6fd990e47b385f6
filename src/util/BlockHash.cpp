#include "util/BlockHash.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include <ATen/Parallel.h>

#include "util/Hash.h"

namespace shadowgrad::util {

namespace {

// xxHash64's round on four lanes (two multiplies per 8 bytes, the lanes independent), a block's lanes then merged
// and finalised: a real hash of every byte at memory speed.
constexpr uint64_t kP1 = 11400714785074694791ull, kP2 = 14029467366897019727ull;
inline uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
inline uint64_t round64(uint64_t acc, uint64_t word) { return rotl(acc + word * kP2, 31) * kP1; }

uint64_t block_hash(const unsigned char* p, size_t n) {
  uint64_t a0 = kP1 + kP2, a1 = kP2, a2 = 0, a3 = 0 - kP1;
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    uint64_t w[4];
    std::memcpy(w, p + i, 32);
    a0 = round64(a0, w[0]);
    a1 = round64(a1, w[1]);
    a2 = round64(a2, w[2]);
    a3 = round64(a3, w[3]);
  }
  uint64_t h = rotl(a0, 1) + rotl(a1, 7) + rotl(a2, 12) + rotl(a3, 18);
  for (; i < n; ++i) h = (h ^ p[i]) * kP1;
  return mix64(h ^ uint64_t(n));
}

} // namespace

uint64_t block_hash_chain(const void* data, size_t n, uint64_t h) {
  constexpr size_t kBlock = size_t(1) << 20;
  const auto* p = static_cast<const unsigned char*>(data);
  const auto blocks = int64_t((n + kBlock - 1) / kBlock);
  std::vector<uint64_t> digests(size_t(blocks), 0);
  at::parallel_for(0, blocks, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const size_t at = size_t(b) * kBlock;
      digests[size_t(b)] = block_hash(p + at, std::min(kBlock, n - at));
    }
  });
  for (uint64_t d : digests) h = mix64(h ^ d);
  return mix64(h ^ uint64_t(n));
}

} // namespace shadowgrad::util
