#include "generate/ModelSource.h"

#include <algorithm>
#include <filesystem>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "config/ConfigLoader.h"
#include "config/Dtypes.h"
#include "hub/HfConfig.h"
#include "hub/ConfigMapping.h"
#include "hub/Import.h"
#include "hub/ModelWeights.h"
#include "hub/PeftAdapter.h"
#include "model/WeightCount.h"
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

// "models/SmolLM2-135M/" and "HuggingFaceTB/SmolLM2-135M" -> "SmolLM2-135M"
std::string last_name(const std::string& path) {
  auto p = fs::path(path).lexically_normal();
  if (p.filename().empty()) p = p.parent_path();
  return p.filename().string();
}

// Before the decoder is built: a rank above a projection's side is said, and weights that cannot fit are refused
// (exit 2) rather than tried in LibTorch's allocator.
void check_before_build(const config::Config& cfg, const std::string& what) {
  const model::DecoderOptions o = model::DecoderOptions::from_config(cfg);
  if (const std::string w = model::lora_rank_warning(o); !w.empty()) spdlog::warn("{}: {}", what, w);
  model::refuse_weights_beyond_headroom(o, what);
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
  // A run from a model with a sliding window (Mistral) trained within it: decoding further is refused, as training is.
  const fs::path carried = fs::path(hub::carried_dir(source.path)) / "config.json";
  if (fs::exists(carried))
    hub::refuse_past_sliding_window(hub::read_hf_config(carried.string()), m.cfg.max_target_length, carried.string(),
                                    source.max_length > 0 ? "--max-length" : "max_target_length");
  check_before_build(m.cfg, source.path);
  m.model = model::Decoder(model::DecoderOptions::from_config(m.cfg));
  // A LoRA run's checkpoint holds its adapters alone: the frozen base is read again from where the run read it,
  // after checking it is the base the run recorded (a from-scratch base is the seeded init the constructor made).
  m.step = hub::load_model_weights(hub::run_weights(m.cfg, source.path, source.step), m.cfg, *m.model).step;
  m.description = fmt::format("run {} step {}", source.path, m.step);
  if (m.cfg.lora_rank > 0)
    m.description += fmt::format(" (LoRA r={} over {})", m.cfg.lora_rank,
                                 m.cfg.load_parameters_path.empty() ? "its seeded base" : m.cfg.load_parameters_path);
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
  std::string adapter_base;
  if (!source.adapter.empty()) {
    if (!fs::is_directory(source.adapter))  // named as the user gave it, not as the key it sets
      throw InputError(fmt::format("--adapter {}: not a directory (a peft adapter directory holds adapter_config.json "
                                   "and adapter_model.safetensors)",
                                   source.adapter));
    m.cfg.lora_restore_path = source.adapter;
    adapter_base = hub::configure_from_adapter_dir(m.cfg).base_model_name_or_path;  // the LoRA keys; validates
  }
  check_before_build(m.cfg, source.adapter.empty() ? source.path
                                                   : fmt::format("{} with the adapter {}", source.path, source.adapter));
  m.model = model::Decoder(model::DecoderOptions::from_config(m.cfg));
  // An adapter made for another architecture does not fit: a tensor's shape or a layer is refused (ModelFileError).
  // One made for another checkpoint of the same shapes fits; its recorded base's name is all that can tell.
  hub::WeightSources sources;
  sources.base = source.path;
  sources.adapter = source.adapter;
  hub::load_model_weights(sources, m.cfg, *m.model);
  m.description = fmt::format("{} ({})", source.path, hf.family->architecture);
  if (source.adapter.empty()) return m;
  m.description += fmt::format(" + adapter {} (r={})", source.adapter, m.cfg.lora_rank);
  if (!adapter_base.empty() && last_name(adapter_base) != last_name(fs::absolute(source.path).string()))
    spdlog::warn("{}: base_model_name_or_path is {}, not {}: is this the adapter's base?", source.adapter,
                 adapter_base, source.path);
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
