#include "distributed/ShardedOptimizer.h"

#include <algorithm>

#include <ATen/ATen.h>
#include <torch/optim/optimizer.h>

#include "accumulate/ShadowAccumulator.h"
#include "distributed/BucketedReduce.h"
#include "distributed/Communicator.h"
#include "distributed/FlatView.h"

namespace shadowgrad::distributed {

ShardedOptimizer::ShardedOptimizer(std::shared_ptr<Communicator> comm, const std::vector<at::Tensor>& params,
                                   int64_t bucket_bytes)
    : comm_(std::move(comm)), bucket_bytes_(bucket_bytes) {
  for (const auto& p : params)
    if (p.requires_grad()) params_.push_back(p);
  if (params_.empty()) throw std::invalid_argument("ShardedOptimizer: no trainable parameters");
  total_ = FlatView(params_).numel();
  const int64_t world = comm_->world_size();
  size_ = (total_ + world - 1) / world;
  begin_ = std::min(total_, comm_->rank() * size_);
  owned_ = std::min(total_, begin_ + size_) - begin_;
  shard_ = at::zeros({size_}, params_.front().options().requires_grad(false));
  FlatView(params_).read(begin_, shard_.narrow(0, 0, owned_));
}

ShardedOptimizer::~ShardedOptimizer() = default;

void ShardedOptimizer::step(accumulate::ShadowAccumulator& acc, torch::optim::Optimizer& optimizer) {
  at::NoGradGuard no_grad;
  // Re-read the slice: the parameters are the source of truth (a checkpoint may have been loaded into them).
  FlatView(params_).read(begin_, shard_.narrow(0, 0, owned_));
  at::Tensor grad = at::zeros({size_}, shard_.options().dtype(acc.grad_dtype()));
  FlatView(acc.shadows()).read(begin_, grad.narrow(0, 0, owned_));
  shard_.mutable_grad() = grad;
  optimizer.step();
  shard_.mutable_grad() = at::Tensor();
  acc.zero_();
  all_gather_parameters();
}

int64_t ShardedOptimizer::all_gather_parameters() {
  at::NoGradGuard no_grad;
  const int world = comm_->world_size();
  FlatView flat(params_);
  // One round moves `chunk` elements of every slice: the gather buffer holds world x chunk fp32 values.
  const int64_t chunk = std::min(size_, std::max<int64_t>(1, bucket_elements(bucket_bytes_) / world));
  const auto fp32 = shard_.options().dtype(at::kFloat);
  at::Tensor send = at::empty({chunk}, fp32);
  at::Tensor gathered = at::empty({world, chunk}, fp32);
  int64_t rounds = 0;
  for (int64_t pos = 0; pos < size_; pos += chunk, ++rounds) {
    const int64_t n = std::min(chunk, size_ - pos);
    at::Tensor in = send.narrow(0, 0, n);
    in.copy_(shard_.narrow(0, pos, n));
    std::vector<at::Tensor> out;
    for (int r = 0; r < world; ++r) out.push_back(gathered[r].narrow(0, 0, n));
    comm_->all_gather(out, in);
    for (int r = 0; r < world; ++r) {
      const int64_t first = r * size_ + pos;                                // flat index of out[r][0]
      const int64_t valid = std::clamp<int64_t>(total_ - first, 0, n);       // the last slice's padding is dropped
      if (valid > 0) flat.write(first, out[r].narrow(0, 0, valid));
    }
  }
  return rounds;
}

} // namespace shadowgrad::distributed
