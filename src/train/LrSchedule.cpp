#include "train/LrSchedule.h"

#include <algorithm>
#include <cmath>

namespace shadowgrad::train {

LrSchedule::LrSchedule(LrScheduleOptions options) : o_(options) {
  o_.length = std::max(1.0, std::round(o_.length));
  warmup_ = std::round(o_.warmup_fraction * o_.length);
}

double LrSchedule::decay_start() const {
  if (o_.type == config::LrScheduleType::cosine) return warmup_;
  return std::max(warmup_, std::round((1.0 - o_.decay_fraction) * o_.length));
}

double LrSchedule::of_step(int64_t step, int64_t first_sequence, int64_t sequences) const {
  if (o_.unit == LrUnit::steps) return (*this)(step);
  const double per_sequence = double(o_.tokens_per_sequence);
  return at(double(first_sequence) * per_sequence, double(sequences) * per_sequence);
}

double LrSchedule::at(double position, double size) const {
  const double peak = o_.peak, final_fraction = o_.final_fraction;
  // (A step that straddles the warmup's end, possible in tokens, gets the peak.)
  if (position < warmup_) return position + size <= warmup_ ? peak * (position + size) / warmup_ : peak;
  if (position >= o_.length) return peak * final_fraction;
  const double start = decay_start();
  if (position < start) return peak;  // wsd's stable part
  const double progress = (position - start) / std::max(1.0, o_.length - start);
  const bool cosine = o_.type == config::LrScheduleType::cosine || o_.decay_style == config::WsdDecayStyle::cosine;
  const double shape = cosine ? 0.5 * (1.0 + std::cos(M_PI * progress)) : 1.0 - progress;
  return peak * (final_fraction + (1.0 - final_fraction) * shape);
}

} // namespace shadowgrad::train
