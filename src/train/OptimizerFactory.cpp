#include "train/OptimizerFactory.h"

#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include "config/Config.h"
#include "config/Dtypes.h"
#include "train/FusedAdamW.h"

namespace shadowgrad::train {

std::unique_ptr<torch::optim::Optimizer> make_optimizer(const config::Config& c, const std::vector<at::Tensor>& params) {
  using namespace torch::optim;
  if (c.opt_type == config::OptType::adam)
    return std::make_unique<Adam>(
        params, AdamOptions(c.learning_rate).betas({c.adam_b1, c.adam_b2}).eps(c.adam_eps).weight_decay(c.adam_weight_decay));
  if (c.opt_type == config::OptType::sgd) return std::make_unique<SGD>(params, SGDOptions(c.learning_rate).weight_decay(c.adam_weight_decay));
  auto options = AdamWOptions(c.learning_rate).betas({c.adam_b1, c.adam_b2}).eps(c.adam_eps).weight_decay(c.adam_weight_decay);
  if (c.opt_fused) {
    auto fused = std::make_unique<FusedAdamW>(params, options);
    fused->set_state_dtype(config::scalar_type(c.adam_state_dtype));
    return fused;
  }
  return std::make_unique<AdamW>(params, options);
}

int64_t optimizer_state_bytes_after_update(const config::Config& c, int64_t param_elements) {
  if (c.opt_type == config::OptType::sgd) return 0;  // no momentum: SGDOptions' default
  // FusedAdamW keeps fp32 parameters' moments in adam_state_dtype; everything else (Adam, unfused AdamW, and
  // FusedAdamW's fallback for bf16 parameters) keeps them in the parameter's dtype.
  const bool fp32_weights = c.weight_dtype == config::FloatDtype::float32;
  const bool fused = c.opt_type == config::OptType::adamw && c.opt_fused && fp32_weights;
  const auto moment = fused ? config::scalar_type(c.adam_state_dtype) : config::scalar_type(c.weight_dtype);
  return 2 * int64_t(c10::elementSize(moment)) * param_elements;
}

void set_learning_rate(torch::optim::Optimizer& optimizer, double lr) {
  for (auto& group : optimizer.param_groups()) group.options().set_lr(lr);
}

} // namespace shadowgrad::train
