#include "data/SyntheticSource.h"

#include <algorithm>
#include <cmath>

#include <ATen/ATen.h>

#include "util/Hash.h"

namespace shadowgrad::data {

uint64_t example_hash(uint64_t seed, int64_t step, int64_t index) {
  // SplitMix64 over a combination of the three inputs: cheap, well mixed, and platform independent.
  using util::mix64;
  return mix64(mix64(mix64(seed) ^ static_cast<uint64_t>(step)) ^ static_cast<uint64_t>(index));
}

void shuffle_by_seed(std::vector<int64_t>& v, uint64_t seed, int64_t stream) {
  for (int64_t i = int64_t(v.size()) - 1; i > 0; --i) {
    const uint64_t j = example_hash(seed, stream, i) % uint64_t(i + 1);
    std::swap(v[size_t(i)], v[size_t(j)]);
  }
}

SyntheticSource::SyntheticSource(uint64_t seed, int64_t vocab_size, int64_t max_length, double min_length_fraction)
    : seed_(seed),
      vocab_size_(vocab_size),
      max_length_(max_length),
      min_length_(std::clamp<int64_t>(static_cast<int64_t>(std::ceil(min_length_fraction * max_length)), 1,
                                      max_length)) {}

Batch SyntheticSource::examples(int64_t step, int64_t first, int64_t count) const {
  auto tokens = at::zeros({count, max_length_}, at::kLong);
  auto targets = at::full({count, max_length_}, kIgnoreIndex, at::kLong);
  auto tok = tokens.accessor<int64_t, 2>();
  auto tgt = targets.accessor<int64_t, 2>();
  const int64_t max_stride = std::min<int64_t>(8, vocab_size_ - 1);
  for (int64_t i = 0; i < count; ++i) {
    uint64_t h = example_hash(seed_, step, first + i);
    int64_t x = static_cast<int64_t>(h % static_cast<uint64_t>(vocab_size_));
    int64_t stride = 1 + static_cast<int64_t>((h >> 20) % static_cast<uint64_t>(max_stride));
    int64_t length = min_length_ + static_cast<int64_t>((h >> 40) % static_cast<uint64_t>(max_length_ - min_length_ + 1));
    for (int64_t t = 0; t < length; ++t) {
      tok[i][t] = x;
      x = (x + stride) % vocab_size_;
      tgt[i][t] = x;
    }
  }
  return {tokens, targets, {}, {}};  // no segments or positions: plain causal windows
}

} // namespace shadowgrad::data
