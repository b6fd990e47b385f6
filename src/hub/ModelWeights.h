#pragma once
// The one place a model's weights are put together from their sources, always in the same order: the base (a
// Hugging Face model directory, checked against a run's record when the run was built on it), then what goes over
// it (a peft adapter directory, or a run's step-N parameters: its LoRA adapters, or the whole model). The trainer's
// start (train/Training.cpp), export_hf and generate (generate/ModelSource.cpp) all call it.
//
//   model::Decoder model(model::DecoderOptions::from_config(cfg));       // cfg: the run's config.yml
//   const hub::Loaded got = hub::load_model_weights(hub::run_weights(cfg, run_dir, -1), cfg, *model);
//   // got.step: the checkpoint read; a LoRA run's frozen base was read again from where the run recorded it
//
// The base fills the model's frozen tensors and the adapters or the checkpoint its parameters, so the two never
// overwrite each other; a run without LoRA has no base to read again (its checkpoint holds every weight).
#include <cstdint>
#include <string>

#include "config/Config.h"

namespace torch::nn {
class Module;
}

namespace shadowgrad::hub {

struct WeightSources {
  std::string base;         // a Hugging Face model directory; "": the seeded init the model's constructor made
  std::string recorded_by;  // a run whose base `base` must be (run_base_dir, verify_base_record); "": not checked
  std::string adapter;      // a peft adapter directory read over the base; "": none
  std::string checkpoint;   // a run directory whose step-`step` parameters are read over the base; "": none
  int64_t step = -1;        // -1: the latest loadable checkpoint
};

struct Loaded {
  std::string base;          // the directory the base was read from ("" when none was)
  std::string architecture;  // its config.json's architecture
  int64_t step = 0;          // the checkpoint step read; 0 when none was
};

// A run's weights as export_hf and generate read them: its checkpoint's parameters (checkpoint::load_weights), over
// the frozen base it recorded when it is a LoRA run built on a model directory.
WeightSources run_weights(const config::Config& cfg, const std::string& run_dir, int64_t step);

// The base directory of `sources` as load_model_weights reads it: a run's recorded base resolved and checked against
// its record (ModelFileError naming the file); "" when there is none. For a caller that reads the base by parts
// (hub::HfWeights, unit by unit), once.
std::string resolve_base(const WeightSources& sources);

// Reads `sources` into `model`: the base, then the adapter, then the checkpoint. Throws what the readers throw
// (ModelFileError naming the file for a base or adapter that is missing, changed or does not fit; InputError or
// CorruptCheckpointError for the checkpoint), the model then partly filled.
Loaded load_model_weights(const WeightSources& sources, const config::Config& cfg, torch::nn::Module& model);

} // namespace shadowgrad::hub
