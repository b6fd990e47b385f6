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
  o.lr.peak = c.learning_rate;
  o.lr.length = double(c.schedule_steps());
  o.lr.warmup_fraction = c.warmup_steps_fraction;
  o.lr.final_fraction = c.cosine_learning_rate_final_fraction;
  o.lr.type = c.lr_schedule_type;
  o.lr.decay_fraction = c.wsd_decay_steps_fraction;
  o.lr.decay_style = c.wsd_decay_style;
  // A batch that changes (or a budget in tokens) makes steps of different sizes: measure the schedule in data.
  const bool batch_changes = !c.batch_size_schedule.empty() || c.batch_size_policy != config::BatchSizePolicy::none;
  if (batch_changes || c.train_tokens > 0) o.lr.unit = LrUnit::tokens;
  if (c.train_tokens > 0 && c.learning_rate_schedule_steps < 0) o.lr_tokens = c.train_tokens;
  o.lr.tokens_per_sequence = c.tokens_per_example();  // tokens count examples x this, as batch_size_schedule does
  o.fidelity_period = c.grad_fidelity_period;
  o.grad_dtype = config::scalar_type(c.grad_dtype);
  o.rounding = c.grad_accum_rounding;
  o.rounding_seed = static_cast<uint64_t>(c.grad_accum_rounding_seed);
  o.fold_in_compute_dtype = c.fold_in_compute_dtype;
  o.noise_scale = c.gradient_noise_scale;
  o.noise_ema_decay = c.gns_ema_decay;
  o.optimizer = OptimizerOptions::from_config(c);
  o.preference = PreferenceOptions::from_config(c);
  return o;
}

LrScheduleOptions StepOptions::lr_schedule(int64_t first_global_batch) const {
  LrScheduleOptions o = lr;
  if (o.unit == LrUnit::tokens)
    o.length = lr_tokens > 0 ? double(lr_tokens) : lr.length * double(first_global_batch * lr.tokens_per_sequence);
  return o;
}

} // namespace shadowgrad::train
