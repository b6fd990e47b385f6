#include "generate/ModelSource.h"

#include <algorithm>
#include <filesystem>

#include <fmt/format.h>

#include "checkpoint/WeightsLoader.h"
#include "config/ConfigLoader.h"
#include "config/Dtypes.h"
#include "hub/HfConfig.h"
#include "hub/Import.h"
#include "util/Errors.h"

namespace fs = std::filesystem;

namespace shadowgrad::generate {

namespace {

// Generation runs on the CPU, in float32 unless an override says otherwise (transformers' default, and the dtype
// the parity checks use); the context is the source's unless max_length is given.
void set_generation_keys(config::Config& cfg, const ModelSource& source, int64_t default_context) {
  cfg.hardware = config::Hardware::cpu;
  cfg.dtype = config::ComputeDtype::float32;
  cfg.max_target_length = source.max_length > 0 ? source.max_length : default_context;
  config::apply_overrides(cfg, source.overrides);
}

// The weights in the compute dtype once, rather than a cast at every token; eval mode (no LoRA dropout).
void ready(LoadedModel& m) {
  m.model->to(config::scalar_type(config::resolve_compute_dtype(m.cfg.dtype, m.cfg.hardware)));
  m.model->eval();
}

LoadedModel load_run(const ModelSource& source) {
  if (!source.adapter.empty())
    throw InputError(fmt::format("{} is a run directory: --adapter applies to a Hugging Face model directory (a LoRA "
                                 "run's own adapters are in its checkpoint)", source.path));
  LoadedModel m;
  m.cfg = config::load_config((fs::path(source.path) / "config.yml").string(), {});
  set_generation_keys(m.cfg, source, m.cfg.max_target_length);
  config::validate(m.cfg);
  m.model = model::Decoder(model::DecoderOptions::from_config(m.cfg));
  // A LoRA run's checkpoint holds its adapters alone: the frozen base comes from where the run read it.
  if (m.cfg.lora_rank > 0) {
    if (m.cfg.load_parameters_path.empty())
      throw InputError(fmt::format("{}: a LoRA run without load_parameters_path has no base to read", source.path));
    const auto hf = hub::read_hf_config((fs::path(m.cfg.load_parameters_path) / "config.json").string());
    hub::load_hf_weights(m.cfg.load_parameters_path, hf, *m.model);
  }
  m.step = checkpoint::load_weights(source.path, source.step, *m.model);
  m.description = fmt::format("run {} step {}", source.path, m.step);
  if (m.cfg.lora_rank > 0)
    m.description += fmt::format(" (LoRA r={} over {})", m.cfg.lora_rank, m.cfg.load_parameters_path);
  return m;
}

LoadedModel load_model_dir(const ModelSource& source) {
  LoadedModel m;
  const auto hf = hub::read_hf_config((fs::path(source.path) / "config.json").string());
  m.cfg.load_parameters_path = source.path;
  set_generation_keys(m.cfg, source, std::min(hf.max_position_embeddings > 0 ? hf.max_position_embeddings
                                                                             : kDefaultHfContext,
                                              kDefaultHfContext));
  hub::configure_from_model_dir(m.cfg);  // the model keys from config.json; validates
  m.model = model::Decoder(model::DecoderOptions::from_config(m.cfg));
  hub::load_hf_weights(source.path, hf, *m.model);
  m.description = fmt::format("{} ({})", source.path, hf.family->architecture);
  return m;
}

} // namespace

LoadedModel load_model(const ModelSource& source) {
  LoadedModel m;
  if (fs::exists(fs::path(source.path) / "config.yml"))
    m = load_run(source);
  else if (fs::exists(fs::path(source.path) / "config.json"))
    m = load_model_dir(source);
  else
    throw InputError(fmt::format("{}: neither a run directory (config.yml) nor a Hugging Face model directory "
                                 "(config.json)", source.path));
  ready(m);
  return m;
}

} // namespace shadowgrad::generate
