#pragma once
// One metrics.jsonl row per optimizer step, built from the step's own numbers, so the list of keys is written
// in one place (docs/tools.md lists them).
//
//   metrics.write(step_metrics(stats, peak_bytes, skipped_steps));
#include <cstdint>

#include "train/MetricsWriter.h"

namespace shadowgrad::train {

struct StepStats;

// step (1-based), loss, grad_norm, lr, tokens, step_time_s, tokens_per_s, peak_mem_bytes, skipped_steps and
// the per-phase seconds.
JsonNumbers step_metrics(const StepStats& st, int64_t peak_mem_bytes, int64_t skipped_steps);

} // namespace shadowgrad::train
