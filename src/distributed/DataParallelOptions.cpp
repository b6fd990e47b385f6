#include "distributed/DataParallelOptions.h"

#include <string>

#include "config/Config.h"
#include "config/ConfigWriter.h"
#include "util/Hash.h"

namespace shadowgrad::distributed {

DataParallelOptions DataParallelOptions::from_config(const config::Config& c) {
  DataParallelOptions o;
  o.collective_timeout_s = c.collective_timeout_s;
  o.bucket_mb = c.grad_reduce_bucket_mb;
  o.shard_optimizer = c.shard_optimizer_over_data;
  o.shard_gradients = c.shard_gradients_over_data;
  o.shard_parameters = c.shard_parameters_over_data;
  o.reshard_after_forward = c.reshard_after_forward;
  o.overlap = c.overlap_gradient_reduction;
  const std::string yaml = config::to_yaml(c);
  o.config_hash = util::fnv1a64(yaml.data(), yaml.size());
  return o;
}

} // namespace shadowgrad::distributed
