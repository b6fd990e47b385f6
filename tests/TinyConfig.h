#pragma once
// A tiny model and batch for fast tests: emb 32, 2 layers, vocab 64, seq 16, fp32 compute.
#include <string>

#include "config/Config.h"
#include "config/ConfigSchema.h"

inline shadowgrad::config::Config tiny_config() {
  shadowgrad::config::Config c;
  c.base_emb_dim = 32;
  c.base_num_query_heads = 2;
  c.base_num_kv_heads = 1;
  c.head_dim = 16;
  c.base_mlp_dim = 64;
  c.base_num_decoder_layers = 2;
  c.vocab_size = 64;
  c.max_target_length = 16;
  c.per_device_batch_size = 4;
  c.gradient_accumulation_steps = 1;
  c.dtype = shadowgrad::config::FloatDtype::float32;
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
