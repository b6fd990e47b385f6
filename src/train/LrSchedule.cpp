#include "train/LrSchedule.h"

#include <algorithm>
#include <cmath>

namespace shadowgrad::train {

LrSchedule::LrSchedule(double peak, int64_t schedule_steps, double warmup_fraction, double final_fraction)
    : peak_(peak),
      final_fraction_(final_fraction),
      schedule_steps_(std::max<int64_t>(1, schedule_steps)),
      warmup_steps_(static_cast<int64_t>(std::round(warmup_fraction * schedule_steps))) {}

double LrSchedule::operator()(int64_t step) const {
  // Warmup counts from 1 so that the first step already moves the weights.
  if (step < warmup_steps_) return peak_ * double(step + 1) / double(warmup_steps_);
  if (step >= schedule_steps_) return peak_ * final_fraction_;
  const double span = std::max<int64_t>(1, schedule_steps_ - warmup_steps_);
  const double progress = double(step - warmup_steps_) / span;
  const double cosine = 0.5 * (1.0 + std::cos(M_PI * progress));
  return peak_ * (final_fraction_ + (1.0 - final_fraction_) * cosine);
}

} // namespace shadowgrad::train
