#pragma once
// What DataParallel needs, separate from the full config.
//
//   auto dp = DataParallel::from_environment(DataParallelOptions::from_config(cfg), device);
#include <cstdint>

namespace shadowgrad::config {
struct Config;
}

namespace shadowgrad::distributed {

struct DataParallelOptions {
  double collective_timeout_s = 300;  // a collective (or the rendezvous) waits this long for the others
  double bucket_mb = 25;              // grad_reduce_bucket_mb: the fp32 bucket the shadow tree is summed through
  bool shard_optimizer = false;       // ZeRO-1 (shard_optimizer_over_data)
  bool shard_gradients = false;       // ZeRO-2 (shard_gradients_over_data): the shadow tree is cut too
  bool shard_parameters = false;      // ZeRO-3 (shard_parameters_over_data): the weights are cut too
  bool reshard_after_forward = true;  // ZeRO-3: a unit is given back after its forward (gathered again for backward)
  bool overlap = true;                // overlap_gradient_reduction: buckets start during the last backward
  // FNV-1a of the resolved config's YAML: verify_same_start checks every process was started with the same one.
  uint64_t config_hash = 0;

  static DataParallelOptions from_config(const config::Config& cfg);
};

} // namespace shadowgrad::distributed
