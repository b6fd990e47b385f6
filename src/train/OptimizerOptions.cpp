#include "train/OptimizerOptions.h"

#include "config/Config.h"
#include "config/Dtypes.h"

namespace shadowgrad::train {

OptimizerOptions OptimizerOptions::from_config(const config::Config& c) {
  OptimizerOptions o;
  o.type = c.opt_type;
  o.learning_rate = c.learning_rate;
  o.beta1 = c.adam_b1;
  o.beta2 = c.adam_b2;
  o.eps = c.adam_eps;
  o.weight_decay = c.adam_weight_decay;
  o.fused = c.opt_fused;
  o.state_dtype = config::scalar_type(c.adam_state_dtype);
  return o;
}

} // namespace shadowgrad::train
