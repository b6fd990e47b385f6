#pragma once
// A batch of right-padded sequences. targets[i][t] is the token after tokens[i][t], or kIgnoreIndex
// where position t is padding (or, for SFT data, not a target); those positions carry no loss.
// SFT batches (data/SftSource.h) also carry, per token, the segment (which example of the row it belongs to:
// 1, 2, ...; 0 for padding) and its position in that example; the model turns them into a block-causal mask and
// RoPE positions. Language-model windows leave both undefined: plain causal attention over positions 0..T-1.
// Rows that hold one example each (unpacked SFT) need no more than that plain causal attention, and model_inputs()
// gives them to the model so:
//
//   const int64_t real = batch.real_tokens();                  // counting reads the segments: before
//   data::Batch micro = batch.slice(m * B, B).model_inputs();
//   auto logits = model->forward(micro.tokens, micro.segments, micro.positions);
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
  // The rows as the model takes them: without segments and positions when every row holds at most one example, from
  // its first token on (segment ids 0 and 1 only, padding only after the example, each example token at its own
  // index): causal attention then never looks at the padding, and the positions are 0..T-1 anyway, so the model's
  // plain causal path (scaled_dot_product_attention's causal kernel) gives the same result without building a
  // [B, T, T] mask. Any other batch comes back as it is. Views, no copy; a few passes over the ids to decide.
  Batch model_inputs() const;
};

} // namespace shadowgrad::data
