#pragma once
// RoPE's inverse frequencies, with the scalings Hugging Face checkpoints use (rope_type default, linear, llama3).
//
//   RopeScaling s{RopeType::llama3, 32.0, 1.0, 4.0, 8192};
//   at::Tensor inv_freq = rope_inverse_frequencies(500000.0, 64, s);   // [32] float64
#include <cstdint>

#include <ATen/core/Tensor.h>

#include "config/ConfigEnums.h"

namespace shadowgrad::config {
struct Config;
}

namespace shadowgrad::model {

struct RopeScaling {
  config::RopeType type = config::RopeType::none;
  double factor = 1;
  double low_freq_factor = 1;    // llama3
  double high_freq_factor = 4;   // llama3
  int64_t original_max_position = 8192;  // llama3

  // The config's rope_* keys, read in one place for the decoder and for export's config.json.
  static RopeScaling from_config(const config::Config& cfg);
};

// theta^(-2i/head_dim) for i < head_dim/2, then scaled as `scaling` says; float64, on the CPU.
at::Tensor rope_inverse_frequencies(double theta, int64_t head_dim, const RopeScaling& scaling);

} // namespace shadowgrad::model
