#include "distributed/ShardedOptimizer.h"

#include <algorithm>

#include <ATen/ATen.h>
#include <torch/optim/optimizer.h>

#include "accumulate/ShadowAccumulator.h"
#include "distributed/BucketedReduce.h"
#include "distributed/Communicator.h"
#include "distributed/FlatView.h"
#include "distributed/ParameterShards.h"

namespace shadowgrad::distributed {

namespace {
std::vector<at::Tensor> trainable(const std::vector<at::Tensor>& params) {
  std::vector<at::Tensor> out;
  for (const auto& p : params)
    if (p.requires_grad()) out.push_back(p);
  if (out.empty()) throw std::invalid_argument("ShardedOptimizer: no trainable parameters");
  return out;
}
} // namespace

ShardedOptimizer::ShardedOptimizer(std::shared_ptr<Communicator> comm, const std::vector<at::Tensor>& params,
                                   int64_t bucket_bytes, ParameterShards* weights)
    : comm_(std::move(comm)),
      params_(trainable(params)),
      plan_(params_, comm_->rank(), comm_->world_size()),
      bucket_bytes_(bucket_bytes),
      pieces_(weights ? weights->pieces() : plan_.piece_views(params_)),
      weights_(weights) {
  if (weights && (weights->plan().total() != plan_.total() || weights->plan().begin() != plan_.begin()))
    throw std::invalid_argument("ShardedOptimizer: the weight shards do not cut the trainable parameters as ZeRO-1 does");
}

ShardedOptimizer::~ShardedOptimizer() = default;

void ShardedOptimizer::step(accumulate::ShadowAccumulator& acc, torch::optim::Optimizer& optimizer) {
  at::NoGradGuard no_grad;
  std::vector<at::Tensor> grads;
  if (acc.holds_pieces()) {
    for (const auto& s : acc.shadows())
      if (s.numel() > 0) grads.push_back(s);
  } else {
    grads = plan_.piece_views(acc.shadows());
  }
  for (size_t i = 0; i < pieces_.size(); ++i) pieces_[i].mutable_grad() = grads.at(i);
  optimizer.step();
  for (auto& p : pieces_) p.mutable_grad() = at::Tensor();
  acc.zero_();
  if (weights_) weights_->release_all();
  else all_gather_parameters();
}

int64_t ShardedOptimizer::all_gather_parameters() {
  at::NoGradGuard no_grad;
  const int world = comm_->world_size();
  const int64_t size = plan_.shard_size(), owned = plan_.owned(), total = plan_.total();
  FlatView flat(params_), mine(pieces_);
  // One round moves `chunk` elements of every range: the gather buffer holds world x chunk fp32 values.
  const int64_t chunk = std::min(size, std::max<int64_t>(1, bucket_elements(bucket_bytes_) / world));
  const auto fp32 = params_.front().options().dtype(at::kFloat);
  at::Tensor send = at::empty({chunk}, fp32);
  at::Tensor gathered = at::empty({world, chunk}, fp32);
  int64_t rounds = 0;
  for (int64_t pos = 0; pos < size; pos += chunk, ++rounds) {
    const int64_t n = std::min(chunk, size - pos);
    at::Tensor in = send.narrow(0, 0, n);
    const int64_t have = std::clamp<int64_t>(owned - pos, 0, n);  // the last range is padded with zeros
    if (have > 0) mine.read(pos, in.narrow(0, 0, have));
    if (have < n) in.narrow(0, have, n - have).zero_();
    std::vector<at::Tensor> out;
    for (int r = 0; r < world; ++r) out.push_back(gathered[r].narrow(0, 0, n));
    comm_->all_gather(out, in);
    for (int r = 0; r < world; ++r) {
      const int64_t first = r * size + pos;                            // flat index of out[r][0]
      const int64_t valid = std::clamp<int64_t>(total - first, 0, n);  // the last range's padding is dropped
      if (valid > 0) flat.write(first, out[r].narrow(0, 0, valid));
    }
  }
  return rounds;
}

} // namespace shadowgrad::distributed
