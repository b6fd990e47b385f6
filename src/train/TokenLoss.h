#pragma once
// Sum of token cross-entropies over the valid (non-padding) targets, in fp32.
// The step divides it by the valid tokens of the whole global batch, never by a microbatch's own count.
#include <ATen/core/Tensor.h>

namespace shadowgrad::train {

// logits [N, T, V] (any float dtype), targets [N, T] with data::kIgnoreIndex at padding -> fp32 scalar.
at::Tensor token_loss_sum(const at::Tensor& logits, const at::Tensor& targets);

} // namespace shadowgrad::train
