#include "train/CheckpointTopology.h"

#include <torch/optim/optimizer.h>

#include "checkpoint/Agreement.h"
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
    // ZeRO-3 of a full fine-tune: the optimizer steps the weight shards' own pieces, the only copy of this range.
    if (step.parameter_shards() && !step.model()->options().lora.enabled()) t.weight_pieces = zero->pieces();
  }
  t.make_whole_optimizer = [options = step.options().optimizer](const std::vector<at::Tensor>& params) {
    return make_optimizer(options, params);
  };
  return t;
}

std::string shared_run_dir(const checkpoint::Topology& topology, const std::string& rank0_dir) {
  return checkpoint::gather_texts(topology, topology.rank == 0 ? rank0_dir : "").at(0);
}

} // namespace shadowgrad::train
