#include "model/RopeTable.h"

#include <cmath>

#include <ATen/ATen.h>

#include "config/Config.h"

namespace shadowgrad::model {

RopeScaling RopeScaling::from_config(const config::Config& c) {
  return {c.rope_type, c.rope_factor, c.rope_low_freq_factor, c.rope_high_freq_factor, c.rope_original_max_position};
}

at::Tensor rope_inverse_frequencies(double theta, int64_t head_dim, const RopeScaling& s) {
  const int64_t half = head_dim / 2;
  auto inv_freq = at::pow(theta, -at::arange(half, at::kDouble) / double(half));
  switch (s.type) {
    case config::RopeType::none:
      return inv_freq;
    case config::RopeType::linear:  // positions divided by the factor: the same as dividing every frequency
      return inv_freq / s.factor;
    case config::RopeType::llama3: {
      // Long wavelengths (beyond the pretraining context / low_freq_factor) are slowed by `factor`, short ones
      // (below context / high_freq_factor) kept, and the band between blended linearly in context / wavelength.
      const double context = double(s.original_max_position);
      auto wavelength = 2 * M_PI / inv_freq;
      auto smooth = (context / wavelength - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
      auto blended = (1 - smooth) * inv_freq / s.factor + smooth * inv_freq;
      auto scaled = at::where(wavelength > context / s.low_freq_factor, inv_freq / s.factor, inv_freq);
      auto middle = (wavelength >= context / s.high_freq_factor) & (wavelength <= context / s.low_freq_factor);
      return at::where(middle, blended, scaled);
    }
  }
  return inv_freq;
}

} // namespace shadowgrad::model
