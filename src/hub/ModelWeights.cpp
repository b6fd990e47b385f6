#include "hub/ModelWeights.h"

#include <filesystem>

#include "checkpoint/WeightsLoader.h"
#include "hub/BaseRecord.h"
#include "hub/HfConfig.h"
#include "hub/Import.h"
#include "hub/PeftAdapter.h"

namespace shadowgrad::hub {

WeightSources run_weights(const config::Config& cfg, const std::string& run_dir, int64_t step) {
  WeightSources s;
  if (cfg.lora_rank > 0 && !cfg.load_parameters_path.empty()) {
    s.base = cfg.load_parameters_path;
    s.recorded_by = run_dir;
  }
  s.checkpoint = run_dir;
  s.step = step;
  return s;
}

std::string resolve_base(const WeightSources& sources) {
  if (sources.base.empty() || sources.recorded_by.empty()) return sources.base;
  // Where the run recorded its base, so a run started with a relative path loads from any directory; and the files
  // it recorded there, so adapters never land on a base that changed under them.
  const std::string dir = run_base_dir(sources.base, sources.recorded_by);
  verify_base_record(dir, sources.recorded_by);
  return dir;
}

Loaded load_model_weights(const WeightSources& sources, const config::Config& cfg, torch::nn::Module& model) {
  Loaded got;
  if (!sources.base.empty()) {
    got.base = resolve_base(sources);
    const HfConfig hf = read_hf_config((std::filesystem::path(got.base) / "config.json").string());
    load_hf_weights(got.base, hf, model);
    got.architecture = hf.family->architecture;
  }
  if (!sources.adapter.empty()) load_adapter_weights(sources.adapter, cfg, model);
  if (!sources.checkpoint.empty()) got.step = checkpoint::load_weights(sources.checkpoint, sources.step, model);
  return got;
}

} // namespace shadowgrad::hub
