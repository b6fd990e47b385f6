#include "train/ModelBuild.h"

#include <filesystem>
#include <optional>

#include <ATen/ATen.h>

#include "distributed/DataParallel.h"
#include "distributed/ParameterShards.h"
#include "hub/HfConfig.h"
#include "hub/Import.h"
#include "model/WeightCount.h"
#include "train/MicrobatchFit.h"

namespace shadowgrad::train {

bool builds_by_unit(const config::Config& cfg, const distributed::DataParallel* dp, const hub::WeightSources& sources) {
  return dp && dp->shard_parameters() && !probes_microbatch(cfg) && sources.checkpoint.empty();
}

BuiltModel build_model(const config::Config& cfg, const hub::WeightSources& sources, distributed::DataParallel* dp,
                       c10::Device device) {
  const model::DecoderOptions options = model::DecoderOptions::from_config(cfg);
  BuiltModel built;
  if (!builds_by_unit(cfg, dp, sources)) {
    built.model = model::Decoder(options);
    built.loaded = hub::load_model_weights(sources, cfg, *built.model);
    built.model->to(device);
    return built;
  }
  // The base's directory resolved (and a recorded base checked) once, then each unit read from it as it is built.
  std::optional<hub::HfWeights> base;  // mapped and checked once, read unit by unit
  built.loaded.base = hub::resolve_base(sources);
  if (!built.loaded.base.empty()) {
    const hub::HfConfig hf = hub::read_hf_config((std::filesystem::path(built.loaded.base) / "config.json").string());
    built.loaded.architecture = hf.family->architecture;
    base.emplace(built.loaded.base, hf);
  }
  auto shards = std::make_unique<distributed::ParameterShards>(
      dp->shared_communicator(), model::count_weights(options).base, options.num_layers + 2, dp->reshard_after_forward());
  built.model = model::Decoder(options, [&](int64_t unit, model::DecoderImpl& m) {
    if (base) base->load_into(m, [&](const std::string& name) { return m.unit_of(name) == unit; });
    std::vector<at::Tensor> tensors = m.unit_tensors()[size_t(unit)];
    at::NoGradGuard no_grad;
    for (auto& t : tensors)
      if (t.device() != device) t.set_data(t.to(device));  // cut where it trains: Module::to cannot move 0 bytes
    shards->adopt(unit, tensors);
  });
  // The adapters are small and whole on every process: read over the cut base, then moved with the tables.
  hub::WeightSources adapters;
  adapters.adapter = sources.adapter;
  if (!adapters.adapter.empty()) hub::load_model_weights(adapters, cfg, *built.model);
  if (!device.is_cpu()) built.model->to(device);  // the units are there already (same device: nothing moves)
  built.shards = std::move(shards);
  return built;
}

} // namespace shadowgrad::train
