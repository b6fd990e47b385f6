#pragma once
// Which elements of the trainable parameters each process owns under ZeRO-1/ZeRO-2 (docs/distributed.md, "The plan").
// The parameters are read as one flat vector of T elements, in order, and cut into WORLD_SIZE ranges of ceil(T/N):
// process r owns [r*S, min(T, (r+1)*S)). The range cuts each parameter in at most one contiguous piece.
//
//   ShardPlan plan(params, rank, world);
//   plan.piece(i)                          // {offset inside params[i] (flat), elements}; elements may be 0
//   auto views = plan.piece_views(params); // detached 1-D views of the non-empty pieces, in order: no copy
//   plan.begin(), plan.owned()             // the range, for the checkpoint's optimizer shard
#include <cstdint>
#include <vector>

#include <ATen/core/Tensor.h>

namespace shadowgrad::distributed {

struct Piece {
  int64_t offset = 0;  // first element inside the parameter (flattened)
  int64_t numel = 0;   // elements of the parameter in this process's range
};

class ShardPlan {
 public:
  // `params`: the trainable parameters, in the order every process lists them. Throws std::invalid_argument when
  // rank is outside [0, world) or there are fewer elements than processes.
  ShardPlan(const std::vector<at::Tensor>& params, int rank, int world);
  ShardPlan(const std::vector<int64_t>& numels, int rank, int world);
  // The range alone, from the total: the tensors' pieces follow with add(), in flat order (ZeRO-3 builds the model
  // unit by unit, ParameterShards.h, before every tensor exists).
  ShardPlan(int64_t total, int rank, int world);
  // The next tensor's piece; throws std::logic_error past the total.
  const Piece& add(int64_t numel);
  int64_t placed() const { return placed_; }  // elements of the tensors added so far

  int64_t total() const { return total_; }
  int64_t shard_size() const { return size_; }  // S = ceil(T / N): every range but the last has S elements
  int64_t begin() const { return begin_; }
  int64_t owned() const { return owned_; }
  const Piece& piece(size_t param) const { return pieces_.at(param); }
  const std::vector<Piece>& pieces() const { return pieces_; }
  // Detached 1-D views of `tensors` (shaped like the params the plan was made from) over the non-empty pieces: the
  // optimizer's parameters under ZeRO-1/2, or the same range of another tree (the shadows).
  std::vector<at::Tensor> piece_views(const std::vector<at::Tensor>& tensors) const;

 private:
  int64_t total_ = 0, size_ = 0, begin_ = 0, owned_ = 0, placed_ = 0;
  std::vector<Piece> pieces_;
};

} // namespace shadowgrad::distributed
