#pragma once
// A Hugging Face model directory into the trainer (docs/huggingface.md): its config.json sets the model keys, its
// safetensors (one file, or shards listed in model.safetensors.index.json) fill the parameters, each tensor copied
// once from the mapped file into its parameter, converted to the weight dtype.
//
//   HfConfig hf = configure_from_model_dir(cfg);            // cfg.load_parameters_path's config.json -> cfg
//   load_hf_weights(cfg.load_parameters_path, hf, *model);  // every tensor, or ModelFileError naming file and tensor
//   carry_model_files(cfg.load_parameters_path, run_dir);   // tokenizer files, config.json, source.json -> run_dir/hf
#include <functional>
#include <string>

#include "config/Config.h"
#include "hub/HfConfig.h"

namespace torch::nn {
class Module;
}

namespace shadowgrad::hub {

// A sharded model's map from tensor name to weight file; an unsharded one has model.safetensors alone.
inline constexpr const char* kSafeTensorsIndex = "model.safetensors.index.json";

// Where a run keeps what it brought from its model directory, for export_hf.
std::string carried_dir(const std::string& run_dir);  // run_dir + "/hf"

HfConfig configure_from_model_dir(config::Config& cfg);

// Copies every tensor the family's name map lists into `model`'s parameter of that name. Throws ModelFileError for a
// missing or unexpected tensor, or one whose shape differs from the parameter's (that is, from config.json).
// `only`, when set, picks the tensors by our name: a model built unit by unit (ZeRO-3, train/ModelBuild.h) reads each
// unit as it is built, so that the whole model is never held.
void load_hf_weights(const std::string& dir, const HfConfig& hf, torch::nn::Module& model,
                     const std::function<bool(const std::string& ours)>& only = {});

// Copies config.json and the tokenizer and generation files present into carried_dir(run_dir), and writes there
// source.json naming the directory and its weight files.
void carry_model_files(const std::string& dir, const std::string& run_dir);

} // namespace shadowgrad::hub
