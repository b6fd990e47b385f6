#pragma once
// The checks every reader of a step-N directory makes, in one place: the resume (checkpoint/LoadAttempt.h, every
// file) and the weights-only reader of export_hf and generate (checkpoint/WeightsLoader.h, model.pt alone).
//
//   const Manifest m = read_manifest(dir, step);                 // its own checksum, and step N in it
//   const std::string bytes = read_listed_file(dir, listed(m, "model.pt", dir));   // size and CRC-32
//   const auto weights = read_parameters(bytes, dir + "/model.pt", model);        // names, shapes, dtypes
//   put_parameters(weights, model);                              // only once everything above passed
#include <cstdint>
#include <string>
#include <vector>

#include <ATen/Tensor.h>

#include "checkpoint/Manifest.h"

namespace torch::nn {
class Module;
}

namespace shadowgrad::checkpoint {

// dir/manifest.yml, parsed (which checks its own CRC). CorruptCheckpointError when it is missing or damaged, or
// holds another step than `step`.
Manifest read_manifest(const std::string& dir, int64_t step);

// The manifest's entry for `name`; CorruptCheckpointError ("lists no NAME in its manifest") when it has none.
const FileEntry& listed(const Manifest& manifest, const std::string& name, const std::string& dir);

// The bytes of dir/entry.name once its size and CRC-32 match the entry; CorruptCheckpointError naming the file
// ("missing", "N bytes, the manifest says M (truncated?)", "crc32 X does not match the manifest's Y") otherwise.
std::string read_listed_file(const std::string& dir, const FileEntry& entry);

// Every parameter of `model`, in named_parameters() order, as the archive `bytes` (the file `path`) holds it; the
// model is not touched. A tensor the file holds beyond them is ignored. CorruptCheckpointError naming the file and
// the parameter when one is absent or has another shape or dtype (the file does not fit the model).
std::vector<at::Tensor> read_parameters(const std::string& bytes, const std::string& path, torch::nn::Module& model);

// Copies `weights` (read_parameters' order) into the model's parameters, without autograd.
void put_parameters(const std::vector<at::Tensor>& weights, torch::nn::Module& model);

} // namespace shadowgrad::checkpoint
