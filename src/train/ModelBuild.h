#pragma once
// The model a run trains, with its starting weights: the seeded initialisation, then the pretrained base
// (load_parameters_path, or the base a LoRA run recorded) and the adapters (lora_restore_path), as
// hub::load_model_weights reads them. Under ZeRO-3 (shard_parameters_over_data) each unit is built, read from the
// base and cut (distributed/ParameterShards.h) before the next unit exists, so a process holds its range and about
// one unit whole, never the whole model; otherwise the model is built whole, then loaded.
//
//   BuiltModel built = build_model(cfg, sources, dp.get(), device);
//   TrainStep step(options, built.model, *source, device, dp, std::move(built.shards));
#include <memory>

#include <c10/core/Device.h>

#include "config/Config.h"
#include "hub/ModelWeights.h"
#include "model/Decoder.h"

namespace shadowgrad::distributed {
class DataParallel;
class ParameterShards;
}

namespace shadowgrad::train {

struct BuiltModel {
  model::Decoder model{nullptr};
  std::unique_ptr<distributed::ParameterShards> shards;  // built unit by unit; null otherwise
  hub::Loaded loaded;                                     // what was read (hub/ModelWeights.h)
};

// Whether build_model cuts the model unit by unit: ZeRO-3 over several processes, unless rank 0 alone probes the
// whole model first (per_device_batch_size=auto, memory_budget_mib: train/MicrobatchFit.h) or a checkpoint is read
// into it. In those cases TrainStep cuts the whole model, as before.
bool builds_by_unit(const config::Config& cfg, const distributed::DataParallel* dp, const hub::WeightSources& sources);

// Throws what hub::load_model_weights throws. The model's tensors are on `device`.
BuiltModel build_model(const config::Config& cfg, const hub::WeightSources& sources, distributed::DataParallel* dp,
                       c10::Device device);

} // namespace shadowgrad::train
