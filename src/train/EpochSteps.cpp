#include "train/EpochSteps.h"

#include <algorithm>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "config/GlobalBatch.h"
#include "util/Errors.h"

namespace shadowgrad::train {

namespace {

const char* unit_of(config::DatasetType type) {
  switch (type) {
    case config::DatasetType::sft: return "rows";
    case config::DatasetType::preference: return "pairs";
    default: return "windows";
  }
}

} // namespace

void derive_steps_from_epochs(config::Config& cfg, const data::DataSource& source, int64_t world) {
  if (cfg.num_epochs <= 0) return;
  const std::string asked = fmt::format("num_epochs={}", cfg.num_epochs);
  if (cfg.given_keys.count("steps"))
    throw ConfigError(fmt::format("{} and steps={} both set the run's length; give one of them (num_epochs=0 to "
                                  "count steps)",
                                  asked, cfg.steps));
  if (cfg.train_tokens > 0)
    throw ConfigError(fmt::format("{} and train_tokens={} both set the run's length; give one of them", asked,
                                  cfg.train_tokens));
  const int64_t examples = source.examples_in_epochs(cfg.num_epochs);
  if (examples < 0)
    throw ConfigError(fmt::format("{} needs a dataset of finite size; dataset_type={} is endless (give steps)", asked,
                                  cfg.dataset_type));
  if (!cfg.batch_size_schedule.empty() || cfg.batch_size_policy != config::BatchSizePolicy::none)
    throw ConfigError(fmt::format("{} with a global batch that changes (batch_size_schedule, batch_size_policy): give "
                                  "train_tokens={} instead ({} {} x {} tokens)",
                                  asked, examples * cfg.tokens_per_example(), examples, unit_of(cfg.dataset_type),
                                  cfg.tokens_per_example()));
  const int64_t batch = cfg.global_batch_size > 0 ? cfg.global_batch_size : config::global_batch(cfg, world);
  cfg.steps = std::max<int64_t>(1, (examples + batch - 1) / batch);
  const int64_t spill = cfg.steps * batch - examples;
  spdlog::info("{}: {} {} of dataset_path in {} epoch(s) / global batch {} = steps={}{}", asked, examples,
               unit_of(cfg.dataset_type), cfg.num_epochs, batch, cfg.steps,
               spill > 0 ? fmt::format(" (its last step reads {} {} of the next epoch)", spill, unit_of(cfg.dataset_type))
                         : "");
}

} // namespace shadowgrad::train
