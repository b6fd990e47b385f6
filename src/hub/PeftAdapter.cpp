#include "hub/PeftAdapter.h"

#include <cmath>
#include <filesystem>
#include <map>
#include <set>

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <torch/nn/module.h>

#include "config/ConfigLoader.h"
#include "config/ConfigSchema.h"
#include "hub/BaseRecord.h"
#include "hub/Families.h"
#include "hub/SafeTensors.h"
#include "model/LoraOptions.h"
#include "util/File.h"

namespace shadowgrad::hub {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr const char* kConfigFile = "adapter_config.json";
constexpr const char* kWeightsFile = "adapter_model.safetensors";

// A value peft writes for a feature that is off: null, false, "", [] or {}.
bool unset(const json& v) {
  return v.is_null() || (v.is_boolean() && !v.get<bool>()) || (v.is_string() && v.get<std::string>().empty()) ||
         ((v.is_array() || v.is_object()) && v.empty());
}

std::string shown(const json& v) {
  std::string s = v.dump();
  return s.size() > 80 ? s.substr(0, 77) + "..." : s;
}

// Fields that change what the adapter computes, each refused when set (unset() false), with the reason.
const std::map<std::string, const char*>& refused_fields() {
  static const std::map<std::string, const char*> fields = {
      {"use_dora", "DoRA adds a magnitude vector per output; only plain LoRA is read"},
      {"fan_in_fan_out", "the adapter was made for transposed (Conv1D) weights; Llama-family projections are not"},
      {"lora_bias", "lora_B has a bias; a LoRA run trains none"},
      {"modules_to_save", "the adapter carries whole trained modules (a head, an embedding) besides A and B"},
      {"rank_pattern", "per-module ranks; a LoRA run has one lora_rank"},
      {"alpha_pattern", "per-module alphas; a LoRA run has one lora_alpha"},
      {"layers_to_transform", "only some layers are adapted; a LoRA run adapts every layer"},
      {"layers_pattern", "only some layers are adapted; a LoRA run adapts every layer"},
      {"exclude_modules", "some modules are excluded from the targets; a LoRA run adapts each target in every layer"},
      {"layer_replication", "the base's layers are repeated"},
      {"trainable_token_indices", "some token embeddings train too"},
      {"target_parameters", "LoRA on parameters, not on linear modules"},
      {"use_qalora", "QA-LoRA (a quantised base)"},
      {"megatron_config", "Megatron-parallel layers"},
      {"alora_invocation_tokens", "activated LoRA (aLoRA) switches the adapter on per token"},
      {"velora_config", "a LoRA variant (VeLoRA)"},
      {"monteclora_config", "a LoRA variant (MonteCLoRA)"},
      {"use_bdlora", "a LoRA variant (block-diagonal LoRA)"},
      {"arrow_config", "a LoRA variant (Arrow routing)"},
      {"kasa_config", "a LoRA variant (KaSA)"},
  };
  return fields;
}

// Fields that do not change the adapter's math (or are read below), whatever they hold.
const std::set<std::string>& neutral_fields() {
  static const std::set<std::string> fields = {
      "peft_type", "task_type", "r", "lora_alpha", "lora_dropout", "use_rslora", "target_modules", "bias",
      "init_lora_weights", "base_model_name_or_path", "revision", "inference_mode", "auto_mapping", "peft_version",
      "megatron_core", "loftq_config", "eva_config", "corda_config", "lora_ga_config", "qalora_group_size",
      "runtime_config", "ensure_weight_tying"};
  return fields;
}

// One target_modules entry as peft matches it (the module's name, or a dot-separated tail of it) against the modules
// model.layers.{i}.self_attn.{q,k,v,o}_proj and model.layers.{i}.mlp.{gate,up,down}_proj: the projection and the
// layer it names (-1: every layer). Throws naming the entry when it can match none of them.
std::pair<model::Projection, int64_t> read_target(const std::string& entry, const std::string& path) {
  std::vector<std::string> parts;
  for (size_t at = 0, dot;; at = dot + 1) {
    dot = entry.find('.', at);
    parts.push_back(entry.substr(at, dot == std::string::npos ? std::string::npos : dot - at));
    if (dot == std::string::npos) break;
  }
  auto refuse = [&] {
    throw ModelFileError(fmt::format("{}: target_modules: '{}' is not a projection of a decoder layer (q_proj, "
                                     "k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj, or a module name ending "
                                     "in one, as model.layers.0.self_attn.q_proj)",
                                     path, entry));
  };
  const std::string& last = parts.back();
  int p = -1;
  for (model::Projection q : model::kAllProjections)
    if (last == model::hf_projection_name(q)) p = int(q);
  if (p < 0 || parts.size() > 5) refuse();
  // The module's name, right-aligned against the entry: model . layers . {i} . {group} . {proj}
  const std::string group = p <= int(model::Projection::o) ? "self_attn" : "mlp";
  const size_t n = parts.size();
  if (n >= 2 && parts[n - 2] != group) refuse();
  int64_t layer = -1;
  if (n >= 3) {
    const std::string& i = parts[n - 3];
    if (i.empty() || i.size() > 9 || i.find_first_not_of("0123456789") != std::string::npos) refuse();
    layer = std::stoll(i);
  }
  if (n >= 4 && parts[n - 4] != "layers") refuse();
  if (n >= 5 && parts[n - 5] != "model") refuse();
  return {model::Projection(p), layer};
}

std::array<AdapterConfig::Target, model::kProjections> read_targets(const json& j, const std::string& path) {
  auto refuse = [&](const std::string& why) {
    throw ModelFileError(fmt::format("{}: target_modules = {}: {}", path, shown(j), why));
  };
  std::array<AdapterConfig::Target, model::kProjections> targets{};
  if (j.is_string()) {
    if (j.get<std::string>() != "all-linear")
      refuse("a string other than \"all-linear\" is a regular expression in peft; give a list of q_proj, k_proj, "
             "v_proj, o_proj, gate_proj, up_proj, down_proj");
    for (auto& t : targets) t.every_layer = true;
    return targets;
  }
  if (!j.is_array() || j.empty()) refuse("expected a non-empty list of module names or \"all-linear\"");
  for (const auto& item : j) {
    if (!item.is_string()) refuse(fmt::format("{} is not a module name", shown(item)));
    const auto [p, layer] = read_target(item.get<std::string>(), path);
    if (layer < 0) targets[int(p)].every_layer = true;
    else targets[int(p)].layers.insert(layer);
  }
  return targets;
}

// Sets `key` from the adapter's `field` (its value as text) through the key's own parser, so that it passes the range
// check the key has when given (lora_alpha <= 1e6): a value out of range is the file's error, naming the file and the
// field. A key given with another value is refused, naming both, unless `given_wins` (a training choice such as
// lora_dropout, which does not change what the adapter computes): then the given value stays.
void adopt_field(config::Config& cfg, const char* key, const std::string& text, const char* field,
                 const std::string& dir, bool given_wins = false) {
  const config::KeySpec& spec = *config::find_key(key);
  config::Config probe;
  try {
    spec.set(probe, text);
  } catch (const ConfigError& e) {
    throw ModelFileError(fmt::format("{}: {} = {}: out of the range of {}, which it sets ({})",
                                     (fs::path(dir) / kConfigFile).string(), field, text, key, e.what()));
  }
  if (cfg.given_keys.count(key) && spec.get(cfg) != spec.get(probe)) {
    if (given_wins) return;
    throw ConfigError(fmt::format("{}={} was given, but lora_restore_path={} has {}={} in {}; drop {} (the "
                                  "adapter's shape comes from its {})",
                                  key, spec.get(cfg), dir, field, spec.get(probe), kConfigFile, key, kConfigFile));
  }
  spec.set(cfg, text);
}

// The adapter's name of a tensor in a file: peft's ".default." infix (lora_A.default.weight) dropped.
std::string without_infix(const std::string& name) {
  for (const char* kind : {".lora_A", ".lora_B"}) {
    const std::string with = std::string(kind) + ".default.weight";
    if (name.size() > with.size() && name.compare(name.size() - with.size(), with.size(), with) == 0)
      return name.substr(0, name.size() - with.size()) + kind + ".weight";
  }
  return name;
}

} // namespace

AdapterConfig read_adapter_config(const std::string& dir) {
  const std::string path = (fs::path(dir) / kConfigFile).string();
  if (!fs::exists(path))
    throw ModelFileError(fmt::format("{}: no {} (a peft LoRA adapter directory holds {} and {})", dir, kConfigFile,
                                     kConfigFile, kWeightsFile));
  json j;
  try {
    j = json::parse(util::read_whole_file(path));
  } catch (const json::exception& e) {
    throw ModelFileError(fmt::format("{}: not valid JSON ({})", path, e.what()));
  }
  if (!j.is_object()) throw ModelFileError(fmt::format("{}: not a JSON object", path));
  auto refuse = [&](const std::string& field, const std::string& why) {
    throw ModelFileError(fmt::format("{}: {} = {}: {}", path, field, shown(j[field]), why));
  };
  if (!j.contains("peft_type")) throw ModelFileError(fmt::format("{}: no peft_type (only LORA adapters are read)", path));
  if (j["peft_type"] != "LORA") refuse("peft_type", "only LORA adapters are read");
  if (j.contains("task_type") && !j["task_type"].is_null() && j["task_type"] != "CAUSAL_LM")
    refuse("task_type", "only CAUSAL_LM adapters (on a ...ForCausalLM model) are read");
  if (j.contains("bias") && j["bias"] != "none")
    refuse("bias", "the adapter trains the base's biases too; only \"none\" is read");
  if (j.contains("init_lora_weights")) {
    const json& init = j["init_lora_weights"];
    const bool plain = init.is_boolean() || init == "gaussian" || init == "orthogonal" || init == "eva";
    if (!plain)
      refuse("init_lora_weights", "this initialisation rewrites the base weights or makes a LoRA variant (pissa, "
                                  "olora, corda, loftq, mica): the adapter does not apply to the unchanged base");
  }
  for (const auto& [field, value] : j.items()) {
    if (neutral_fields().count(field)) continue;
    auto it = refused_fields().find(field);
    if (it != refused_fields().end()) {
      if (!unset(value)) refuse(field, it->second);
    } else if (!unset(value)) {
      refuse(field, "a field this reader does not know; refused rather than ignored, as it may change what the "
                    "adapter computes");
    }
  }

  AdapterConfig a;
  if (!j.contains("r") || !j["r"].is_number_integer() || j["r"].get<int64_t>() < 1)
    throw ModelFileError(fmt::format("{}: r = {}: expected a positive integer", path, shown(j.value("r", json()))));
  a.r = j["r"].get<int64_t>();
  if (!j.contains("lora_alpha") || !j["lora_alpha"].is_number())
    throw ModelFileError(fmt::format("{}: lora_alpha = {}: expected a number", path, shown(j.value("lora_alpha", json()))));
  a.lora_alpha = j["lora_alpha"].get<double>();
  if (j.contains("lora_dropout") && !j["lora_dropout"].is_null()) {
    if (!j["lora_dropout"].is_number()) refuse("lora_dropout", "expected a number");
    a.lora_dropout = j["lora_dropout"].get<double>();
  }
  if (j.contains("use_rslora") && !j["use_rslora"].is_null()) {
    if (!j["use_rslora"].is_boolean()) refuse("use_rslora", "expected true or false");
    a.use_rslora = j["use_rslora"].get<bool>();
  }
  if (!j.contains("target_modules") || j["target_modules"].is_null())
    throw ModelFileError(fmt::format("{}: no target_modules", path));
  a.targets = read_targets(j["target_modules"], path);
  a.path = path;
  if (j.contains("base_model_name_or_path") && j["base_model_name_or_path"].is_string())
    a.base_model_name_or_path = j["base_model_name_or_path"].get<std::string>();
  return a;
}

std::string AdapterConfig::target_modules(int64_t layers) const {
  std::array<bool, model::kProjections> targeted{};
  for (model::Projection p : model::kAllProjections) {
    const Target& t = targets[int(p)];
    if (!t.layers.empty() && *t.layers.rbegin() >= layers)
      throw ModelFileError(fmt::format("{}: target_modules names {} of layer {}, but the base has {} layers", path,
                                       model::hf_projection_name(p), *t.layers.rbegin(), layers));
    if (!t.every_layer && !t.layers.empty() && int64_t(t.layers.size()) != layers) {
      // Layers 0..n-1 and no more: what an adapter made for an n-layer model names (peft saves all-linear so).
      const int64_t n = int64_t(t.layers.size());
      const bool first_n = *t.layers.begin() == 0 && *t.layers.rbegin() == n - 1;
      const std::string other =
          first_n ? fmt::format(": it names layers 0 to {} only, as an adapter made for another model, of {} layers, "
                                "would{}",
                                n - 1, n,
                                base_model_name_or_path.empty()
                                    ? ""
                                    : fmt::format(" (its base_model_name_or_path is {})", base_model_name_or_path))
                  : "; a LoRA run adapts each target in every layer";
      throw ModelFileError(fmt::format("{}: target_modules adapts {} in {} of the base's {} layers{}", path,
                                       model::hf_projection_name(p), t.layers.size(), layers, other));
    }
    targeted[int(p)] = t.every_layer || !t.layers.empty();
  }
  for (bool t : targeted)
    if (!t) return model::lora_targets_string(targeted);
  return "all-linear";
}

void apply_adapter_config(const AdapterConfig& a, config::Config& cfg, const std::string& dir) {
  adopt_field(cfg, "lora_rank", fmt::format("{}", a.r), "r", dir);
  adopt_field(cfg, "lora_alpha", fmt::format("{}", a.lora_alpha), "lora_alpha", dir);
  adopt_field(cfg, "lora_use_rslora", a.use_rslora ? "true" : "false", "use_rslora", dir);
  // peft trains on with the adapter's lora_dropout (PeftModel.from_pretrained(..., is_trainable=True)): it is the
  // default here too, and a lora_dropout given wins (dropout is a choice of training, not part of the adapter).
  adopt_field(cfg, "lora_dropout", fmt::format("{}", a.lora_dropout), "lora_dropout", dir, /*given_wins=*/true);
  const std::string targets = a.target_modules(cfg.base_num_decoder_layers);
  if (cfg.given_keys.count("lora_target_modules") &&
      model::parse_lora_targets(cfg.lora_target_modules) != model::parse_lora_targets(targets))
    throw ConfigError(fmt::format("lora_target_modules={} was given, but lora_restore_path={} has target_modules={} "
                                  "in {}; drop lora_target_modules (the adapter's shape comes from its {})",
                                  cfg.lora_target_modules, dir, targets, kConfigFile, kConfigFile));
  cfg.lora_target_modules = targets;
  config::validate(cfg);
}

AdapterConfig configure_from_adapter_dir(config::Config& cfg) {
  const std::string& dir = cfg.lora_restore_path;
  if (!fs::is_directory(dir))
    throw ConfigError(fmt::format("lora_restore_path={}: not a directory (a peft adapter directory with {} and {} is "
                                  "expected)", dir, kConfigFile, kWeightsFile));
  AdapterConfig a = read_adapter_config(dir);
  apply_adapter_config(a, cfg, dir);
  return a;
}

std::vector<AdapterTensor> adapter_tensor_names(int64_t layers, const std::string& targets) {
  const auto targeted = model::parse_lora_targets(targets);
  std::map<std::string, std::string> hf_name;  // ours -> Hugging Face name, from the one map
  for (const auto& [hf, ours] : tensor_names(llama_family(), layers, true)) hf_name[ours] = hf;
  std::vector<AdapterTensor> names;
  for (int64_t i = 0; i < layers; ++i)
    for (model::Projection p : model::kAllProjections) {
      if (!targeted[int(p)]) continue;
      const std::string weight = fmt::format("layer{}_{}", i, model::projection_suffix(p));
      const std::string& hf = hf_name.at(weight);  // model.layers.0.self_attn.q_proj.weight
      const std::string module = "base_model.model." + hf.substr(0, hf.size() - std::string(".weight").size());
      names.push_back({module + ".lora_A.weight", weight + "_lora_a"});
      names.push_back({module + ".lora_B.weight", weight + "_lora_b"});
    }
  return names;
}

void load_adapter_weights(const std::string& dir, const config::Config& cfg, torch::nn::Module& model) {
  const std::string path = (fs::path(dir) / kWeightsFile).string();
  if (!fs::exists(path))
    throw ModelFileError(fmt::format("{}: no {}{}", dir, kWeightsFile,
                                     fs::exists(fs::path(dir) / "adapter_model.bin")
                                         ? " (adapter_model.bin is the legacy pickle form; only safetensors is read: "
                                           "save with safe_serialization=True)"
                                         : ""));
  const SafeTensorsFile file = SafeTensorsFile::open(path);
  const auto names = adapter_tensor_names(cfg.base_num_decoder_layers, cfg.lora_target_modules);
  std::map<std::string, const TensorInfo*> in_file;  // name without the infix -> entry
  for (const auto& t : file.tensors())
    if (!in_file.emplace(without_infix(t.name), &t).second)
      throw ModelFileError(fmt::format("{}: tensor '{}' is given twice (with and without peft's .default. infix)",
                                       path, without_infix(t.name)));
  std::set<std::string> expected;
  for (const auto& n : names) expected.insert(n.peft);
  for (const auto& [name, info] : in_file)
    if (!expected.count(name))
      throw ModelFileError(fmt::format("{}: unexpected tensor '{}' (not an adapter of lora_target_modules={} on {} "
                                       "layers; DoRA's magnitude vectors, biases and other modules are not read)",
                                       path, info->name, cfg.lora_target_modules, cfg.base_num_decoder_layers));
  auto params = model.named_parameters();
  auto buffers = model.named_buffers();
  std::vector<std::pair<at::Tensor*, const TensorInfo*>> copies;
  for (const auto& n : names) {
    auto it = in_file.find(n.peft);
    if (it == in_file.end())
      throw ModelFileError(fmt::format("{}: tensor '{}' is missing (lora_target_modules={}: every targeted projection "
                                       "of every layer needs its lora_A and lora_B)",
                                       path, n.peft, cfg.lora_target_modules));
    const TensorInfo& info = *it->second;
    at::Tensor* param = params.find(n.ours);
    if (!param) throw std::logic_error(fmt::format("the model has no adapter parameter {} for {}", n.ours, n.peft));
    if (info.shape != param->sizes().vec()) {
      const std::string base = n.ours.substr(0, n.ours.size() - std::string("_lora_a").size());
      const at::Tensor* w = buffers.find(base) ? buffers.find(base) : params.find(base);
      throw ModelFileError(fmt::format("{}: tensor '{}' has shape {}, but it must be {} to fit the base ({} is {}, "
                                       "lora_rank={})",
                                       path, info.name, c10::str(c10::IntArrayRef(info.shape)),
                                       c10::str(param->sizes()), base, w ? c10::str(w->sizes()) : "absent",
                                       cfg.lora_rank));
    }
    if (info.dtype != "F32" && info.dtype != "BF16" && info.dtype != "F16")
      throw ModelFileError(fmt::format("{}: tensor '{}' is {}; adapters must be F32, BF16 or F16", path, info.name,
                                       info.dtype));
    copies.emplace_back(param, &info);
  }
  at::NoGradGuard no_grad;
  for (const auto& [param, info] : copies) param->copy_(file.view(*info));
}

void export_adapter(const config::Config& cfg, torch::nn::Module& model, const std::string& run_dir,
                    const std::string& out_dir) {
  if (cfg.lora_rank <= 0)
    throw InputError(fmt::format("{}: lora_rank=0: the run trained no adapters; export it without --adapter", run_dir));
  auto params = model.named_parameters();
  std::vector<std::pair<std::string, at::Tensor>> tensors;
  for (const auto& n : adapter_tensor_names(cfg.base_num_decoder_layers, cfg.lora_target_modules)) {
    const at::Tensor* p = params.find(n.ours);
    if (!p) throw std::logic_error(fmt::format("export: the model has no adapter parameter {} for {}", n.ours, n.peft));
    tensors.emplace_back(n.peft, p->detach().to(at::kFloat));
  }
  json targets = json::array();
  const auto targeted = model::parse_lora_targets(cfg.lora_target_modules);
  for (model::Projection p : model::kAllProjections)
    if (targeted[int(p)]) targets.push_back(model::hf_projection_name(p));
  // peft writes lora_alpha as an integer; keep that form when the value is one.
  const double alpha = cfg.lora_alpha;
  const json alpha_json = std::floor(alpha) == alpha && std::fabs(alpha) < 1e15 ? json(int64_t(alpha)) : json(alpha);
  const json config = {{"peft_type", "LORA"},
                       {"task_type", "CAUSAL_LM"},
                       {"base_model_name_or_path", recorded_base_dir(run_dir)},
                       {"r", cfg.lora_rank},
                       {"lora_alpha", alpha_json},
                       {"lora_dropout", cfg.lora_dropout},
                       {"target_modules", targets},
                       {"bias", "none"},
                       {"fan_in_fan_out", false},
                       {"use_rslora", cfg.lora_use_rslora},
                       {"use_dora", false},
                       {"inference_mode", true}};
  fs::create_directories(out_dir);
  write_safetensors((fs::path(out_dir) / kWeightsFile).string(), tensors, {{"format", "pt"}});
  util::write_file_atomically((fs::path(out_dir) / kConfigFile).string(), config.dump(2) + "\n");
}

} // namespace shadowgrad::hub
