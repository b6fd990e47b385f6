#include "checkpoint/WeightsLoader.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>
#include <vector>

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <torch/nn/module.h>

#include "checkpoint/Checkpointer.h"
#include "checkpoint/StepFiles.h"
#include "checkpoint/WeightShards.h"

namespace shadowgrad::checkpoint {
namespace fs = std::filesystem;
namespace {

// Step `step` of `dir`, checked as a resume checks it (checkpoint/StepFiles.h), its weight files alone (model.pt, or
// a ZeRO-3 run's model shards put together); the model is not touched.
std::vector<at::Tensor> read_weights(const std::string& dir, int64_t step, torch::nn::Module& model) {
  const Manifest manifest = read_manifest(dir, step);
  std::map<std::string, std::string> files;
  for (const auto& name : model_files(manifest)) files[name] = read_listed_file(dir, listed(manifest, name, dir));
  if (manifest.model_shards > 0) return read_sharded_parameters(files, manifest, dir, model);
  return read_parameters(files.at("model.pt"), dir + "/model.pt", model);
}

} // namespace

int64_t load_weights(const std::string& run_dir, int64_t step, torch::nn::Module& model) {
  const Checkpointer run(CheckpointOptions{}, run_dir);  // for steps() and step_dir(), which only read
  if (step >= 0) {
    const std::vector<int64_t> all = run.steps();
    if (std::find(all.begin(), all.end(), step) == all.end())
      throw InputError(fmt::format("{}: there is no checkpoint step-{}{}", run_dir, step,
                                   all.empty() ? std::string(" (no checkpoints at all)")
                                               : fmt::format(" (available: {})", fmt::join(all, ", "))));
    put_parameters(read_weights(run.step_dir(step), step, model), model);
    return step;
  }
  std::set<int64_t> tried;
  std::string first_error;
  // A step-N that vanishes while it is read was pruned by the trainer writing the run, so a newer one has landed:
  // the steps are listed again (a few times at most).
  for (int listing = 0; listing < 3; ++listing) {
    bool vanished = false;
    const std::vector<int64_t> all = run.steps();
    for (auto it = all.rbegin(); it != all.rend() && !vanished; ++it) {
      if (!tried.insert(*it).second) continue;
      const std::string dir = run.step_dir(*it);
      try {
        put_parameters(read_weights(dir, *it, model), model);
        return *it;
      } catch (const CorruptCheckpointError& e) {
        vanished = !fs::exists(dir);
        if (vanished) continue;
        if (first_error.empty()) first_error = e.what();
        spdlog::warn("{}; falling back to the previous checkpoint", e.what());
      }
    }
    if (!vanished) break;
  }
  if (first_error.empty())
    throw InputError(fmt::format("{}: no checkpoint in {} (enable_checkpointing=true writes them)", run_dir, run.dir()));
  throw CorruptCheckpointError(first_error + "; no earlier checkpoint is loadable");
}

} // namespace shadowgrad::checkpoint
