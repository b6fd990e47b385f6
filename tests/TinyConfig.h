#pragma once
// A tiny model and batch for fast tests: configs/tiny.yml (emb 32, 2 layers, vocab 64, seq 16), fp32 compute,
// 4 sequences per microbatch.
#include <string>

#include "config/Config.h"
#include "config/ConfigLoader.h"
#include "config/ConfigSchema.h"

inline shadowgrad::config::Config tiny_config() {
  auto c = shadowgrad::config::load_config(SHADOWGRAD_SOURCE_DIR "/configs/tiny.yml", {});
  c.per_device_batch_size = 4;
  c.gradient_accumulation_steps = 1;
  c.dtype = shadowgrad::config::ComputeDtype::float32;
  c.grad_dtype = shadowgrad::config::GradDtype::float32;
  c.steps = 8;
  c.num_threads = 1;
  c.learning_rate = 1e-2;
  return c;
}

// Sets a key from its text, as a YAML line or a key=value override would (for tests parameterised by value names).
inline void set_key(shadowgrad::config::Config& c, const std::string& key, const std::string& value) {
  shadowgrad::config::find_key(key)->set(c, value);
}
