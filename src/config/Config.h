#pragma once
// The resolved configuration: one typed field per key in ConfigKeys.def.
//
//   shadowgrad::config::Config cfg = shadowgrad::config::load_config("configs/base.yml", {"steps=10"});
//   cfg.gradient_accumulation_steps  // int64_t
#include <cstdint>
#include <set>
#include <string>

#include "config/ConfigEnums.h"

namespace shadowgrad::config {

// The value of an SG_INT_OR_AUTO key (per_device_batch_size) set to `auto`; the trainer replaces it before use.
inline constexpr int64_t kAuto = 0;

struct Config {
#define SG_SECTION(title)
#define SG_INT(name, def, min, help) int64_t name = def;
#define SG_FLOAT(name, def, min, max, help) double name = def;
#define SG_BOOL(name, def, help) bool name = def;
#define SG_STRING(name, def, help) std::string name = def;
#define SG_ENUM(name, type, def, help) type name = type::def;
#include "config/ConfigKeys.def"
#undef SG_SECTION
#undef SG_INT
#undef SG_FLOAT
#undef SG_BOOL
#undef SG_STRING
#undef SG_ENUM

  // Keys the YAML file set to other than their default, or an override set (filled by load_config). configs/base.yml
  // lists every key at its default, so only a value that differs counts as given there.
  std::set<std::string> given_keys;

  // Examples in one global batch on one process: per_device_batch_size x gradient_accumulation_steps.
  int64_t local_batch() const { return per_device_batch_size * gradient_accumulation_steps; }
  // Training positions one example holds (what tokens_seen, train_tokens and schedules in tokens count):
  // max_target_length, twice for a preference pair, which is two sequences.
  int64_t tokens_per_example() const {
    return max_target_length * (dataset_type == DatasetType::preference ? 2 : 1);
  }
  // train_tokens in whole examples (sequences; pairs for dataset_type=preference), rounded up; 0: no token budget.
  int64_t train_examples() const {
    return train_tokens > 0 ? (train_tokens + tokens_per_example() - 1) / tokens_per_example() : 0;
  }
  int64_t schedule_steps() const { return learning_rate_schedule_steps < 0 ? steps : learning_rate_schedule_steps; }
};

} // namespace shadowgrad::config
