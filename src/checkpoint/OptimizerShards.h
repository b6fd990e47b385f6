#pragma once
// The optimizer state of a checkpoint, for one process or many, sharded (ZeRO-1) or not.
//
// Without ZeRO-1 rank 0 writes optimizer.pt (every process holds the whole state). With ZeRO-1 every rank writes
// its own slice, optimizer-shard-R-of-N.pt, into the same temporary directory, and rank 0 lists all of them in the
// manifest before the rename: no rank ever holds more than its own slice, at the cost of N files per checkpoint.
// Either form loads into any process count and either setting of shard_optimizer_over_data (FlatOptimizerState.h):
//
//   checkpoint file       loaded by a process holding      how
//   optimizer.pt          every parameter                  optimizer.load(), as written
//   optimizer.pt          a ZeRO-1 slice                   read into a temporary whole optimizer, slice cut out
//   optimizer-shard-*     every parameter                  all shards put together
//   optimizer-shard-*     a ZeRO-1 slice                   the parts of the shards that overlap the slice
//
//   Topology t = ...;                                     // train/CheckpointTopology.h builds it from the run
//   auto entries = save_optimizer_shards(tmp_dir, optimizer, t, rank0_ready);   // collective, every rank
//   load_optimizer_state(files, manifest, optimizer, t, dir);
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "checkpoint/Manifest.h"

namespace torch::optim {
class Optimizer;
}

namespace shadowgrad::checkpoint {

// Who takes part in a checkpoint. The defaults describe one process holding the whole optimizer state.
struct Topology {
  int rank = 0;
  int world_size = 1;
  // ZeRO-1: this process's optimizer holds flat elements [shard_begin, shard_begin + shard_owned) of the
  // parameters as one 1-D tensor (at its element 0); false: it holds every parameter.
  bool sharded = false;
  int64_t shard_begin = 0, shard_owned = 0;
  // The trainable parameters in their flat order: the shapes a whole optimizer is built over.
  std::vector<at::Tensor> params;
  // ZeRO-3 of a full fine-tune: this process's pieces of those parameters (1-D, flat order, covering exactly the
  // ZeRO-1 slice), the only copy of its weights. The checkpoint's weights are then model-shard files written by every
  // rank (WeightShards.h) and loaded into these pieces. Empty: the model holds its whole weights.
  std::vector<at::Tensor> weight_pieces;
  // Every process's `mine` (all the same length), concatenated in rank order: an all-gather, and a barrier.
  std::function<std::vector<int64_t>(const std::vector<int64_t>& mine)> exchange;
  // A fresh optimizer of the run's kind over `params` (the whole state): how optimizer.pt reaches a ZeRO-1 slice.
  std::function<std::unique_ptr<torch::optim::Optimizer>(const std::vector<at::Tensor>& params)> make_whole_optimizer;
};

// "optimizer-shard-00001-of-00004.pt"
std::string shard_file_name(int rank, int world_size);

// Collective (every rank of a sharded run calls it for the same checkpoint): writes this rank's slice into
// `tmp_dir` (and, with weight_pieces, its model shard) and returns the manifest entries of every rank's shard
// files. `ready` is rank 0's word that tmp_dir exists (rank 0 passes false when it could not create it; the others' value is not used). Throws
// std::runtime_error on every rank when rank 0 was not ready or any rank could not write its file, so no rank
// waits for another that has given up.
std::vector<FileEntry> save_optimizer_shards(const std::string& tmp_dir, torch::optim::Optimizer& optimizer,
                                             const Topology& topology, bool ready);

// save() on a rank other than 0: writes this rank's shard with ZeRO-1 (rank 0 writes the rest), nothing without.
// Throws std::runtime_error naming `final_dir`.
void save_own_shard(const std::string& tmp_dir, const std::string& final_dir, torch::optim::Optimizer& optimizer,
                    const Topology& topology);
// Rank 0 failed before reaching save_optimizer_shards: tells the ranks waiting there to give up. Never throws.
void cancel_shards(const std::string& tmp_dir, torch::optim::Optimizer& optimizer, const Topology& topology);

// The optimizer files a verified manifest must list: optimizer.pt, or its optimizer_shards shard files.
std::vector<std::string> optimizer_files(const Manifest& manifest);

// Whether this process needs the bytes of checkpoint file `name` to load: every file but the optimizer shards that
// do not overlap its ZeRO-1 slice, and under ZeRO-3 the model shards that do not (they are still read once, for their
// CRC).
bool needed_by(const Topology& topology, const Manifest& manifest, const std::string& name);

// Loads the optimizer state of a verified checkpoint (`files`: name -> bytes, at least those needed_by() this
// process) into `optimizer`, resharding as the table above says. Throws InputError naming `dir` when the shards do not cover the parameters.
void load_optimizer_state(const std::map<std::string, std::string>& files, const Manifest& manifest,
                          torch::optim::Optimizer& optimizer, const Topology& topology, const std::string& dir);

} // namespace shadowgrad::checkpoint
