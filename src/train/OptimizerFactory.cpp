#include "train/OptimizerFactory.h"

#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include "train/FusedAdamW.h"
#include "util/Saturating.h"

namespace shadowgrad::train {

std::unique_ptr<torch::optim::Optimizer> make_optimizer(const OptimizerOptions& o,
                                                        const std::vector<at::Tensor>& params) {
  using namespace torch::optim;
  if (o.type == OptimizerOptions::Type::adam)
    return std::make_unique<Adam>(
        params, AdamOptions(o.learning_rate).betas({o.beta1, o.beta2}).eps(o.eps).weight_decay(o.weight_decay));
  if (o.type == OptimizerOptions::Type::sgd)
    return std::make_unique<SGD>(params, SGDOptions(o.learning_rate).weight_decay(o.weight_decay));
  auto options = AdamWOptions(o.learning_rate).betas({o.beta1, o.beta2}).eps(o.eps).weight_decay(o.weight_decay);
  if (o.fused) {
    auto fused = std::make_unique<FusedAdamW>(params, options);
    fused->set_state_dtype(o.state_dtype);
    return fused;
  }
  return std::make_unique<AdamW>(params, options);
}

int64_t optimizer_state_bytes_after_update(const OptimizerOptions& o, c10::ScalarType weight_dtype,
                                           int64_t param_elements) {
  if (o.type == OptimizerOptions::Type::sgd) return 0;  // no momentum: SGDOptions' default
  // FusedAdamW keeps fp32 parameters' moments in state_dtype; everything else (Adam, unfused AdamW, and
  // FusedAdamW's fallback for bf16 parameters) keeps them in the parameter's dtype.
  const bool fp32_weights = weight_dtype == c10::kFloat;
  const bool fused = o.type == OptimizerOptions::Type::adamw && o.fused && fp32_weights;
  const auto moment = fused ? o.state_dtype : weight_dtype;
  return util::sat_mul(2 * int64_t(c10::elementSize(moment)), param_elements);  // saturating: a crafted shape
}

void set_learning_rate(torch::optim::Optimizer& optimizer, double lr) {
  for (auto& group : optimizer.param_groups()) group.options().set_lr(lr);
}

} // namespace shadowgrad::train
