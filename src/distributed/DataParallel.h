#pragma once
// Data parallelism for the train step: what each process does differently from a single process.
//
//   auto dp = DataParallel::from_environment(DataParallelOptions::from_config(cfg), device);
//                                            // nullptr for one process (no RANK/WORLD_SIZE)
//   first example of this process's shard:   dp->rank() * local_batch
//   before the microbatch loop:              tokens = dp->global_tokens(local_tokens)   // loss scale is global
//   before each microbatch's backward:       dp->before_backward(accumulator, m == K - 1)
//   after the LAST microbatch, once:         dp->reduce_gradients(accumulator)          // bucketed fp32 sum
//   the reported loss:                       dp->global_sum(local_loss_sum) / tokens
//
// Per optimizer step that is 1 + buckets + 1 all_reduce calls, whatever gradient_accumulation_steps is (one more
// with a rider, plus the ZeRO-1 all-gather rounds when shard_optimizer_over_data=true). Nothing is sent per
// microbatch. With overlap_gradient_reduction the buckets start during the last backward (OverlappedReduce.h).
#include <cstdint>
#include <memory>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include "distributed/DataParallelOptions.h"
#include "util/Hash.h"

namespace shadowgrad::accumulate {
class ShadowAccumulator;
struct ShadowRange;
}

namespace shadowgrad::distributed {

class Communicator;
class OverlappedReduce;
class ShardedFold;
struct ProcessEnvironment;

class DataParallel {
 public:
  // Connects through c10d::TCPStore when the environment describes several processes; nullptr otherwise.
  static std::shared_ptr<DataParallel> from_environment(const DataParallelOptions& options, c10::Device device);
  DataParallel(std::shared_ptr<Communicator> comm, const DataParallelOptions& options);
  ~DataParallel();

  int rank() const;
  int world_size() const;
  Communicator& communicator() { return *comm_; }
  std::shared_ptr<Communicator> shared_communicator() const { return comm_; }
  int64_t bucket_bytes() const { return bucket_bytes_; }
  bool shard_optimizer() const { return shard_optimizer_; }
  // ZeRO-3 (shard_parameters_over_data): the trainer cuts the weights with ParameterShards.h.
  bool shard_parameters() const { return shard_parameters_; }
  bool reshard_after_forward() const { return reshard_after_forward_; }

  // shard_gradients_over_data: the accumulator's ranges (ShadowAccumulator's ranged constructor), this process's range
  // of the trainable `params`; empty otherwise. Then attach() the accumulator built with them: it installs the fold
  // sink (ShardedFold.h) and the norm reducer (clipping and the noise scale sum every process's pieces).
  std::vector<accumulate::ShadowRange> gradient_ranges(const std::vector<at::Tensor>& params) const;
  void attach(accumulate::ShadowAccumulator& acc);

  // The sum over all processes (one all_reduce each).
  int64_t global_tokens(int64_t local_tokens);
  double global_sum(double local);
  // Several sums in one all-reduce (fp64, in order).
  std::vector<double> global_sums(const std::vector<double>& local);

  // With overlap: before each microbatch's backward (`last`: the step's last one). A no-op without overlap.
  // With sharded gradients: sends what the previous backward left.
  void before_backward(accumulate::ShadowAccumulator& acc, bool last);
  // After the last microbatch's backward, before ShadowAccumulator::end(): with sharded gradients every bucket is
  // then summed and folded into this process's pieces. A no-op otherwise.
  void after_last_backward(accumulate::ShadowAccumulator& acc);
  // Sums the shadow tree over all processes through fp32 buckets: the one gradient reduction of a step.
  // Call it after the last microbatch has been folded and ShadowAccumulator::end(). `rider`: a small fp32 vector
  // summed after the buckets, in one all_reduce of its own (e.g. each process's per-microbatch squared norms in its
  // own slots): the buckets are then the same with and without overlap, and so are their sums.
  void reduce_gradients(accumulate::ShadowAccumulator& acc, const at::Tensor& rider = {});
  // Buckets the last reduce_gradients started during the last backward (0 without overlap).
  int64_t buckets_started_early() const;
  // accumulator.folds() when reduce_gradients last ran: K x parameters if it ran after the last microbatch.
  int64_t folds_at_last_reduce() const { return folds_at_last_reduce_; }

  // Every process's `mine` (all of one length), concatenated in rank order: one all_gather.
  std::vector<int64_t> all_gather_ints(const std::vector<int64_t>& mine);

  // Checks that every process starts from the same config and the same initial weights: one all_gather of
  // two 64-bit checksums. Throws std::runtime_error naming the ranks that differ. `after`: the checksum of the
  // weights hashed before (ZeRO-3 hashes each unit while it is whole, ParameterShards::start_checksum), which
  // `params` continue.
  void verify_same_start(const std::vector<at::Tensor>& params, uint64_t after = util::kFnv1aOffset);

 private:
  void sum_rider(const at::Tensor& rider);  // reduce_gradients' rider: one all_reduce after the gradient
  std::shared_ptr<Communicator> comm_;
  int64_t bucket_bytes_;
  bool shard_optimizer_;
  bool shard_parameters_, reshard_after_forward_;
  uint64_t config_hash_;
  int64_t folds_at_last_reduce_ = -1;
  bool overlap_enabled_;
  std::unique_ptr<OverlappedReduce> overlap_;
  bool shard_gradients_;
  std::unique_ptr<ShardedFold> sharded_;
  bool logged_buckets_ = false;
};

// 64-bit checksum of the tensors' bytes (util/BlockHash.h, every byte: two trees match only if every bit does),
// chained after `h`: checksum(b, checksum(a)) == checksum(a then b).
uint64_t checksum(const std::vector<at::Tensor>& tensors, uint64_t h = util::kFnv1aOffset);

} // namespace shadowgrad::distributed
