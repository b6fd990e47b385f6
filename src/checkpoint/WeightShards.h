#pragma once
// The weights of a checkpoint written under ZeRO-3 of a full fine-tune (shard_parameters_over_data): every process
// writes its own range of the flat trainable parameters, model-shard-R-of-N.pt, beside its optimizer shard, and no
// process ever holds the whole model to save or load it. Every other run writes model.pt. Either form loads into
// any process count:
//
//   checkpoint file    loaded by                        how
//   model.pt           a whole model                    read_parameters() (StepFiles.h), as written
//   model.pt           a ZeRO-3 range                   the whole file read, the range cut out (for that moment only)
//   model-shard-*      a whole model (export_hf, one    every shard put together
//                      process, ZeRO-1/2, generate)
//   model-shard-*      a ZeRO-3 range                   the parts of the shards that overlap it
//
// The range is ZeRO-1's (ShardPlan: shard r of W holds [r * ceil(T / W), ...)), so a checkpoint's weight and
// optimizer shards cut the parameters alike. A shard file holds begin, count, total and one 1-D tensor "weights".
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "checkpoint/Manifest.h"

namespace torch::nn {
class Module;
}
namespace torch::serialize {
class OutputArchive;
}

namespace shadowgrad::checkpoint {

// The elements of `tensors` together: the length of the flat vector the shard files (weights and optimizer) cut.
int64_t element_count(const std::vector<at::Tensor>& tensors);

// "model-shard-00001-of-00004.pt"
std::string weight_shard_file_name(int rank, int world_size);
// The weight files a verified manifest must list: model.pt, or its model_shards shard files.
std::vector<std::string> model_files(const Manifest& manifest);

// The shard file of elements [begin, begin + sum of the pieces' numels) of `total`: the pieces (1-D, flat order)
// written as one tensor.
void write_weight_shard(torch::serialize::OutputArchive& archive, const std::vector<at::Tensor>& pieces, int64_t begin,
                        int64_t total);

// Elements [begin, begin + count) of the flat parameters (their total is `total`), from the model-shard files of
// `files` (name -> bytes; those not held are outside the range). CorruptCheckpointError naming the file when one
// cannot be read, holds another total or dtype, or the shards leave part of the range uncovered.
at::Tensor read_weight_range(const std::map<std::string, std::string>& files, const Manifest& manifest, int64_t begin,
                             int64_t count, int64_t total, at::ScalarType dtype, const std::string& dir);

// Every parameter of `model` in named_parameters() order, put together from all the model-shard files (the model
// is not touched). CorruptCheckpointError as read_weight_range(), or when the shards do not fit the model.
std::vector<at::Tensor> read_sharded_parameters(const std::map<std::string, std::string>& files,
                                                const Manifest& manifest, const std::string& dir,
                                                torch::nn::Module& model);

// Elements [begin, begin + count) of the concatenated `whole` tensors (a model.pt read into a ZeRO-3 range).
at::Tensor cut_range(const std::vector<at::Tensor>& whole, int64_t begin, int64_t count);
// Copies the flat `range` into `pieces` (1-D, flat order, their numels summing to the range's), without autograd.
void put_range(const at::Tensor& range, const std::vector<at::Tensor>& pieces);

} // namespace shadowgrad::checkpoint
