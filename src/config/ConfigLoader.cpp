#include "config/ConfigLoader.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include "config/BatchSizeSchedule.h"
#include "config/ConfigSchema.h"
#include "util/Errors.h"

namespace shadowgrad::config {
namespace {

const KeySpec& known_key(const std::string& name, const std::string& where) {
  if (const KeySpec* key = find_key(name)) return *key;
  std::string hint = suggest_key(name);
  throw ConfigError(fmt::format("{}unknown config key '{}'{}", where, name,
                                hint.empty() ? "" : fmt::format(" (did you mean '{}'?)", hint)));
}

std::string read_file(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::exists(path, ec)) throw ConfigError(fmt::format("config file '{}' does not exist", path));
  if (fs::is_directory(path, ec)) throw ConfigError(fmt::format("config file '{}' is a directory", path));
  std::ifstream in(path);
  if (!in) throw ConfigError(fmt::format("config file '{}' cannot be read", path));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Held-out evaluation: file data needs a held-out file; synthetic data is endless, so it needs a batch count.
void validate_eval(const Config& c) {
  if (c.dataset_type == DatasetType::synthetic && !c.eval_dataset_path.empty())
    throw ConfigError(fmt::format("eval_dataset_path='{}' is set but dataset_type=synthetic; synthetic eval data "
                                  "comes from the generator", c.eval_dataset_path));
  if (c.eval_interval <= 0 && c.eval_interval_sequences <= 0) {
    if (!c.eval_prompts_path.empty())
      throw ConfigError(fmt::format("eval_prompts_path='{}' writes samples at each evaluation, and none is scheduled: "
                                    "set eval_interval=N or eval_interval_sequences=N",
                                    c.eval_prompts_path));
    return;
  }
  const std::string asked = c.eval_interval > 0 ? fmt::format("eval_interval={}", c.eval_interval)
                                                : fmt::format("eval_interval_sequences={}", c.eval_interval_sequences);
  if (c.dataset_type != DatasetType::synthetic && c.eval_dataset_path.empty())
    throw ConfigError(fmt::format("{} with dataset_type={} needs eval_dataset_path=<a held-out file> "
                                  "(build/tokenize writes val.bin); training never reads it",
                                  asked, c.dataset_type));
  if (c.dataset_type == DatasetType::synthetic && c.eval_steps <= 0)
    throw ConfigError(fmt::format("{} with synthetic data needs eval_steps >= 1 (synthetic data has no "
                                  "end to evaluate up to)", asked));
}

// A batch that changes during the run: batch_size_schedule or batch_size_policy=gns, not both.
void validate_batch_growth(const Config& c) {
  const BatchSizeSchedule schedule = BatchSizeSchedule::parse(c.batch_size_schedule);  // names a bad entry
  if (!schedule.empty() && c.batch_size_policy != BatchSizePolicy::none)
    throw ConfigError(fmt::format("batch_size_schedule='{}' and batch_size_policy={} both set the global batch; give "
                                  "one of them",
                                  c.batch_size_schedule, c.batch_size_policy));
  if (!schedule.empty() && schedule.largest() > (int64_t(1) << 20))
    throw ConfigError(fmt::format("batch_size_schedule entry '{}': keep the global batch under 1048576 sequences",
                                  schedule.points().back().text));
  if (c.batch_size_policy == BatchSizePolicy::gns && !c.gradient_noise_scale)
    throw ConfigError("batch_size_policy=gns needs gradient_noise_scale=true: it acts on the measured noise scale");
}

// The LR schedule: warmup and the wsd decay must not overlap. (A train_tokens run may stop earlier at `steps`, e.g.
// to train part of it now and resume it later: the trainer says so at the end.)
void validate_lr_schedule(const Config& c) {
  if (c.lr_schedule_type == LrScheduleType::wsd && c.warmup_steps_fraction + c.wsd_decay_steps_fraction > 1)
    throw ConfigError(fmt::format("warmup_steps_fraction={} + wsd_decay_steps_fraction={} exceed 1: the warmup and "
                                  "the decay of lr_schedule_type=wsd would overlap; lower one of them",
                                  c.warmup_steps_fraction, c.wsd_decay_steps_fraction));
}

} // namespace

std::string resolve_config_path(const std::string& arg, const std::string& configs_dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::exists(arg, ec) || configs_dir.empty() || fs::path(arg).is_absolute()) return arg;
  fs::path candidate = fs::path(configs_dir) / arg;
  return fs::exists(candidate, ec) ? candidate.string() : arg;
}

void apply_overrides(Config& cfg, const std::vector<std::string>& overrides) {
  std::set<std::string> seen;
  for (const auto& item : overrides) {
    auto eq = item.find('=');
    if (eq == std::string::npos || eq == 0)
      throw ConfigError(fmt::format("override '{}' is not of the form key=value", item));
    std::string name = item.substr(0, eq);
    const KeySpec& key = known_key(name, "");
    if (!seen.insert(name).second)
      throw ConfigError(fmt::format("config key '{}' is overridden twice; give it once", name));
    key.set(cfg, item.substr(eq + 1));
    cfg.given_keys.insert(name);
  }
}

namespace {

// base_config names another YAML file to read first: next to the file that names it, else as CONFIG is looked up (the
// current directory, then `configs_dir`, where base.yml lives).
std::string base_config_path(const std::string& name, const std::string& from, const std::string& configs_dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path beside = fs::path(from).parent_path() / name;
  if (!fs::path(name).is_absolute() && fs::exists(beside, ec)) return beside.string();
  return resolve_config_path(name, configs_dir);
}

// Applies one file's keys over `cfg`: its base_config first (MaxText's key), then its own keys. `chain` holds the
// files being read, to refuse a cycle.
void apply_file(Config& cfg, const std::string& text, const std::string& path, const std::string& configs_dir,
                std::vector<std::string>& chain) {
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::ParserException& e) {
    throw ConfigError(fmt::format("{}:{}: YAML syntax error: {}", path, e.mark.line + 1, e.msg));
  }
  if (!root.IsNull() && !root.IsMap())
    throw ConfigError(fmt::format("{}: expected a YAML map of key: value lines", path));
  const Config defaults;
  std::set<std::string> seen;
  for (const auto& entry : root) {
    std::string where = fmt::format("{}:{}: ", path, entry.first.Mark().line + 1);
    if (!entry.first.IsScalar()) throw ConfigError(where + "a config key must be a plain name, not a list or map");
    std::string name = entry.first.as<std::string>();
    if (!seen.insert(name).second) throw ConfigError(fmt::format("{}config key '{}' appears twice", where, name));
    if (name != "base_config") continue;
    if (!entry.second.IsScalar() || entry.second.Scalar().empty())
      throw ConfigError(where + "base_config must name a YAML file, e.g. base_config: base.yml");
    const std::string base = base_config_path(entry.second.Scalar(), path, configs_dir);
    std::error_code ec;
    const std::string id = std::filesystem::weakly_canonical(base, ec).string();
    if (std::find(chain.begin(), chain.end(), id) != chain.end())
      throw ConfigError(fmt::format("{}base_config '{}' is a cycle: {} is already being read", where,
                                    entry.second.Scalar(), base));
    std::string base_text;
    try {
      if (std::filesystem::exists(base, ec) && !std::filesystem::is_regular_file(base, ec))
        throw ConfigError(fmt::format("'{}' is not a regular file", base));  // a device would be read forever
      base_text = read_file(base);
    } catch (const ConfigError& e) {
      throw ConfigError(where + "base_config: " + e.what());
    }
    chain.push_back(id);
    apply_file(cfg, base_text, base, configs_dir, chain);
    chain.pop_back();
  }
  for (const auto& entry : root) {
    std::string where = fmt::format("{}:{}: ", path, entry.first.Mark().line + 1);
    std::string name = entry.first.as<std::string>();
    if (name == "base_config") continue;
    const KeySpec& key = known_key(name, where);
    if (!entry.second.IsScalar() && !entry.second.IsNull())
      throw ConfigError(fmt::format("{}config key '{}' must be a single value, not a list or map", where, name));
    try {
      key.set(cfg, entry.second.IsNull() ? "" : entry.second.Scalar());
    } catch (const ConfigError& e) {
      throw ConfigError(where + e.what());
    }
    if (key.get(cfg) != key.get(defaults))
      cfg.given_keys.insert(name);
    else
      cfg.given_keys.erase(name);  // set back to its default over a base_config
  }
}

} // namespace

Config load_config(const std::string& path, const std::vector<std::string>& overrides, const std::string& configs_dir) {
  return load_config_text(read_file(path), path, overrides, configs_dir);
}

Config load_config_text(const std::string& text, const std::string& path, const std::vector<std::string>& overrides,
                        const std::string& configs_dir) {
  Config cfg;
  std::error_code ec;
  std::vector<std::string> chain{std::filesystem::weakly_canonical(path, ec).string()};
  apply_file(cfg, text, path, configs_dir, chain);
  apply_overrides(cfg, overrides);
  validate(cfg);
  return cfg;
}

void validate(const Config& c) {
  auto fail = [](const std::string& msg) { throw ConfigError(msg); };
  if (c.base_num_query_heads % c.base_num_kv_heads != 0)
    fail(fmt::format("base_num_query_heads ({}) must be a multiple of base_num_kv_heads ({})",
                     c.base_num_query_heads, c.base_num_kv_heads));
  if (c.head_dim % 2 != 0) fail(fmt::format("head_dim ({}) must be even for RoPE", c.head_dim));
  if (c.dataset_type == DatasetType::text && c.dataset_path.empty())
    fail("dataset_type=text needs dataset_path=<a text file>");
  if (c.dataset_type == DatasetType::tokens && c.dataset_path.empty())
    fail("dataset_type=tokens needs dataset_path=<a token file> (build/tokenize writes train.bin)");
  if (c.dataset_type == DatasetType::sft && c.dataset_path.empty())
    fail("dataset_type=sft needs dataset_path=<an SFT file> (scripts/prepare_sft.sh writes one from JSONL)");
  if (c.dataset_type == DatasetType::preference && c.dataset_path.empty())
    fail("dataset_type=preference needs dataset_path=<a pair file> (scripts/prepare_preference.sh writes one)");
  if (c.use_dpo && c.dataset_type != DatasetType::preference)
    fail(fmt::format("use_dpo=true trains on chosen/rejected pairs, but dataset_type={}; set dataset_type=preference "
                     "and dataset_path=<a pair file> (scripts/prepare_preference.sh)",
                     c.dataset_type));
  if (c.dataset_type == DatasetType::preference && !c.use_dpo)
    fail("dataset_type=preference holds chosen/rejected pairs, which only the preference loss reads; set use_dpo=true "
         "(docs/preference.md)");
  if (c.dpo_label_smoothing > 0 && c.dpo_loss_type != DpoLossType::sigmoid)
    fail(fmt::format("dpo_label_smoothing={} applies to dpo_loss_type=sigmoid only (got {})", c.dpo_label_smoothing,
                     c.dpo_loss_type));
  if (c.dataset_type == DatasetType::synthetic && !c.dataset_path.empty())
    fail(fmt::format("dataset_path='{}' is set but dataset_type=synthetic; set dataset_type=text or tokens to use it",
                     c.dataset_path));
  if (c.shard_parameters_over_data && !c.eval_prompts_path.empty())
    fail("eval_prompts_path's samples are generated by rank 0 alone, and under shard_parameters_over_data=true every "
         "layer's weights are gathered by all processes together: drop one of the two (generate from a checkpoint "
         "with scripts/generate.sh instead)");
  validate_eval(c);
  if (c.shard_gradients_over_data && !c.shard_optimizer_over_data)
    fail("shard_gradients_over_data=true keeps only this process's range of the gradient, and only the optimizer of "
         "that range can use it: set shard_optimizer_over_data=true too (docs/distributed.md, 'Sharded training')");
  if (c.shard_parameters_over_data && c.lora_rank == 0 && !c.shard_optimizer_over_data)
    fail("shard_parameters_over_data=true keeps only this process's range of the weights, and only the optimizer of "
         "that range can update it: set shard_optimizer_over_data=true too (docs/distributed.md, 'Sharded training')");
  if (c.keep_best_checkpoint && !c.enable_checkpointing)
    fail("keep_best_checkpoint=true keeps a checkpoint, and enable_checkpointing=false writes none");
  if (c.keep_best_checkpoint && c.eval_interval <= 0 && c.eval_interval_sequences <= 0)
    fail("keep_best_checkpoint=true keeps the checkpoint of the lowest eval_loss, and no evaluation is scheduled: set "
         "eval_interval=N (and eval_dataset_path)");
  validate_batch_growth(c);
  validate_lr_schedule(c);
  if (c.eval_interval > 0 && c.eval_interval_sequences > 0)
    fail(fmt::format("eval_interval={} and eval_interval_sequences={} both set when to evaluate; give one of them",
                     c.eval_interval, c.eval_interval_sequences));
  if (c.per_device_batch_size == kAuto && c.global_batch_size == 0 && c.batch_size_schedule.empty())
    fail("per_device_batch_size=auto needs global_batch_size: auto picks the largest microbatch that divides "
         "global_batch_size / WORLD_SIZE and fits memory_budget_mib");
  // Keep one global batch within reason: 2^20 sequences would not fit in memory anyway.
  if (c.local_batch() > (int64_t(1) << 20))
    fail(fmt::format("per_device_batch_size ({}) x gradient_accumulation_steps ({}) is too large; "
                     "keep the global batch under 1048576 sequences",
                     c.per_device_batch_size, c.gradient_accumulation_steps));
  if (c.run_name.find('/') != std::string::npos || c.run_name == "." || c.run_name == "..")
    fail(fmt::format("run_name '{}' must be a plain directory name", c.run_name));
  if (c.base_output_directory.empty()) fail("base_output_directory must not be empty");
  if (c.load_checkpoint_step == 0) fail("load_checkpoint_step=0: there is no step-0 checkpoint; use -1 (the latest) or N >= 1");
  if (c.load_checkpoint_step > 0 && !c.resume)
    fail(fmt::format("load_checkpoint_step={} needs resume=true", c.load_checkpoint_step));
  if (c.adam_state_dtype != FloatDtype::float32 && (c.opt_type != OptType::adamw || !c.opt_fused))
    fail(fmt::format("adam_state_dtype={} needs opt_type=adamw and opt_fused=true (got opt_type={}, opt_fused={})",
                     c.adam_state_dtype, c.opt_type, c.opt_fused));
  if (c.load_checkpoint_step > 0 && c.run_name.empty())
    fail(fmt::format("load_checkpoint_step={} needs run_name=<the run to resume>", c.load_checkpoint_step));
}

} // namespace shadowgrad::config
