#include "train/CheckpointTopology.h"

#include <cstring>

#include <torch/optim/optimizer.h>

#include "distributed/DataParallel.h"
#include "distributed/ShardedOptimizer.h"
#include "train/OptimizerFactory.h"
#include "train/TrainStep.h"

namespace shadowgrad::train {

checkpoint::Topology checkpoint_topology(TrainStep& step) {
  checkpoint::Topology t;
  for (const auto& p : step.model()->parameters())
    if (p.requires_grad()) t.params.push_back(p);  // the parameters ZeRO-1 flattens, in its order
  if (auto* dp = step.data_parallel()) {
    t.rank = dp->rank();
    t.world_size = dp->world_size();
    t.exchange = [dp](const std::vector<int64_t>& mine) { return dp->all_gather_ints(mine); };
  }
  if (const auto* zero = step.sharded_optimizer()) {
    t.sharded = true;
    t.shard_begin = zero->shard_begin();
    t.shard_owned = zero->shard_owned();
  }
  t.make_whole_optimizer = [options = step.options().optimizer](const std::vector<at::Tensor>& params) {
    return make_optimizer(options, params);
  };
  return t;
}

std::string shared_run_dir(const checkpoint::Topology& topology, const std::string& rank0_dir) {
  if (topology.world_size == 1) return rank0_dir;
  const bool root = topology.rank == 0;
  const int64_t length = topology.exchange({root ? int64_t(rank0_dir.size()) : 0}).at(0);
  if (length == 0) return "";
  std::vector<int64_t> words((length + 7) / 8, 0);  // the text, 8 bytes to an int64
  if (root) std::memcpy(words.data(), rank0_dir.data(), rank0_dir.size());
  const std::vector<int64_t> all = topology.exchange(words);  // rank 0's words come first
  std::string out(length, '\0');
  std::memcpy(out.data(), all.data(), length);
  return out;
}

} // namespace shadowgrad::train
