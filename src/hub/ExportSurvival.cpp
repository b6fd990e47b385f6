#include "hub/ExportSurvival.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <vector>

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <torch/nn/module.h>

#include "hub/Export.h"
#include "hub/Families.h"
#include "hub/HfConfig.h"
#include "hub/Import.h"
#include "hub/SafeTensors.h"
#include "model/LoraOptions.h"

namespace shadowgrad::hub {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// The tensors of some safetensors files by name: (file, entry).
struct TensorIndex {
  std::vector<SafeTensorsFile> files;
  std::map<std::string, std::pair<size_t, const TensorInfo*>> where;

  void add(const std::string& path) {
    files.push_back(SafeTensorsFile::open(path));
    const size_t f = files.size() - 1;
    for (const auto& t : files[f].tensors()) where[t.name] = {f, &t};
  }
  // The tensor as fp32, a copy (its pages dropped from memory); undefined when absent.
  at::Tensor read(const std::string& name) const {
    auto it = where.find(name);
    if (it == where.end()) return {};
    const SafeTensorsFile& file = files[it->second.first];
    at::Tensor out = file.view(*it->second.second).to(at::kFloat, /*non_blocking=*/false, /*copy=*/true);
    file.release(*it->second.second);
    return out;
  }
};

double squared_distance(const at::Tensor& a, const at::Tensor& b) {
  return (a - b).square().sum(at::kDouble).item<double>();
}

// The start's weight files as source.json recorded them, or the reason they cannot be read as they were.
std::string open_start(const fs::path& source, ExportSurvival& s, TensorIndex& start) {
  json j;
  try {
    std::ifstream in(source);
    j = json::parse(in);
    s.start_dir = j.at("load_parameters_path").get<std::string>();
    for (const auto& w : j.at("weights")) {
      const fs::path path = fs::path(s.start_dir) / w.at("file").get<std::string>();
      if (!fs::exists(path)) return fmt::format("the run's start {} is gone", path.string());
      if (fs::file_size(path) != w.at("bytes").get<uint64_t>())
        return fmt::format("the run's start {} changed size since the run began ({} bytes, {} recorded)",
                           path.string(), fs::file_size(path), w.at("bytes").get<uint64_t>());
      start.add(path.string());
    }
  } catch (const json::exception& e) {
    return fmt::format("{} is not what the trainer writes ({})", source.string(), e.what());
  } catch (const InputError& e) {
    return e.what();  // a start file that no longer parses (ModelFileError names it)
  }
  return "";
}

} // namespace

ExportSurvival measure_export_survival(const config::Config& cfg, const std::string& run_dir,
                                       const std::string& out_dir, torch::nn::Module& model) {
  ExportSurvival s;
  const fs::path source = fs::path(carried_dir(run_dir)) / "source.json";
  if (!fs::exists(source)) {
    s.why_not = "the run did not start from a model directory (no hf/source.json), so there is no start to measure "
                "from";
    return s;
  }
  TensorIndex start, exported;
  s.why_not = open_start(source, s, start);
  if (!s.why_not.empty()) return s;
  std::vector<std::string> export_files;
  for (const auto& entry : fs::directory_iterator(out_dir)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("model", 0) == 0 && name.size() > 12 && name.substr(name.size() - 12) == ".safetensors")
      export_files.push_back(entry.path().string());
  }
  std::sort(export_files.begin(), export_files.end());
  for (const auto& path : export_files) exported.add(path);

  const HfConfig hf = read_hf_config((fs::path(out_dir) / "config.json").string());
  auto params = model.named_parameters();
  auto buffers = model.named_buffers();  // a LoRA model's frozen base
  const double lora_scale = model::LoraOptions::from_config(cfg).scale;
  double kept = 0, moved = 0;
  for (const auto& [name, ours] : tensor_names(*hf.family, hf.num_hidden_layers, hf.tie_word_embeddings)) {
    const at::Tensor* master = params.find(ours);
    if (!master) master = buffers.find(ours);
    const at::Tensor out = exported.read(name), from = start.read(name);
    if (!master || !out.defined()) throw std::logic_error(fmt::format("export survival: no {} in the model or in {}",
                                                                      name, out_dir));
    if (!from.defined() || from.sizes() != out.sizes()) {
      s.why_not = fmt::format("the run's start {} holds no tensor '{}' shaped as the export's", s.start_dir, name);
      return s;
    }
    if (s.export_dtype.empty()) s.export_dtype = exported.files[exported.where.at(name).first].find(name)->dtype;
    kept += squared_distance(out, from);
    const at::Tensor *a = params.find(ours + "_lora_a"), *b = params.find(ours + "_lora_b");
    moved += squared_distance(a && b ? merge_lora(*master, *a, *b, lora_scale) : master->detach().to(at::kFloat), from);
    ++s.tensors;
  }
  if (!(moved > 0)) {
    s.why_not = "training moved no weight from the start";
    return s;
  }
  s.measured = true;
  s.why_not.clear();
  s.update_norm = std::sqrt(moved);
  s.fraction = std::sqrt(kept / moved);
  return s;
}

} // namespace shadowgrad::hub
