#include "hub/Export.h"

#include <filesystem>
#include <map>
#include <optional>

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <torch/nn/module.h>

#include "hub/ConfigMapping.h"
#include "hub/Families.h"
#include "hub/Import.h"
#include "hub/SafeTensors.h"
#include "model/LoraOptions.h"
#include "util/Errors.h"

namespace shadowgrad::hub {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

c10::ScalarType dtype_named(const std::string& name) {
  if (name == "float32") return at::kFloat;
  if (name == "bfloat16") return at::kBFloat16;
  if (name == "float16") return at::kHalf;
  throw InputError(fmt::format("--dtype {}: expected float32, bfloat16, float16 or auto", name));
}

std::string dtype_name(c10::ScalarType t) {
  return t == at::kBFloat16 ? "bfloat16" : t == at::kHalf ? "float16" : "float32";
}

} // namespace

void export_model_dir(const config::Config& cfg, torch::nn::Module& model, const std::string& run_dir,
                      const std::string& out_dir, const ExportOptions& options) {
  const fs::path carried = carried_dir(run_dir);
  std::optional<HfConfig> original;
  if (fs::exists(carried / "config.json")) original = read_hf_config((carried / "config.json").string());
  std::string dtype = options.dtype;
  if (dtype == "auto") dtype = original ? original->dtype : config::to_string(cfg.weight_dtype);
  const c10::ScalarType type = dtype_named(dtype);
  const HfConfig hf = hf_config_from(cfg, original ? &*original : nullptr, dtype_name(type));

  fs::create_directories(out_dir);
  auto params = model.named_parameters();
  auto buffers = model.named_buffers();  // a LoRA model's frozen base
  const double scale = model::LoraOptions::from_config(cfg).scale;
  std::vector<std::pair<std::string, at::Tensor>> tensors;
  int64_t total = 0, merged = 0, adapters = 0;
  for (const auto& [name, ours] : tensor_names(*hf.family, hf.num_hidden_layers, hf.tie_word_embeddings)) {
    const at::Tensor* p = params.find(ours) ? params.find(ours) : buffers.find(ours);
    if (!p) throw std::logic_error(fmt::format("export: the model has no parameter {} for {}", ours, name));
    const at::Tensor *a = params.find(ours + "_lora_a"), *b = params.find(ours + "_lora_b");
    if (a && b) ++merged;
    tensors.emplace_back(name, (a && b ? merge_lora(*p, *a, *b, scale) : p->detach()).to(type));
    total += tensors.back().second.numel() * int64_t(tensors.back().second.element_size());
  }
  for (const auto& p : params)
    if (p.key().size() > 7 && p.key().compare(p.key().size() - 7, 7, "_lora_a") == 0) ++adapters;
  if (merged != adapters)
    throw std::logic_error(fmt::format("export: {} adapters, but {} merged into a weight", adapters, merged));
  // Drop what an earlier export into the same directory left, so that no stale shard or index is read back.
  for (const auto& entry : fs::directory_iterator(out_dir)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("model", 0) == 0 && name.find(".safetensors") != std::string::npos) fs::remove(entry.path());
  }
  const std::map<std::string, std::string> metadata = {{"format", "pt"}};
  if (total <= options.shard_bytes) {
    write_safetensors((fs::path(out_dir) / "model.safetensors").string(), tensors, metadata);
  } else {
    std::vector<std::vector<std::pair<std::string, at::Tensor>>> shards(1);
    int64_t in_shard = 0;
    for (auto& t : tensors) {
      const int64_t bytes = t.second.numel() * int64_t(t.second.element_size());
      if (in_shard > 0 && in_shard + bytes > options.shard_bytes) {
        shards.emplace_back();
        in_shard = 0;
      }
      shards.back().push_back(std::move(t));
      in_shard += bytes;
    }
    json weight_map = json::object();
    for (size_t s = 0; s < shards.size(); ++s) {
      const std::string file = fmt::format("model-{:05d}-of-{:05d}.safetensors", s + 1, shards.size());
      write_safetensors((fs::path(out_dir) / file).string(), shards[s], metadata);
      for (const auto& t : shards[s]) weight_map[t.first] = file;
    }
    write_json_file((fs::path(out_dir) / kSafeTensorsIndex).string(),
                    {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}});
  }
  write_json_file((fs::path(out_dir) / "config.json").string(), to_json(hf));
  if (fs::is_directory(carried))
    for (const auto& entry : fs::directory_iterator(carried)) {
      const std::string name = entry.path().filename().string();
      if (name == "config.json" || name == "source.json") continue;
      fs::copy_file(entry.path(), fs::path(out_dir) / name, fs::copy_options::overwrite_existing);
    }
}

void check_export_destination(const std::string& out_dir, bool adapter, const std::vector<std::string>& protected_dirs) {
  std::error_code ec;
  if (!fs::is_directory(out_dir, ec)) return;
  for (const auto& dir : protected_dirs)
    if (!dir.empty() && fs::equivalent(out_dir, dir, ec))
      throw InputError(fmt::format("{}: this is the model directory the run was trained from ({}); an export there "
                                   "would overwrite it: give OUT_DIR a new directory",
                                   out_dir, dir));
  std::string model_file, adapter_file;
  for (const auto& entry : fs::directory_iterator(out_dir)) {
    const std::string name = entry.path().filename().string();
    if (name == "adapter_config.json" || name == "adapter_model.safetensors" || name == "adapter_model.bin")
      adapter_file = name;
    else if (name == "config.json" || (name.rfind("model", 0) == 0 && name.find(".safetensors") != std::string::npos))
      model_file = name;
  }
  if (adapter && !model_file.empty())
    throw InputError(fmt::format("{}: holds a model ({}); a peft adapter written there would mix with it into a "
                                 "directory that loads as neither: give --adapter a directory of its own",
                                 out_dir, model_file));
  if (!adapter && !adapter_file.empty())
    throw InputError(fmt::format("{}: holds a peft adapter ({}); a merged model written there would mix with it into "
                                 "a directory that loads as neither: give the merged export a directory of its own "
                                 "(or add --adapter to replace the adapter)",
                                 out_dir, adapter_file));
}

at::Tensor merge_lora(const at::Tensor& weight, const at::Tensor& a, const at::Tensor& b, double scale) {
  at::NoGradGuard no_grad;
  return weight.detach().to(at::kFloat) + at::mm(b.detach().to(at::kFloat), a.detach().to(at::kFloat)) * scale;
}

} // namespace shadowgrad::hub
