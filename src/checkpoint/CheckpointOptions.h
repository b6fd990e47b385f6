#pragma once
// What a Checkpointer needs, separate from the full config: when to write and what to keep, what to resume from,
// and the parts of the config a checkpoint records (config.yml, the frozen keys, the batch layout).
//
//   auto options = CheckpointOptions::from_config(cfg);   // after per_device_batch_size and K are resolved
//   Checkpointer ckpt(options, run_dir, topology);
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace shadowgrad::config {
struct Config;
}

namespace shadowgrad::checkpoint {

// How a run splits its global batch (see RunLayout.h).
struct BatchLayout {
  int64_t per_device_batch_size = 8;
  int64_t gradient_accumulation_steps = 1;
  int64_t global_batch_size = 0;  // the key: 0 when K was given rather than derived
  bool grows = false;  // batch_size_schedule or batch_size_policy=gns: the global batch changes during the run
};

struct CheckpointOptions {
  using KeyValues = std::vector<std::pair<std::string, std::string>>;  // (key, value as printed in YAML)
  bool enable = true;  // enable_checkpointing
  int64_t period = 100;  // checkpoint_period: every this many steps, and after the last
  int64_t steps = 300;   // the run's last step
  int64_t max_to_keep = 2;  // max_num_checkpoints_to_keep; 0 keeps all
  bool resume = true;
  int64_t load_checkpoint_step = -1;  // -1: the latest loadable
  std::string config_yaml;  // written as each checkpoint's config.yml
  KeyValues frozen;         // the keys a checkpoint pins, in schema order: the manifest's fingerprint
  KeyValues printed;        // every key, in schema order: the "resuming with changed keys" line
  BatchLayout layout;

  static CheckpointOptions from_config(const config::Config& cfg);
};

} // namespace shadowgrad::checkpoint
