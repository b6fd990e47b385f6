#pragma once
// An optimizer's state as flat vectors over its parameters (their elements concatenated in order), so it can be
// cut and put together again at any element. This is what lets a checkpoint written by W processes (the whole
// state, or W ZeRO-1 slices) be loaded by W' processes, sharded or not.
//
//   FlatOptimizerState s = flatten(optimizer, begin, n);   // elements [begin, begin+n) of every state field
//   unflatten_into(other, 0, s);                             // written at element 0 of `other`'s parameters,
//                                                            // creating the state where it is missing
//
// Adam and AdamW (exp_avg, exp_avg_sq, max_exp_avg_sq with amsgrad, and the update count) and SGD
// (momentum_buffer) are understood. They are element-wise, so a slice of the state is the state of the slice.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

namespace torch::optim {
class Optimizer;
}
namespace torch::serialize {
class OutputArchive;
}

namespace shadowgrad::checkpoint {

struct FlatOptimizerState {
  int64_t begin = 0;  // flat index of the first element
  int64_t count = 0;  // elements in every field
  int64_t step = 0;   // Adam/AdamW update count, the same for every parameter (0 for SGD)
  // name -> 1-D tensor of `count` elements; empty before the first update.
  std::vector<std::pair<std::string, at::Tensor>> fields;
};

// Elements of all the optimizer's parameters together.
int64_t flat_size(const torch::optim::Optimizer& optimizer);
// Elements [begin, begin + count) of the optimizer's state. Throws std::invalid_argument for an optimizer other than
// Adam, AdamW or SGD, and when the parameters disagree on the update count.
FlatOptimizerState flatten(torch::optim::Optimizer& optimizer, int64_t begin, int64_t count);
// Writes `state` into elements [at, at + state.count) of the optimizer's state (state.begin is not used).
void unflatten_into(torch::optim::Optimizer& optimizer, int64_t at, const FlatOptimizerState& state);

// The archive form of one slice (an optimizer-shard file), with the length `total` of the whole flat vector.
void write_flat_state(torch::serialize::OutputArchive& archive, const FlatOptimizerState& state, int64_t total);
// Reads what write_flat_state wrote; sets *total. Throws CorruptCheckpointError naming `file` when the archive cannot
// be read, or a field is missing, out of range or has the wrong length.
FlatOptimizerState read_flat_state(const std::string& bytes, const std::string& file, int64_t* total);
// After optimizer.load() of checkpoint file `file`: throws CorruptCheckpointError naming it when a state field of
// Adam, AdamW or SGD does not have its parameter's shape, or is not floating point, or an update count is negative
// (a step would otherwise read past the moments). Other optimizer kinds are not checked.
void check_state_shapes(torch::optim::Optimizer& optimizer, const std::string& file);

} // namespace shadowgrad::checkpoint
