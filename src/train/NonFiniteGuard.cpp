#include "train/NonFiniteGuard.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "util/Errors.h"

namespace shadowgrad::train {

void NonFiniteGuard::record(const StepStats& s) {
  if (!s.skipped) {
    state_.consecutive_nonfinite = 0;
    return;
  }
  ++state_.skipped_steps;
  ++state_.consecutive_nonfinite;
  spdlog::warn("step {}: non-finite loss ({}) or grad_norm ({}); update skipped ({} in a row, limit {})", s.step + 1,
               s.loss, s.grad_norm, state_.consecutive_nonfinite, max_);
}

void NonFiniteGuard::check(const StepStats& s) const {
  if (state_.consecutive_nonfinite < max_) return;
  throw NonFiniteError(fmt::format("steps {}..{} all had a non-finite loss or gradient norm "
                                   "(max_consecutive_nonfinite={}); lower learning_rate or check the data",
                                   s.step + 2 - state_.consecutive_nonfinite, s.step + 1, max_));
}

} // namespace shadowgrad::train
