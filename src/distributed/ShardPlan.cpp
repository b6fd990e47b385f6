#include "distributed/ShardPlan.h"

#include <algorithm>
#include <stdexcept>

#include <ATen/ATen.h>
#include <fmt/format.h>

namespace shadowgrad::distributed {

namespace {
std::vector<int64_t> numels_of(const std::vector<at::Tensor>& params) {
  std::vector<int64_t> n;
  for (const auto& p : params) n.push_back(p.numel());
  return n;
}
} // namespace

ShardPlan::ShardPlan(const std::vector<at::Tensor>& params, int rank, int world) : ShardPlan(numels_of(params), rank, world) {}

namespace {
int64_t sum(const std::vector<int64_t>& numels) {
  int64_t t = 0;
  for (int64_t n : numels) t += n;
  return t;
}
} // namespace

ShardPlan::ShardPlan(const std::vector<int64_t>& numels, int rank, int world) : ShardPlan(sum(numels), rank, world) {
  for (int64_t n : numels) add(n);
}

ShardPlan::ShardPlan(int64_t total, int rank, int world) : total_(total) {
  if (world < 1 || rank < 0 || rank >= world)
    throw std::invalid_argument(fmt::format("ShardPlan: rank {} is outside [0, {})", rank, world));
  if (total_ < world)
    throw std::invalid_argument(fmt::format("ShardPlan: {} parameter elements cannot be cut among {} processes", total_,
                                            world));
  size_ = (total_ + world - 1) / world;
  begin_ = std::min(total_, int64_t(rank) * size_);
  owned_ = std::min(total_, begin_ + size_) - begin_;
}

const Piece& ShardPlan::add(int64_t n) {
  if (placed_ + n > total_)
    throw std::logic_error(fmt::format("ShardPlan: a tensor of {} elements after {} passes the plan's total {}", n,
                                       placed_, total_));
  const int64_t first = placed_, lo = std::max(begin_, first), hi = std::min(begin_ + owned_, first + n);
  pieces_.push_back(hi > lo ? Piece{lo - first, hi - lo} : Piece{0, 0});
  placed_ += n;
  return pieces_.back();
}

std::vector<at::Tensor> ShardPlan::piece_views(const std::vector<at::Tensor>& tensors) const {
  if (tensors.size() != pieces_.size())
    throw std::invalid_argument(fmt::format("ShardPlan: {} tensors for a plan of {} parameters", tensors.size(),
                                            pieces_.size()));
  std::vector<at::Tensor> views;
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (pieces_[i].numel == 0) continue;
    if (!tensors[i].is_contiguous()) throw std::invalid_argument("ShardPlan: every tensor must be contiguous");
    views.push_back(tensors[i].detach().view({-1}).narrow(0, pieces_[i].offset, pieces_[i].numel));
  }
  return views;
}

} // namespace shadowgrad::distributed
