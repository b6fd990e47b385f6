#include "data/Batch.h"

#include <ATen/ATen.h>

namespace shadowgrad::data {

int64_t Batch::valid_tokens() const { return targets.ne(kIgnoreIndex).sum().item<int64_t>(); }

int64_t Batch::real_tokens() const {
  return segments.defined() ? segments.ne(0).sum().item<int64_t>() : valid_tokens();
}

Batch Batch::slice(int64_t begin, int64_t count) const {
  auto rows = [&](const at::Tensor& t) { return t.defined() ? t.slice(0, begin, begin + count) : t; };
  return {rows(tokens), rows(targets), rows(segments), rows(positions)};
}

Batch Batch::model_inputs() const {
  if (!segments.defined() || segments.numel() == 0) return *this;
  if (segments.gt(1).any().item<bool>()) return *this;  // a row holds a second example: the block mask is needed
  // Padding before an example (segment 0 then 1): plain causal attention would let the example see it.
  const int64_t T = segments.size(1);
  if (segments.slice(1, 1, T).gt(segments.slice(1, 0, T - 1)).any().item<bool>()) return *this;
  if (positions.defined()) {
    // Each example token at its index: an example that starts later in its row needs its RoPE positions.
    const auto index = at::arange(positions.size(1), positions.options()).expand_as(positions);
    if (positions.ne(index).logical_and(segments.ne(0)).any().item<bool>()) return *this;
  }
  return {tokens, targets, {}, {}};
}

} // namespace shadowgrad::data
