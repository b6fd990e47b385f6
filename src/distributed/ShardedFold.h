#pragma once
// The fold sink of sharded gradients (shard_gradients_over_data, docs/distributed.md "When each collective runs"):
// every microbatch's gradient is summed over the processes bucket by bucket while backward runs, and each process
// folds only the part in its own range into its pieces of the shadow tree.
//
//   ShadowAccumulator acc(params, dtype, ranges_of(plan));    // the shadows are this process's pieces
//   ShardedFold fold(comm, acc, plan, bucket_bytes, overlap);  // installs itself as the accumulator's sink
//   for (m = 0; m < K; ++m) { fold.before_backward(); backward(); }
//   fold.finish();                                             // before acc.end(): every bucket sent and folded
//
// Buckets are fixed runs of whole parameters (about bucket_bytes of fp32 each, a larger parameter alone), sent in
// descending order, the same on every process. In a backward, a bucket goes out as soon as each of its parameters
// has received as many gradients as it did in the backward before (none is sent early in the first one); the rest go
// out after the backward. A gradient that arrives for a bucket already sent throws std::logic_error instead of being
// lost (InfiniTrain #213). With `overlap`, up to two buckets are in flight while backward goes on; off, each waits.
// Each bucket is one fp32 all-reduce: on Gloo that costs what its reduce-scatter does.
#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include <ATen/core/Tensor.h>

#include "distributed/Communicator.h"
#include "distributed/ShardPlan.h"

namespace shadowgrad::accumulate {
class ShadowAccumulator;
struct ShadowRange;
}

namespace shadowgrad::distributed {

// The accumulator's ranges for `plan`: one per parameter (empty ones included).
std::vector<accumulate::ShadowRange> shadow_ranges(const ShardPlan& plan);

class ShardedFold {
 public:
  ShardedFold(Communicator& comm, accumulate::ShadowAccumulator& acc, ShardPlan plan, int64_t bucket_bytes,
              bool overlap);
  ~ShardedFold();  // the sink left in the accumulator then throws if called
  ShardedFold(const ShardedFold&) = delete;
  ShardedFold& operator=(const ShardedFold&) = delete;

  // Before each backward: sends and folds whatever the previous backward left.
  void before_backward();
  // After the last backward, before ShadowAccumulator::end(): the same, so the shadow pieces are complete.
  void finish();
  bool serves(const accumulate::ShadowAccumulator& acc) const;
  int64_t buckets() const { return int64_t(bucket_first_param_.size()); }
  // Buckets sent while a backward was still running, in the last finished step (the overlap achieved).
  int64_t sent_during_backward() const { return sent_early_last_; }

 private:
  struct InFlight {
    int64_t bucket;
    at::Tensor buffer;
    PendingCollective work;
  };
  void receive(size_t param, const at::Tensor& grad, bool fresh);
  bool ready(int64_t bucket) const;
  void send(int64_t bucket);
  void retire_oldest();
  void end_backward();

  Communicator& comm_;
  accumulate::ShadowAccumulator& acc_;
  uint64_t serial_;
  ShardPlan plan_;
  bool overlap_;
  std::vector<int64_t> first_;         // flat index of each parameter's first element
  std::vector<int64_t> bucket_of_;     // each parameter's bucket
  std::vector<int64_t> bucket_first_param_, bucket_end_param_, bucket_begin_, bucket_len_;
  std::vector<int64_t> arrived_, expected_;  // gradients per parameter: this backward, the one before (-1: none yet)
  std::vector<at::Tensor> buffers_;    // per bucket, while it fills
  std::vector<char> sent_;
  int64_t next_ = -1;                  // the next bucket to send (descending)
  bool in_backward_ = false;  // between before_backward() and the next before_backward() or finish()
  int64_t sent_early_ = 0, sent_early_last_ = 0;
  std::deque<InFlight> flying_;
  std::shared_ptr<ShardedFold*> self_ = std::make_shared<ShardedFold*>(this);  // the sink's handle
};

} // namespace shadowgrad::distributed
