#include "checkpoint/WeightShards.h"

#include <algorithm>

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <torch/nn/module.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include "checkpoint/Archive.h"

namespace shadowgrad::checkpoint {
namespace {

struct Shard {
  int64_t begin = 0, count = 0, total = 0;
  at::Tensor weights;
};

Shard read_shard(const std::string& bytes, const std::string& path) {
  Shard s;
  deserialize(bytes, path, [&](torch::serialize::InputArchive& archive) {
    auto read_int = [&](const char* key) {
      c10::IValue v;
      if (!archive.try_read(key, v) || !v.isInt())
        throw CorruptCheckpointError(fmt::format("model shard '{}' has no '{}'", path, key));
      return v.toInt();
    };
    s.begin = read_int("begin");
    s.count = read_int("count");
    s.total = read_int("total");
    if (!archive.try_read("weights", s.weights))
      throw CorruptCheckpointError(fmt::format("model shard '{}' has no 'weights'", path));
  });
  if (s.begin < 0 || s.count < 0 || s.total < 0 || s.begin > s.total - s.count || s.weights.dim() != 1 ||
      s.weights.numel() != s.count)
    throw CorruptCheckpointError(fmt::format("model shard '{}' holds {} for elements [{}, {}) of {}", path,
                                             c10::str(s.weights.scalar_type(), s.weights.sizes()), s.begin,
                                             s.begin + s.count, s.total));
  return s;
}

} // namespace

int64_t element_count(const std::vector<at::Tensor>& tensors) {
  int64_t n = 0;
  for (const auto& t : tensors) n += t.numel();
  return n;
}

std::string weight_shard_file_name(int rank, int world_size) {
  return fmt::format("model-shard-{:05d}-of-{:05d}.pt", rank, world_size);
}

std::vector<std::string> model_files(const Manifest& manifest) {
  if (manifest.model_shards <= 0) return {"model.pt"};
  std::vector<std::string> out;
  for (int r = 0; r < manifest.model_shards; ++r) out.push_back(weight_shard_file_name(r, int(manifest.model_shards)));
  return out;
}

void write_weight_shard(torch::serialize::OutputArchive& archive, const std::vector<at::Tensor>& pieces, int64_t begin,
                        int64_t total) {
  at::Tensor flat = pieces.empty() ? at::empty({0}) : at::cat(pieces).detach();
  archive.write("begin", c10::IValue(begin));
  archive.write("count", c10::IValue(flat.numel()));
  archive.write("total", c10::IValue(total));
  archive.write("weights", flat);
}

at::Tensor read_weight_range(const std::map<std::string, std::string>& files, const Manifest& manifest, int64_t begin,
                             int64_t count, int64_t total, at::ScalarType dtype, const std::string& dir) {
  at::Tensor out = at::empty({count}, at::TensorOptions().dtype(dtype));
  int64_t covered = 0;
  for (const auto& name : model_files(manifest)) {
    const auto it = files.find(name);
    if (it == files.end()) continue;  // outside [begin, begin + count): not needed by this process
    const std::string path = dir + "/" + name;
    const Shard s = read_shard(it->second, path);
    if (s.total != total || s.weights.scalar_type() != dtype)
      throw CorruptCheckpointError(fmt::format("model shard '{}' holds {} elements of {}; the model has {} of {} (it "
                                               "does not fit the model)",
                                               path, s.total, c10::toString(s.weights.scalar_type()), total,
                                               c10::toString(dtype)));
    const int64_t lo = std::max(begin, s.begin), hi = std::min(begin + count, s.begin + s.count);
    if (lo >= hi) continue;
    covered += hi - lo;
    out.narrow(0, lo - begin, hi - lo).copy_(s.weights.narrow(0, lo - s.begin, hi - lo));
  }
  if (covered != count)
    throw CorruptCheckpointError(fmt::format("the model shards of '{}' cover {} of the {} elements [{}, {})", dir,
                                             covered, count, begin, begin + count));
  return out;
}

std::vector<at::Tensor> read_sharded_parameters(const std::map<std::string, std::string>& files,
                                                const Manifest& manifest, const std::string& dir,
                                                torch::nn::Module& model) {
  std::vector<at::Tensor> params = model.parameters();
  for (const auto& p : params)
    if (p.scalar_type() != params.front().scalar_type())
      throw InputError(fmt::format("'{}': model shards hold one dtype; this model's parameters mix {} and {}", dir,
                                   c10::toString(p.scalar_type()), c10::toString(params.front().scalar_type())));
  const int64_t total = element_count(params);
  const at::Tensor flat =
      read_weight_range(files, manifest, 0, total, total, params.empty() ? at::kFloat : params.front().scalar_type(), dir);
  std::vector<at::Tensor> out;
  int64_t at = 0;
  for (const auto& p : params) {
    out.push_back(flat.narrow(0, at, p.numel()).view(p.sizes()));
    at += p.numel();
  }
  return out;
}

at::Tensor cut_range(const std::vector<at::Tensor>& whole, int64_t begin, int64_t count) {
  at::Tensor out = at::empty({count}, whole.empty() ? at::TensorOptions() : whole.front().options());
  int64_t at = 0;
  for (const auto& t : whole) {
    const int64_t lo = std::max(begin, at), hi = std::min(begin + count, at + t.numel());
    if (lo < hi) out.narrow(0, lo - begin, hi - lo).copy_(t.reshape(-1).narrow(0, lo - at, hi - lo));
    at += t.numel();
  }
  return out;
}

void put_range(const at::Tensor& range, const std::vector<at::Tensor>& pieces) {
  at::NoGradGuard no_grad;
  int64_t at = 0;
  for (const auto& p : pieces) {
    p.view(-1).copy_(range.narrow(0, at, p.numel()));
    at += p.numel();
  }
}

} // namespace shadowgrad::checkpoint
