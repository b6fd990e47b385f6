#pragma once
// ZeRO-1 (shard_optimizer_over_data=true): each process keeps optimizer state for only its 1/WORLD_SIZE of the
// parameters, updates that slice, and the updated parameters are then all-gathered.
//
//   ShardedOptimizer zero(comm, model->parameters(), bucket_bytes);
//   auto optimizer = make_optimizer(cfg, zero.pieces());     // state for this process's range only
//   ... accumulate, reduce the shadow tree (ZeRO-1: whole on every process; ZeRO-2: this range only), clip ...
//   zero.step(accumulator, *optimizer);                      // update own range, all-gather, zero the shadow
//
// The range is ShardPlan's (one contiguous range of the flat parameters, exact to one element). The optimizer's
// parameters are detached 1-D views of the parameters' pieces in that range, and their gradients views of the
// shadow tree's: nothing of the range is copied (a copy of the range and of its gradient were the transient buffers
// that made ZeRO-1 save less than it should). Adam, AdamW and SGD are element-wise, so updating pieces gives the same
// numbers as updating whole tensors. The all-gather runs in rounds through one fp32 buffer of about `bucket_bytes`.
#include <cstdint>
#include <memory>
#include <vector>

#include <ATen/core/Tensor.h>

#include "distributed/ShardPlan.h"

namespace torch::optim {
class Optimizer;
}
namespace shadowgrad::accumulate {
class ShadowAccumulator;
}

namespace shadowgrad::distributed {

class Communicator;
class ParameterShards;

class ShardedOptimizer {
 public:
  // `weights`: ZeRO-3 of a full fine-tune (ParameterShards.h, over the same parameters in the same order): its pieces
  // are the optimizer's parameters (the only copy of this range), and step() releases the gathered units instead of
  // all-gathering. Null: the pieces are views of the parameters.
  ShardedOptimizer(std::shared_ptr<Communicator> comm, const std::vector<at::Tensor>& params, int64_t bucket_bytes,
                   ParameterShards* weights = nullptr);
  ~ShardedOptimizer();

  // The optimizer's parameters: views of this process's pieces of the parameters, in flat order.
  const std::vector<at::Tensor>& pieces() const { return pieces_; }
  const ShardPlan& plan() const { return plan_; }
  // Flat index of the range's first element, and the range length every process pads to in the all-gather.
  int64_t shard_begin() const { return plan_.begin(); }
  int64_t shard_size() const { return plan_.shard_size(); }
  // Elements of the range (the last process's range can be shorter).
  int64_t shard_owned() const { return plan_.owned(); }

  // One update: lends this range of the (already reduced and clipped) shadow tree to the pieces as their gradient
  // (the whole tree's pieces, or the accumulator's own pieces under ZeRO-2), runs the optimizer, zeroes the shadow
  // tree, and all-gathers the updated ranges into every parameter (ZeRO-3: lets every unit go, so the next forward
  // gathers the updated pieces).
  void step(accumulate::ShadowAccumulator& acc, torch::optim::Optimizer& optimizer);
  // The all-gather alone: writes every process's slice into the parameters. Returns the rounds it took.
  int64_t all_gather_parameters();

 private:
  std::shared_ptr<Communicator> comm_;
  std::vector<at::Tensor> params_;
  ShardPlan plan_;
  int64_t bucket_bytes_;
  std::vector<at::Tensor> pieces_;
  ParameterShards* weights_;
};

} // namespace shadowgrad::distributed
