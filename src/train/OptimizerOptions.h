#pragma once
// What make_optimizer needs to build the optimizer, separate from the full config.
//
//   auto options = OptimizerOptions::from_config(cfg);   // opt_type, learning_rate, adam_*, opt_fused
//   auto optimizer = make_optimizer(options, model->parameters());
#include <c10/core/ScalarType.h>

#include "config/ConfigEnums.h"

namespace shadowgrad::config {
struct Config;
}

namespace shadowgrad::train {

struct OptimizerOptions {
  using Type = config::OptType;
  Type type = Type::adamw;
  double learning_rate = 3e-3;  // the initial rate; the step sets the schedule's rate before every update
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;  // decoupled (AdamW), L2 penalty (Adam, SGD)
  // adamw: FusedAdamW (one pass per parameter, same math and state); false: torch::optim::AdamW.
  bool fused = true;
  // FusedAdamW's moments for fp32 parameters (bf16 halves the state).
  c10::ScalarType state_dtype = c10::kFloat;

  static OptimizerOptions from_config(const config::Config& cfg);
};

} // namespace shadowgrad::train
