#pragma once
// A batch of right-padded sequences. targets[i][t] is the token after tokens[i][t], or kIgnoreIndex
// where position t is padding; padded targets carry no loss.
#include <ATen/core/Tensor.h>

namespace shadowgrad::data {

constexpr int64_t kIgnoreIndex = -1;

struct Batch {
  at::Tensor tokens;   // [N, T] int64
  at::Tensor targets;  // [N, T] int64, kIgnoreIndex at padding

  int64_t size() const { return tokens.size(0); }
  // Valid (non-padding) target tokens in the batch.
  int64_t valid_tokens() const;
  // Rows [begin, begin + count): a view, no copy.
  Batch slice(int64_t begin, int64_t count) const;
};

} // namespace shadowgrad::data
