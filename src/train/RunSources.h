#pragma once
// What a run is built from, read before the model exists: load_parameters_path's config.json sets the model keys
// (docs/huggingface.md) and lora_restore_path's adapter_config.json the LoRA keys (docs/lora.md). A run that resumes
// from its own checkpoint reads neither as given:
//   - its base comes from the absolute path its hf/source.json recorded (hub::run_base_dir), so a run started with a
//     relative load_parameters_path resumes from any directory;
//   - its LoRA keys come from its own config.yml: the adapters are in the checkpoint, and the adapter directory it
//     started from is not needed again (nor read: a directory changed since would otherwise change the keys).
//
//   auto cfg = config::load_config(path, overrides);
//   train::configure_from_sources(cfg);   // ConfigError / ModelFileError naming the file and the field
#include "config/Config.h"

namespace shadowgrad::train {

void configure_from_sources(config::Config& cfg);

} // namespace shadowgrad::train
