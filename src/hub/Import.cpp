#include "hub/Import.h"

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <torch/nn/module.h>

#include "hub/ConfigMapping.h"
#include "hub/Families.h"
#include "hub/SafeTensors.h"
#include "memory/MemoryBudget.h"

namespace shadowgrad::hub {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// The weight files of a model directory: the index's shards, or model.safetensors.
std::vector<std::string> weight_files(const std::string& dir) {
  const fs::path index = fs::path(dir) / kSafeTensorsIndex;
  if (!fs::exists(index)) {
    if (!fs::exists(fs::path(dir) / "model.safetensors"))
      throw ModelFileError(fmt::format("{}: neither model.safetensors nor {} (only safetensors weights are read)", dir,
                                       kSafeTensorsIndex));
    return {(fs::path(dir) / "model.safetensors").string()};
  }
  std::ifstream in(index);
  json j;
  try {
    j = json::parse(in);
  } catch (const json::exception& e) {
    throw ModelFileError(fmt::format("{}: not valid JSON ({})", index.string(), e.what()));
  }
  if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
    throw ModelFileError(fmt::format("{}: no weight_map object", index.string()));
  std::set<std::string> files;
  for (const auto& [name, file] : j["weight_map"].items()) {
    if (!file.is_string()) throw ModelFileError(fmt::format("{}: tensor '{}': file is not a string", index.string(), name));
    const std::string f = file.get<std::string>();
    if (f.empty() || f.find('/') != std::string::npos || f == "." || f == "..")
      throw ModelFileError(fmt::format("{}: tensor '{}': '{}' is not a file name in the directory", index.string(),
                                       name, f.substr(0, 80)));
    files.insert(f);
  }
  std::vector<std::string> paths;
  for (const auto& f : files) paths.push_back((fs::path(dir) / f).string());
  return paths;
}

// Tensors some checkpoints hold that are not parameters: RoPE tables saved by old transformers versions.
bool ignorable(const std::string& name) { return name.find("rotary_emb.inv_freq") != std::string::npos; }

// Before anything is allocated, from config.json and the safetensors headers alone: a tensor the weight files hold
// must have the shape config.json gives it, and the weights must fit in what this process may take (a crafted
// vocab_size of 10^12 would otherwise end in LibTorch's allocator). Missing or unexpected tensors: load_hf_weights.
void check_config_against_weights(const HfConfig& hf, const config::Config& cfg, const std::string& dir) {
  const std::string config_json = (fs::path(dir) / "config.json").string();
  std::map<std::string, std::pair<std::string, std::vector<int64_t>>> held;  // name -> (file, shape)
  for (const auto& path : weight_files(dir)) {
    const SafeTensorsFile file = SafeTensorsFile::open(path);  // a temporary's tensors() would dangle in the loop
    for (const auto& t : file.tensors()) held[t.name] = {path, t.shape};
  }
  if (hf.num_hidden_layers > int64_t(held.size()))  // bounds the name list below
    throw ModelFileError(fmt::format("{}: num_hidden_layers = {}, but the weight files hold {} tensors in all",
                                     config_json, hf.num_hidden_layers, held.size()));
  double numel = 0;  // a double: a crafted config.json's product may pass 2^63
  for (const auto& [name, shape] : tensor_shapes(hf)) {
    double n = 1;
    for (int64_t d : shape) n *= double(d);
    numel += n;
    const auto it = held.find(name);
    if (it != held.end() && it->second.second != shape)
      throw ModelFileError(fmt::format("{}: gives tensor '{}' the shape {}, but {} holds it as {}", config_json, name,
                                       c10::str(c10::IntArrayRef(shape)), it->second.first,
                                       c10::str(c10::IntArrayRef(it->second.second))));
  }
  const double bytes = numel * (cfg.weight_dtype == config::FloatDtype::bfloat16 ? 2 : 4);
  const memory::MemoryHeadroom headroom = memory::read_headroom();
  // Under ZeRO-3 no process holds the whole weights (train/ModelBuild.h): the trainer's pre-start plan checks each
  // process's share (train/MemoryProbe.h), knowing the process count.
  if (headroom.bytes >= 0 && bytes > double(headroom.bytes) && !cfg.shard_parameters_over_data)
    throw ModelFileError(fmt::format("{}: its model has {:.4g} parameters, {:.1f} GiB as weight_dtype={} alone, more "
                                     "than this process may take ({}); training needs several times that",
                                     config_json, numel, bytes / double(1 << 30), config::to_string(cfg.weight_dtype),
                                     headroom.source));
}

// A peft adapter directory given where a model is expected: say so, and where it goes.
void refuse_adapter_dir(const std::string& dir) {
  const fs::path adapter = fs::path(dir) / "adapter_config.json";
  if (fs::exists(fs::path(dir) / "config.json") || !fs::exists(adapter)) return;
  std::string base;
  try {
    std::ifstream in(adapter);
    const json j = json::parse(in);
    if (j.is_object() && j.contains("base_model_name_or_path") && j["base_model_name_or_path"].is_string())
      base = j["base_model_name_or_path"].get<std::string>();
  } catch (const json::exception&) {  // the adapter's reader names what is wrong with it, once it is given as one
  }
  throw ConfigError(fmt::format(
      "load_parameters_path={}: this is a peft LoRA adapter (adapter_config.json, no config.json), not a model: give "
      "it as lora_restore_path={} and the model it was trained on as load_parameters_path{} (docs/lora.md)",
      dir, dir, base.empty() ? "" : fmt::format(" (its adapter_config.json names '{}')", base)));
}

} // namespace

std::string carried_dir(const std::string& run_dir) { return run_dir + "/hf"; }

HfConfig configure_from_model_dir(config::Config& cfg) {
  const std::string& dir = cfg.load_parameters_path;
  if (!fs::is_directory(dir))
    throw ConfigError(fmt::format("load_parameters_path={}: not a directory (a Hugging Face model directory with "
                                  "config.json and safetensors is expected)", dir));
  refuse_adapter_dir(dir);
  HfConfig hf = read_hf_config((fs::path(dir) / "config.json").string());
  apply_hf_config(hf, cfg, dir);
  check_config_against_weights(hf, cfg, dir);
  return hf;
}

struct HfWeights::Files {
  std::string dir;
  std::vector<SafeTensorsFile> files;
  std::map<std::string, std::pair<size_t, const TensorInfo*>> where;  // HF name -> (file, entry)
  std::vector<std::pair<std::string, std::string>> names;            // HF name -> ours, the family's map
};

HfWeights::~HfWeights() = default;

HfWeights::HfWeights(const std::string& dir, const HfConfig& hf) : files_(std::make_unique<Files>()) {
  auto& files = files_->files;
  auto& where = files_->where;
  files_->dir = dir;
  for (const auto& path : weight_files(dir)) files.push_back(SafeTensorsFile::open(path));
  for (size_t f = 0; f < files.size(); ++f)
    for (const auto& t : files[f].tensors()) {
      if (where.count(t.name))
        throw ModelFileError(fmt::format("{}: tensor '{}' is also in {}", files[f].path(), t.name,
                                         files[where[t.name].first].path()));
      where[t.name] = {f, &t};
    }
  files_->names = tensor_names(*hf.family, hf.num_hidden_layers, hf.tie_word_embeddings);
  std::set<std::string> expected;
  for (const auto& [name, ours] : files_->names) expected.insert(name);
  for (const auto& [name, loc] : where) {
    if (expected.count(name) || ignorable(name)) continue;
    if (name == "lm_head.weight" && hf.tie_word_embeddings) {  // a tied model saved with its alias: the embedding rules
      spdlog::warn("{}: lm_head.weight ignored: tie_word_embeddings is true, so the output is the embedding",
                   files[loc.first].path());
      continue;
    }
    throw ModelFileError(fmt::format("{}: unexpected tensor '{}' (not part of a {} with this config.json)",
                                     files[loc.first].path(), name, hf.family->architecture));
  }
}

void HfWeights::load_into(torch::nn::Module& model, const std::function<bool(const std::string& ours)>& only) const {
  auto params = model.named_parameters();
  auto buffers = model.named_buffers();  // a LoRA model's frozen base
  at::NoGradGuard no_grad;
  for (const auto& [name, ours] : files_->names) {
    if (only && !only(ours)) continue;
    auto it = files_->where.find(name);
    if (it == files_->where.end()) throw ModelFileError(fmt::format("{}: tensor '{}' is missing", files_->dir, name));
    const SafeTensorsFile& file = files_->files[it->second.first];
    const TensorInfo& info = *it->second.second;
    at::Tensor* param = params.find(ours) ? params.find(ours) : buffers.find(ours);
    if (!param) throw std::logic_error(fmt::format("the model has no parameter {} for {}", ours, name));
    if (info.shape != param->sizes().vec())
      throw ModelFileError(fmt::format("{}: tensor '{}' has shape {}, but config.json makes it {}", file.path(), name,
                                       c10::str(c10::IntArrayRef(info.shape)), c10::str(param->sizes())));
    param->copy_(file.view(info));
    file.release(info);
  }
}

void load_hf_weights(const std::string& dir, const HfConfig& hf, torch::nn::Module& model) {
  HfWeights(dir, hf).load_into(model);
}

void carry_model_files(const std::string& dir, const std::string& run_dir) {
  const fs::path to = carried_dir(run_dir);
  fs::create_directories(to);
  std::vector<std::string> carried;
  for (const char* name : {"config.json", "tokenizer.json", "tokenizer_config.json", "chat_template.jinja",
                           "tokenizer.model", "special_tokens_map.json", "generation_config.json"}) {
    if (!fs::exists(fs::path(dir) / name)) continue;
    fs::copy_file(fs::path(dir) / name, to / name, fs::copy_options::overwrite_existing);
    carried.push_back(name);
  }
  json weights = json::array();
  for (const auto& path : weight_files(dir))
    weights.push_back({{"file", fs::path(path).filename().string()}, {"bytes", fs::file_size(path)}});
  write_json_file((to / "source.json").string(), {{"load_parameters_path", fs::absolute(dir).string()},
                                                  {"weights", weights}, {"carried", carried}});
}

} // namespace shadowgrad::hub
