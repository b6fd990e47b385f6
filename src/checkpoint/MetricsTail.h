#pragma once
// Cutting metrics.jsonl back to a checkpoint's step when a run resumes.
#include <cstdint>
#include <string>

namespace shadowgrad::checkpoint {

struct MetricsTail {
  double first_loss, last_loss;  // NaN when absent
};

// Drops the lines of metrics.jsonl whose "step" is past `step` (and a torn last line), atomically, so a
// resumed run has each step once. Returns the losses of the first and last lines kept (for summary.json).
MetricsTail truncate_metrics(const std::string& path, int64_t step);

} // namespace shadowgrad::checkpoint
