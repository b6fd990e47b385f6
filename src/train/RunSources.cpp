#include "train/RunSources.h"

#include <filesystem>
#include <string>

#include <spdlog/spdlog.h>
#include <yaml-cpp/yaml.h>

#include "checkpoint/Checkpointer.h"
#include "config/ConfigLoader.h"
#include "config/ConfigSchema.h"
#include "hub/BaseRecord.h"
#include "hub/Import.h"
#include "hub/PeftAdapter.h"

namespace shadowgrad::train {

namespace {

// The keys lora_restore_path sets (hub::apply_adapter_config), all four pinned by the checkpoint.
constexpr const char* kAdapterKeys[] = {"lora_rank", "lora_alpha", "lora_use_rslora", "lora_target_modules"};

// A resumed run's LoRA keys from its config.yml, each one not given (one given with another value is refused by the
// checkpoint's frozen keys, naming both). False, changing nothing, when config.yml holds no LoRA run to take them
// from (it cannot be read, or has lora_rank 0).
bool adopt_recorded_lora_keys(config::Config& cfg, const std::string& run_dir) {
  const std::string path = (std::filesystem::path(run_dir) / "config.yml").string();
  YAML::Node saved;
  try {
    saved = YAML::LoadFile(path);
  } catch (const YAML::Exception&) {
    return false;
  }
  if (!saved.IsMap() || !saved["lora_rank"] || !saved["lora_rank"].IsScalar() || saved["lora_rank"].Scalar() == "0")
    return false;
  config::Config adopted = cfg;
  for (const char* key : kAdapterKeys) {
    if (cfg.given_keys.count(key)) continue;
    if (!saved[key] || !saved[key].IsScalar()) return false;
    config::find_key(key)->set(adopted, saved[key].Scalar());
  }
  config::validate(adopted);
  cfg = adopted;
  spdlog::info("lora_restore_path={} is not read again: the run resumes its adapters from its checkpoint, with the "
               "LoRA keys of its config.yml",
               cfg.lora_restore_path);
  return true;
}

} // namespace

void configure_from_sources(config::Config& cfg) {
  const bool resumes = checkpoint::can_resume(cfg);
  if (!cfg.load_parameters_path.empty()) {
    if (resumes) {
      const std::string dir = hub::run_base_dir(cfg.load_parameters_path, checkpoint::run_dir_of(cfg));
      if (std::filesystem::absolute(cfg.load_parameters_path).lexically_normal() !=
          std::filesystem::path(dir).lexically_normal())
        spdlog::info("load_parameters_path={}: the run resumes on {}, where it recorded its base",
                     cfg.load_parameters_path, dir);
      cfg.load_parameters_path = dir;
    }
    hub::configure_from_model_dir(cfg);
  }
  if (cfg.lora_restore_path.empty()) return;
  if (resumes && adopt_recorded_lora_keys(cfg, checkpoint::run_dir_of(cfg))) return;
  hub::configure_from_adapter_dir(cfg);
}

} // namespace shadowgrad::train
