#pragma once
// Where a model to generate with comes from, and loading it: a run directory (its config.yml and step-N checkpoint;
// a LoRA run's frozen base read again from its load_parameters_path), or a Hugging Face model directory
// (config.json + safetensors), either one optionally with a peft adapter on top.
//
//   ModelSource src;  src.path = "runs/sft";  src.step = -1;           // the latest checkpoint
//   LoadedModel m = load_model(src);                                    // m.model in eval mode, m.cfg its config
//   generate::Generator gen(m.model);
#include <cstdint>
#include <string>
#include <vector>

#include "config/Config.h"
#include "model/Decoder.h"

namespace shadowgrad::generate {

struct ModelSource {
  std::string path;     // a run directory (config.yml) or a Hugging Face model directory (config.json)
  int64_t step = -1;    // a run's checkpoint step; -1: the latest
  std::string adapter;  // a peft adapter directory on top of a Hugging Face directory; "": none
  // The context: prompt and continuation together. 0: a run's max_target_length; for a Hugging Face directory
  // its max_position_embeddings, at most kDefaultHfContext (the causal mask is max_length^2).
  int64_t max_length = 0;
  std::vector<std::string> overrides;  // key=value on the config, e.g. dtype=bfloat16 (default: float32)
};

constexpr int64_t kDefaultHfContext = 2048;

struct LoadedModel {
  config::Config cfg;
  model::Decoder model{nullptr};
  std::string description;  // "run runs/sft step 40 (LoRA r=8 on ...)", for the log
  int64_t step = 0;         // the checkpoint step read; 0 for a model directory
};

// Throws InputError (and its kinds: ConfigError, ModelFileError, CorruptCheckpointError) naming the path at fault:
// neither config.yml nor config.json in path, no checkpoint, an adapter whose tensors do not fit the base, ...
LoadedModel load_model(const ModelSource& source);

} // namespace shadowgrad::generate
