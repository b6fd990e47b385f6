#include "checkpoint/WeightsLoader.h"

#include <algorithm>
#include <filesystem>
#include <set>
#include <vector>

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <torch/nn/module.h>
#include <torch/serialize/input-archive.h>

#include "checkpoint/Archive.h"
#include "checkpoint/Checkpointer.h"
#include "checkpoint/Crc32.h"
#include "checkpoint/DurableFile.h"
#include "checkpoint/Manifest.h"

namespace shadowgrad::checkpoint {
namespace fs = std::filesystem;
namespace {

// The bytes of `dir`/model.pt once the manifest (its own checksum, its step) and the file's size and CRC agree.
std::string verified_model_file(const std::string& dir, int64_t step) {
  const std::string manifest_path = dir + "/manifest.yml";
  if (!fs::exists(manifest_path))
    throw CorruptCheckpointError(fmt::format("checkpoint file '{}' is missing", manifest_path));
  const Manifest manifest = Manifest::parse(read_whole_file(manifest_path), manifest_path);
  if (manifest.state.step != step)
    throw CorruptCheckpointError(fmt::format("checkpoint '{}' holds step {} in its manifest", dir, manifest.state.step));
  const auto entry = std::find_if(manifest.files.begin(), manifest.files.end(),
                                  [](const FileEntry& f) { return f.name == "model.pt"; });
  if (entry == manifest.files.end())
    throw CorruptCheckpointError(fmt::format("checkpoint '{}' lists no model.pt in its manifest", dir));
  const std::string path = dir + "/model.pt";
  if (!fs::exists(path)) throw CorruptCheckpointError(fmt::format("checkpoint file '{}' is missing", path));
  std::string bytes = read_whole_file(path);
  const std::string crc = crc32_hex(crc32(bytes.data(), bytes.size()));
  if (int64_t(bytes.size()) != entry->bytes || crc != entry->crc32)
    throw CorruptCheckpointError(fmt::format("checkpoint file '{}' is corrupt: {} bytes with crc32 {}, the manifest "
                                             "says {} bytes with crc32 {}",
                                             path, bytes.size(), crc, entry->bytes, entry->crc32));
  return bytes;
}

// Every parameter of `model`, in named_parameters() order, as step `step` in `dir` holds it; the model is not touched.
std::vector<at::Tensor> read_weights(const std::string& dir, int64_t step, torch::nn::Module& model) {
  const std::string path = dir + "/model.pt";
  const std::string bytes = verified_model_file(dir, step);
  std::vector<at::Tensor> out;
  deserialize(bytes, path, [&](torch::serialize::InputArchive& archive) {
    for (const auto& p : model.named_parameters()) {
      at::Tensor saved;
      if (!archive.try_read(p.key(), saved))
        throw CorruptCheckpointError(fmt::format("checkpoint file '{}' does not fit the model: it has no parameter "
                                                 "'{}'", path, p.key()));
      const at::Tensor& ours = p.value();
      if (saved.sizes() != ours.sizes() || saved.scalar_type() != ours.scalar_type())
        throw CorruptCheckpointError(fmt::format("checkpoint file '{}' does not fit the model: parameter '{}' is {}, "
                                                 "the model's is {}", path, p.key(),
                                                 c10::str(saved.scalar_type(), saved.sizes()),
                                                 c10::str(ours.scalar_type(), ours.sizes())));
      out.push_back(saved);
    }
  });
  return out;
}

void put_in_place(const std::vector<at::Tensor>& weights, torch::nn::Module& model) {
  at::NoGradGuard no_grad;
  size_t i = 0;
  for (auto& p : model.named_parameters()) p.value().copy_(weights.at(i++));
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
    put_in_place(read_weights(run.step_dir(step), step, model), model);
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
        put_in_place(read_weights(dir, *it, model), model);
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
