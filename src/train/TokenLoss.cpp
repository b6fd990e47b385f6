#include "train/TokenLoss.h"

#include <ATen/ATen.h>

#include "data/Batch.h"

namespace shadowgrad::train {

at::Tensor token_loss_sum(const at::Tensor& logits, const at::Tensor& targets) {
  auto flat = logits.reshape({-1, logits.size(-1)}).to(at::kFloat);
  return at::cross_entropy_loss(flat, targets.reshape({-1}), {}, at::Reduction::Sum, data::kIgnoreIndex);
}

} // namespace shadowgrad::train
