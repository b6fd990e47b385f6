#pragma once
// A Hugging Face model directory into the trainer (docs/huggingface.md): its config.json sets the model keys, its
// safetensors (one file, or shards listed in model.safetensors.index.json) fill the parameters, each tensor copied
// once from the mapped file into its parameter, converted to the weight dtype.
//
//   HfConfig hf = configure_from_model_dir(cfg);            // cfg.load_parameters_path's config.json -> cfg
//   load_hf_weights(cfg.load_parameters_path, hf, *model);  // every tensor, or ModelFileError naming file and tensor
//   carry_model_files(cfg.load_parameters_path, run_dir);   // tokenizer files, config.json, source.json -> run_dir/hf
#include <functional>
#include <memory>
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

// A model directory's weight files, mapped and checked against the family's name map once, then read into a model
// whole or part by part: a model built unit by unit (ZeRO-3, train/ModelBuild.h) reads each unit as it is built, so
// that the whole model is never held.
class HfWeights {
 public:
  // ModelFileError for a file that cannot be read, a tensor in two files, or one the family does not name.
  HfWeights(const std::string& dir, const HfConfig& hf);
  ~HfWeights();
  HfWeights(const HfWeights&) = delete;
  HfWeights& operator=(const HfWeights&) = delete;
  // Copies the tensors whose name in the model `only` accepts (every one when it is empty) into `model`'s parameter
  // or buffer of that name. ModelFileError for a missing tensor, or one whose shape differs from the parameter's (that
  // is, from config.json).
  void load_into(torch::nn::Module& model, const std::function<bool(const std::string& ours)>& only = {}) const;

 private:
  struct Files;
  std::unique_ptr<Files> files_;
};

// HfWeights(dir, hf).load_into(model): every tensor the family's name map lists.
void load_hf_weights(const std::string& dir, const HfConfig& hf, torch::nn::Module& model);

// Copies config.json and the tokenizer and generation files present into carried_dir(run_dir), and writes there
// source.json naming the directory and its weight files.
void carry_model_files(const std::string& dir, const std::string& run_dir);

} // namespace shadowgrad::hub
