#include "train/StepOptions.h"

#include "config/Config.h"
#include "config/Dtypes.h"

namespace shadowgrad::train {

StepOptions StepOptions::from_config(const config::Config& c) {
  StepOptions o;
  o.microbatch = c.per_device_batch_size;
  o.accumulation_steps = c.gradient_accumulation_steps;
  o.clip_threshold = c.gradient_clipping_threshold;
  o.loss_chunk_tokens = c.loss_chunk_tokens;
  o.fused_kernels = c.fused_kernels;
  o.peak_lr = c.learning_rate;
  o.schedule_steps = c.schedule_steps();
  o.warmup_fraction = c.warmup_steps_fraction;
  o.final_lr_fraction = c.cosine_learning_rate_final_fraction;
  o.fidelity_period = c.grad_fidelity_period;
  o.grad_dtype = config::scalar_type(c.grad_dtype);
  o.rounding = c.grad_accum_rounding;
  o.rounding_seed = static_cast<uint64_t>(c.grad_accum_rounding_seed);
  o.fold_in_compute_dtype = c.fold_in_compute_dtype;
  o.noise_scale = c.gradient_noise_scale;
  o.noise_ema_decay = c.gns_ema_decay;
  o.optimizer = OptimizerOptions::from_config(c);
  return o;
}

} // namespace shadowgrad::train
