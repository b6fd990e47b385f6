#pragma once
// ZeRO-1 (shard_optimizer_over_data=true): each process keeps optimizer state for only its 1/WORLD_SIZE of the
// parameters, updates that slice, and the updated parameters are then all-gathered.
//
//   ShardedOptimizer zero(comm, model->parameters(), bucket_bytes);
//   auto optimizer = make_optimizer(cfg, {zero.shard()});   // state for this process's slice only
//   ... accumulate, reduce the shadow tree (every process holds the full summed gradient), clip ...
//   zero.step(accumulator, *optimizer);                      // update own slice, all-gather, zero the shadow
//
// The parameters are read as one flat vector (FlatView) and cut into WORLD_SIZE equal contiguous slices,
// so the split is exact to one element whatever the parameter shapes. The optimizer sees the slice as one 1-D
// tensor. Adam, AdamW and SGD are element-wise, so updating a slice gives the same numbers as updating whole
// tensors. The all-gather runs in rounds through one fp32 buffer of about `bucket_bytes`.
#include <cstdint>
#include <memory>
#include <vector>

#include <ATen/core/Tensor.h>

namespace torch::optim {
class Optimizer;
}
namespace shadowgrad::accumulate {
class ShadowAccumulator;
}

namespace shadowgrad::distributed {

class Communicator;

class ShardedOptimizer {
 public:
  ShardedOptimizer(std::shared_ptr<Communicator> comm, const std::vector<at::Tensor>& params, int64_t bucket_bytes);
  ~ShardedOptimizer();

  // This process's slice of the flattened parameters, a leaf the optimizer owns (padded to shard_size()).
  const at::Tensor& shard() const { return shard_; }
  // Flat index of the slice's first element, and the slice length every process pads to.
  int64_t shard_begin() const { return begin_; }
  int64_t shard_size() const { return size_; }
  // Elements of the slice that are real parameters (the last process's slice can be shorter).
  int64_t shard_owned() const { return owned_; }

  // One update: reads the slice of the (already reduced and clipped) shadow tree as the slice's gradient,
  // runs the optimizer on it, zeroes the shadow tree, and all-gathers the updated slices into every parameter.
  void step(accumulate::ShadowAccumulator& acc, torch::optim::Optimizer& optimizer);
  // The all-gather alone: writes every process's slice into the parameters. Returns the rounds it took.
  int64_t all_gather_parameters();

 private:
  std::shared_ptr<Communicator> comm_;
  std::vector<at::Tensor> params_;
  int64_t bucket_bytes_, total_ = 0, begin_ = 0, size_ = 0, owned_ = 0;
  at::Tensor shard_;
};

} // namespace shadowgrad::distributed
