#include "memory/BatchFit.h"

#include <algorithm>

#include <fmt/format.h>

namespace shadowgrad::memory {

MicrobatchModel MicrobatchModel::fit(const ProbePeaks& p, int64_t state_added_later) {
  MicrobatchModel m;
  const int64_t span = p.large_batch - p.small_batch;
  // Rounded up: a prediction that errs, errs towards not fitting.
  m.per_sequence = span > 0 ? std::max<int64_t>(0, (p.large_peak - p.small_peak + span - 1) / span) : 0;
  m.at_zero = p.small_peak - m.per_sequence * p.small_batch + state_added_later;
  return m;
}

std::optional<MicrobatchChoice> largest_fitting(const MicrobatchModel& model, int64_t local_batch, int64_t budget) {
  std::optional<MicrobatchChoice> best;
  for (int64_t d = 1; d <= local_batch; ++d)  // only microbatches that split the local batch evenly
    if (local_batch % d == 0 && model.predicted_peak(d) <= budget) best = MicrobatchChoice{d, model.predicted_peak(d)};
  return best;
}

std::string mib_number(int64_t bytes) {
  const double m = double(bytes) / (1 << 20);
  return m >= 100 ? fmt::format("{:.0f}", m) : fmt::format("{:.3g}", m);
}

std::string mib(int64_t bytes) { return mib_number(bytes) + " MiB"; }

std::string does_not_fit_message(const MemoryEstimate& e, int64_t microbatch, int64_t predicted, int64_t budget,
                                 const std::string& budget_source) {
  std::string levers;
  auto lever = [&levers](const char* setting, int64_t saves, const char* how) {
    if (saves <= 0) return;
    levers += fmt::format("{}{} saves {}{}", levers.empty() ? "" : "; ", setting, mib(saves), how);
  };
  lever("grad_dtype=bfloat16", e.save_grad_bf16, " (2 bytes/param off the shadow tree)");
  lever("adam_state_dtype=bfloat16", e.save_adam_bf16, " (half the AdamW moments)");
  lever("remat_policy=full", e.save_remat_full, " at per_device_batch_size=1 (measured)");
  return fmt::format("per_device_batch_size={} does not fit: predicted peak {} over the memory budget of {} ({}). "
                     "Estimate from a probe of this model: weights {}, optimizer state {}, shadow tree {}, {} per "
                     "sequence; {} at per_device_batch_size=1. {}",
                     microbatch, mib(predicted), mib(budget), budget_source, mib(e.weights), mib(e.optimizer_state),
                     mib(e.shadow_tree), mib(e.per_sequence), mib(e.peak_at_one),
                     levers.empty() ? "Every lever (grad_dtype, adam_state_dtype, remat_policy) is already set"
                                    : "Levers on this model: " + levers + ".");
}

} // namespace shadowgrad::memory
