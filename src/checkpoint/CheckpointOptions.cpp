#include "checkpoint/CheckpointOptions.h"

#include "config/Config.h"
#include "config/ConfigSchema.h"
#include "config/ConfigWriter.h"

namespace shadowgrad::checkpoint {

CheckpointOptions CheckpointOptions::from_config(const config::Config& c) {
  CheckpointOptions o;
  o.enable = c.enable_checkpointing;
  o.period = c.checkpoint_period;
  o.steps = c.steps;
  o.max_to_keep = c.max_num_checkpoints_to_keep;
  o.resume = c.resume;
  o.load_checkpoint_step = c.load_checkpoint_step;
  o.config_yaml = config::to_yaml(c);
  for (const auto& key : config::schema()) {
    const std::string value = key.get(c);
    // The SG_FROZEN_* keys of ConfigKeys.def: parameter shapes, vocabulary, master-weight dtype, optimizer.
    if (key.frozen) o.frozen.emplace_back(key.name, value);
    o.printed.emplace_back(key.name, value);
  }
  o.layout = {c.per_device_batch_size, c.gradient_accumulation_steps, c.global_batch_size,
              !c.batch_size_schedule.empty() || c.batch_size_policy != config::BatchSizePolicy::none};
  return o;
}

} // namespace shadowgrad::checkpoint
