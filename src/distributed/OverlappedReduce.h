#pragma once
// The gradient reduction overlapped with the last microbatch's backward (overlap_gradient_reduction): each bucket's
// all-reduce starts as soon as every parameter in it has received all its folds of the last backward, while autograd
// goes on with the earlier layers (Megatron-Core's overlap_grad_reduce; llm.c #361).
//
//   OverlappedReduce overlap(comm, accumulator, bucket_bytes);   // observes every fold of the accumulator
//   for (m = 0; m < K; ++m) { overlap.before_backward(m == K - 1); backward(); }
//   accumulator.end();
//   overlap.finish();                 // starts what is left, waits for all, writes the sums back: before clipping
//
// Exact: the buckets are all_reduce_sum_bucketed's (the same ranges, the same lengths, in fp32), so the result is
// bitwise the non-overlapped reduction's. Readiness is counted during the last backward only, against the folds each
// parameter received in the backward before it (the previous microbatch, or the previous step's last one), so a bucket
// is never reduced before its later folds are in: the bug of InfiniTrain #213, where a bucket went out on the first
// microbatch. A fold that arrives for a bucket already sent throws std::logic_error instead of being lost. Buckets are
// started in one fixed order (last bucket first, as backward reaches them), the same on every process, as collectives
// must be; at most `in_flight` buckets are in flight (that many fp32 buckets of extra memory).
#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include <ATen/core/Tensor.h>

#include "distributed/Communicator.h"
#include "distributed/FlatView.h"

namespace shadowgrad::accumulate {
class ShadowAccumulator;
}

namespace shadowgrad::distributed {

class OverlappedReduce {
 public:
  // Installs a fold observer on `acc`, inert once this object is gone; `acc` must outlive every call below.
  OverlappedReduce(Communicator& comm, accumulate::ShadowAccumulator& acc, int64_t bucket_bytes, int in_flight = 2);
  ~OverlappedReduce();
  OverlappedReduce(const OverlappedReduce&) = delete;
  OverlappedReduce& operator=(const OverlappedReduce&) = delete;

  // Before each microbatch's backward. `last`: the step's last one, whose folds count toward readiness; with no
  // backward seen yet (the very first step with K = 1) nothing is started early, and finish() does it all. Throws
  // std::logic_error when called between the last backward and finish().
  void before_backward(bool last);
  // After the last backward and ShadowAccumulator::end(): starts the buckets not yet started, waits for every
  // bucket, and writes the sums back into the shadow tree. Returns the number of buckets (one all_reduce each).
  int64_t finish();
  // Buckets started during the last backward in the last step (the overlap actually achieved).
  int64_t started_early() const { return started_early_; }
  int64_t buckets() const { return int64_t(bucket_begin_.size()); }
  // Whether `acc` is the accumulator this was built for (by its serial number: a new accumulator at a dead one's
  // address is not mistaken for it). Reads nothing of the shadow tree.
  bool serves(const accumulate::ShadowAccumulator& acc) const;

 private:
  struct InFlight {
    int64_t bucket;
    at::Tensor buffer;
    PendingCollective work;
  };
  void on_fold(size_t param);
  void start_ready();
  void start(int64_t bucket);
  void retire_oldest();

  Communicator& comm_;
  accumulate::ShadowAccumulator& acc_;
  uint64_t serial_;
  FlatView flat_;
  int in_flight_;
  std::vector<int64_t> bucket_begin_, bucket_len_;
  std::vector<std::vector<int64_t>> buckets_of_param_;  // the buckets each parameter's elements lie in
  std::vector<int64_t> params_in_bucket_;
  // Per parameter: folds in the current backward, and in the backward before it (-1: none seen yet).
  std::vector<int64_t> folds_now_, folds_before_;
  bool seen_backward_ = false;
  bool counting_ = false;     // inside the last backward, with a previous backward to compare against
  std::vector<int64_t> waiting_;  // per bucket: parameters not yet complete
  std::vector<char> started_;
  int64_t next_ = -1;         // the next bucket to start (they go in descending order)
  int64_t started_early_ = 0, started_early_now_ = 0;
  std::deque<InFlight> flying_;
  std::vector<at::Tensor> free_buffers_;
  std::shared_ptr<OverlappedReduce*> self_ = std::make_shared<OverlappedReduce*>(this);  // the observer's handle
};

} // namespace shadowgrad::distributed
