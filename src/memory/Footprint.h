#pragma once
// What a run will hold at the least, known from its config before any tensor exists: the weights as stored, the
// trained set's shadow tree and optimizer state, the hoisted weight casts, and a lower bound of what backward keeps
// of one microbatch. train/MemoryProbe.h fills it from a config (footprint_from_config) and refuses, before the model
// is built, a run whose footprint is over what the process may take: a std::bad_alloc or the OOM killer is no answer.
//
//   memory::Footprint f = train::footprint_from_config(cfg, world);
//   if (f.total() > available) throw InputError(memory::does_not_fit_before_build(f, what, available, source, fits));
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "util/Saturating.h"

namespace shadowgrad::memory {

struct Footprint {
  int64_t weights = 0;          // every weight as stored: the base (trained or frozen) and any adapters
  int64_t shadow_tree = 0;      // the trained set in grad_dtype
  int64_t optimizer_state = 0;  // after the first update (this process's slice under ZeRO-1)
  int64_t weight_casts = 0;     // hoist_weight_cast: the trained weights in the compute dtype, held through a step
  int64_t activations = 0;      // a lower bound: what backward keeps of one microbatch
  // shard_parameters_over_data where rank 0 probes the microbatch (per_device_batch_size=auto, memory_budget_mib):
  // every process builds (or loads) the whole model before it keeps its range, so the whole weights are held once at
  // the start. 0 otherwise: the model is built unit by unit into the range (train/ModelBuild.h), and checkpoints are
  // written and read per process.
  int64_t whole_at_start = 0;
  // Saturating: a part that is INT64_MAX (a shape too big to count, util/Saturating.h) keeps the total there.
  int64_t total() const {
    return std::max(whole_at_start,
                    util::sat_add(util::sat_add(util::sat_add(util::sat_add(weights, shadow_tree), optimizer_state),
                                                weight_casts),
                                  activations));
  }
};

// Another config that was tried, as the overrides that make it ("lora_rank=16 weight_dtype=bfloat16"), and its total.
struct FootprintAlternative {
  std::string overrides;
  int64_t total = 0;
};

// "1.50 GiB" from 1 GiB up, else "123 MiB" (memory/BatchFit.h's mib()).
std::string gib(int64_t bytes);

// "weights 14.9 GiB + shadow tree ... = at least 31.2 GiB"
std::string describe(const Footprint& f);

// The refusal: what the run needs (`what` names the model and how it trains), what the process may take and where
// that figure comes from, and which of `tried` would fit (or the smallest, when none does).
std::string does_not_fit_before_build(const Footprint& f, const std::string& what, int64_t available,
                                      const std::string& available_source,
                                      const std::vector<FootprintAlternative>& tried);

} // namespace shadowgrad::memory
