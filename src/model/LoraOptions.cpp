#include "model/LoraOptions.h"

#include <cmath>
#include <sstream>

#include <fmt/format.h>

#include "config/Config.h"
#include "util/Errors.h"

namespace shadowgrad::model {

const char* hf_projection_name(Projection p) {
  static constexpr const char* names[] = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};
  return names[static_cast<int>(p)];
}

const char* projection_suffix(Projection p) {
  static constexpr const char* names[] = {"wq", "wk", "wv", "wo", "w_gate", "w_up", "w_down"};
  return names[static_cast<int>(p)];
}

std::array<bool, kProjections> parse_lora_targets(const std::string& list) {
  std::array<bool, kProjections> targeted{};
  if (list == "all-linear") {
    targeted.fill(true);
    return targeted;
  }
  std::stringstream in(list);
  std::string item;
  while (std::getline(in, item, ',')) {
    item.erase(0, item.find_first_not_of(" \t"));
    item.erase(item.find_last_not_of(" \t") + 1);
    bool known = false;
    for (Projection p : kAllProjections)
      if (item == hf_projection_name(p)) known = targeted[static_cast<int>(p)] = true;
    if (!known)
      throw ConfigError(fmt::format("lora_target_modules={}: '{}' is not one of q_proj, k_proj, v_proj, o_proj, "
                                    "gate_proj, up_proj, down_proj (or all-linear)",
                                    list, item));
  }
  bool any = false;
  for (bool t : targeted) any = any || t;
  if (!any) throw ConfigError(fmt::format("lora_target_modules='{}' names no projection", list));
  return targeted;
}

std::string lora_targets_string(const std::array<bool, kProjections>& targeted) {
  std::string out;
  for (Projection p : kAllProjections)
    if (targeted[static_cast<int>(p)]) out += (out.empty() ? "" : ",") + std::string(hf_projection_name(p));
  return out;
}

std::string canonical_lora_targets(const std::string& list) {
  const auto targeted = parse_lora_targets(list);
  for (bool t : targeted)
    if (!t) return lora_targets_string(targeted);
  return "all-linear";
}

LoraOptions LoraOptions::from_config(const config::Config& c) {
  LoraOptions o;
  if (c.lora_rank == 0) return o;
  o.rank = c.lora_rank;
  o.scale = c.lora_use_rslora ? c.lora_alpha / std::sqrt(double(c.lora_rank)) : c.lora_alpha / double(c.lora_rank);
  // Preference tuning switches dropout off unless asked to keep it (TRL's disable_dropout=True; docs/preference.md).
  o.dropout = c.use_dpo && c.dpo_disable_dropout ? 0.0 : c.lora_dropout;
  o.dropout_seed = static_cast<uint64_t>(c.data_shuffle_seed);
  o.targeted = parse_lora_targets(c.lora_target_modules);
  return o;
}

} // namespace shadowgrad::model
