#include "checkpoint/StepFiles.h"

#include <algorithm>
#include <filesystem>

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <torch/nn/module.h>
#include <torch/serialize/input-archive.h>

#include "checkpoint/Archive.h"
#include "checkpoint/Crc32.h"
#include "checkpoint/DurableFile.h"

namespace shadowgrad::checkpoint {
namespace fs = std::filesystem;

Manifest read_manifest(const std::string& dir, int64_t step) {
  const std::string path = dir + "/manifest.yml";
  if (!fs::exists(path)) throw CorruptCheckpointError(fmt::format("checkpoint file '{}' is missing", path));
  Manifest manifest = Manifest::parse(read_whole_file(path), path);
  if (manifest.state.step != step)
    throw CorruptCheckpointError(fmt::format("checkpoint '{}' holds step {} in its manifest", dir, manifest.state.step));
  return manifest;
}

const FileEntry& listed(const Manifest& manifest, const std::string& name, const std::string& dir) {
  const auto it = std::find_if(manifest.files.begin(), manifest.files.end(),
                               [&](const FileEntry& f) { return f.name == name; });
  if (it == manifest.files.end())
    throw CorruptCheckpointError(fmt::format("checkpoint '{}' lists no {} in its manifest", dir, name));
  return *it;
}

std::string read_listed_file(const std::string& dir, const FileEntry& entry) {
  const std::string path = dir + "/" + entry.name;
  if (!fs::exists(path)) throw CorruptCheckpointError(fmt::format("checkpoint file '{}' is missing", path));
  std::string bytes = read_whole_file(path);
  if (int64_t(bytes.size()) != entry.bytes)
    throw CorruptCheckpointError(fmt::format("checkpoint file '{}' is corrupt: {} bytes, the manifest says {} "
                                             "(truncated?)",
                                             path, bytes.size(), entry.bytes));
  const std::string crc = crc32_hex(crc32(bytes.data(), bytes.size()));
  if (crc != entry.crc32)
    throw CorruptCheckpointError(fmt::format("checkpoint file '{}' is corrupt: crc32 {} does not match the "
                                             "manifest's {}",
                                             path, crc, entry.crc32));
  return bytes;
}

std::vector<at::Tensor> read_parameters(const std::string& bytes, const std::string& path, torch::nn::Module& model) {
  std::vector<at::Tensor> out;
  deserialize(bytes, path, [&](torch::serialize::InputArchive& archive) {
    for (const auto& p : model.named_parameters()) {
      at::Tensor saved;
      if (!archive.try_read(p.key(), saved))
        throw CorruptCheckpointError(fmt::format("checkpoint file '{}' is corrupt: it has no parameter '{}' (it does "
                                                 "not fit the model)",
                                                 path, p.key()));
      const at::Tensor& ours = p.value();
      if (saved.sizes() != ours.sizes() || saved.scalar_type() != ours.scalar_type())
        throw CorruptCheckpointError(fmt::format("checkpoint file '{}' is corrupt: parameter '{}' is {}, the model "
                                                 "has {} (it does not fit the model)",
                                                 path, p.key(), c10::str(saved.scalar_type(), saved.sizes()),
                                                 c10::str(ours.scalar_type(), ours.sizes())));
      out.push_back(saved);
    }
  });
  return out;
}

void put_parameters(const std::vector<at::Tensor>& weights, torch::nn::Module& model) {
  at::NoGradGuard no_grad;
  size_t i = 0;
  for (auto& p : model.named_parameters()) p.value().copy_(weights.at(i++));
}

} // namespace shadowgrad::checkpoint
