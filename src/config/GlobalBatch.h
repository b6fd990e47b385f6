#pragma once
// global_batch_size -> gradient_accumulation_steps. The config alone cannot do it: K depends on the process count,
// which only the launcher knows (WORLD_SIZE), and which an elastic restart may change.
//
//   auto cfg = load_config(path, overrides);
//   derive_accumulation_steps(cfg, env.world_size);   // before anything is written; ConfigError when it cannot split
//   cfg.gradient_accumulation_steps                   // global_batch_size / (per_device_batch_size x WORLD_SIZE)
#include <cstdint>
#include <string>

#include "config/Config.h"

namespace shadowgrad::config {

// With global_batch_size = 0, nothing changes. Otherwise sets gradient_accumulation_steps to
// global_batch_size / (per_device_batch_size x world_size). Throws ConfigError naming the three numbers and the
// per_device_batch_size values that would divide, when it does not divide; and naming both values when
// gradient_accumulation_steps is in cfg.given_keys with another value. Calling it again is harmless.
// per_device_batch_size=auto: only checks that WORLD_SIZE divides global_batch_size (and that no K was given); K is
// derived by a second call once train::fit_microbatch has chosen the microbatch.
void derive_accumulation_steps(Config& cfg, int64_t world_size);

// `config_yaml` (a config.yml text) without its gradient_accumulation_steps line when it sets global_batch_size: that
// K was derived from the process count, not given, so the same command at another WORLD_SIZE compares equal.
std::string without_derived_k(const std::string& config_yaml);

// Sequences in one optimizer step over all processes: per_device_batch_size x gradient_accumulation_steps x world.
inline int64_t global_batch(const Config& cfg, int64_t world_size) { return cfg.local_batch() * world_size; }

} // namespace shadowgrad::config
