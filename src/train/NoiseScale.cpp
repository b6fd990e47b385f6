#include "train/NoiseScale.h"

#include <cmath>
#include <limits>
#include <stdexcept>

namespace shadowgrad::train {

std::optional<NoiseScaleStep> NoiseScale::update(const std::vector<double>& folded_sq,
                                                 const std::vector<int64_t>& micro_tokens, double big_sq,
                                                 int64_t global_tokens) {
  if (folded_sq.size() != micro_tokens.size())
    throw std::invalid_argument("NoiseScale::update: one token count per microbatch norm is needed");
  if (!std::isfinite(big_sq) || global_tokens <= 0) return std::nullopt;
  const double T = double(global_tokens);
  double micro = 0, grad_sq = 0, trace = 0;
  int64_t n = 0;
  for (size_t m = 0; m < folded_sq.size(); ++m) {
    const double b = double(micro_tokens[m]);
    if (b <= 0) continue;  // an all-padding microbatch folds nothing
    if (b >= T || !std::isfinite(folded_sq[m])) return std::nullopt;
    const double small_sq = folded_sq[m] * (T / b) * (T / b);
    micro += small_sq;
    grad_sq += (T * big_sq - b * small_sq) / (T - b);
    trace += (small_sq - big_sq) / (1.0 / b - 1.0 / T);
    ++n;
  }
  if (n < 2) return std::nullopt;
  state_.ema_grad_sq = decay_ * state_.ema_grad_sq + (1 - decay_) * (grad_sq / double(n));
  state_.ema_trace = decay_ * state_.ema_trace + (1 - decay_) * (trace / double(n));
  ++state_.updates;
  return NoiseScaleStep{micro / double(n), big_sq, gns_tokens()};
}

double NoiseScale::gns_tokens() const {
  // Both EMAs start at zero and share the same (1 - decay^t) bias, which cancels in the ratio.
  return state_.ema_grad_sq > 0 ? state_.ema_trace / state_.ema_grad_sq : std::numeric_limits<double>::quiet_NaN();
}

} // namespace shadowgrad::train
