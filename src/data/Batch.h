#pragma once
// A batch of right-padded sequences. targets[i][t] is the token after tokens[i][t], or kIgnoreIndex
// where position t is padding (or, for SFT data, not a target); those positions carry no loss.
// SFT batches (data/SftSource.h) also carry, per token, the segment (which example of the row it belongs to:
// 1, 2, ...; 0 for padding) and its position in that example; the model turns them into a block-causal mask and
// RoPE positions. Language-model windows leave both undefined: plain causal attention over positions 0..T-1.
#include <ATen/core/Tensor.h>

namespace shadowgrad::data {

constexpr int64_t kIgnoreIndex = -1;

struct Batch {
  at::Tensor tokens;     // [N, T] int64
  at::Tensor targets;    // [N, T] int64, kIgnoreIndex at padding
  at::Tensor segments;   // [N, T] int64 or undefined
  at::Tensor positions;  // [N, T] int64 or undefined

  int64_t size() const { return tokens.size(0); }
  // Valid (non-padding) target tokens in the batch.
  int64_t valid_tokens() const;
  // Tokens that are not padding: segment != 0 where segments are defined, else valid_tokens() (what tokens/s has
  // always counted for language-model windows).
  int64_t real_tokens() const;
  // Rows [begin, begin + count): a view, no copy.
  Batch slice(int64_t begin, int64_t count) const;
};

} // namespace shadowgrad::data
