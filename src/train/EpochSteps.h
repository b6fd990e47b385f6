#pragma once
// num_epochs -> steps: the optimizer steps whose global batches cover num_epochs passes over the training data.
//
//   auto source = data::make_source(data::DataOptions::from_config(cfg));
//   derive_steps_from_epochs(cfg, *source, world);   // cfg.steps = ceil(examples in num_epochs epochs / global batch)
//
// The global batch is global_batch_size when set (so the steps do not change with the process count: resumes and
// elastic restarts derive the same number), else per_device_batch_size x gradient_accumulation_steps x world.
#include <cstdint>

#include "config/Config.h"
#include "data/DataSource.h"

namespace shadowgrad::train {

// With num_epochs = 0, nothing changes. Otherwise sets cfg.steps and logs how it was derived. Throws ConfigError when
// steps or train_tokens was given too, for synthetic data, and when the global batch changes during the run
// (batch_size_schedule, batch_size_policy=gns: naming the train_tokens that would cover the epochs instead).
void derive_steps_from_epochs(config::Config& cfg, const data::DataSource& source, int64_t world);

} // namespace shadowgrad::train
