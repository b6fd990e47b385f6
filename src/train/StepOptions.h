#pragma once
// What one optimizer step needs (TrainStep), separate from the full config: the microbatch loop, the loss, the
// shadow tree's dtype and rounding, clipping, the LR schedule and the optimizer it builds.
//
//   auto options = StepOptions::from_config(cfg);
//   options.accumulation_steps = 1;   // e.g. a probe step
//   TrainStep step(options, model, *source, device);
#include <cstdint>

#include <c10/core/ScalarType.h>

#include "config/ConfigEnums.h"
#include "train/LrSchedule.h"
#include "train/OptimizerOptions.h"
#include "train/PreferenceLoss.h"

namespace shadowgrad::config {
struct Config;
}

namespace shadowgrad::train {

struct StepOptions {
  int64_t microbatch = 8;          // per_device_batch_size: sequences per forward/backward
  int64_t accumulation_steps = 1;  // K: microbatches folded per optimizer step (of the first step when the batch grows)
  int64_t max_accumulation_steps = 0;  // the largest K of the run when its batch grows (BatchSizePolicy); 0: fixed
  double clip_threshold = 1.0;     // global gradient norm; 0: off
  // > 0: the loss from the hidden states, this many token rows per task, without fp32 logits; 0: full logits.
  int64_t loss_chunk_tokens = 64;
  bool fused_kernels = true;  // the chunked loss's fused cross-entropy
  // Warmup then cosine or wsd decay (LrSchedule). lr.length is in steps (learning_rate_schedule_steps, or steps when
  // that is -1); with lr.unit = tokens, lr_schedule() turns it into tokens, unless lr_tokens (train_tokens) gives them.
  LrScheduleOptions lr;
  int64_t lr_tokens = 0;
  int64_t fidelity_period = 0;  // every this many steps, an fp32 reference tree too (grad_rel_error); 0: never
  c10::ScalarType grad_dtype = c10::kFloat;  // the shadow tree
  config::GradRounding rounding = config::GradRounding::nearest;
  uint64_t rounding_seed = 0;
  bool fold_in_compute_dtype = true;  // fold straight from the compute-dtype weight cast (FoldingCast.h)
  bool noise_scale = true;            // gradient_noise_scale
  double noise_ema_decay = 0.95;
  OptimizerOptions optimizer;
  PreferenceOptions preference;  // use_dpo: the loss when the source holds pairs (data/PairSource.h)

  static StepOptions from_config(const config::Config& cfg);
  // The schedule of a run whose first step trains `first_global_batch` sequences: in tokens, a length of N steps is
  // N steps of that batch.
  LrScheduleOptions lr_schedule(int64_t first_global_batch) const;
};

} // namespace shadowgrad::train
