#include "checkpoint/OptimizerShards.h"

#include <algorithm>
#include <exception>
#include <functional>
#include <stdexcept>

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <torch/optim/optimizer.h>

#include "checkpoint/Archive.h"
#include "checkpoint/Crc32.h"
#include "checkpoint/DurableFile.h"
#include "checkpoint/FlatOptimizerState.h"
#include "checkpoint/WeightShards.h"

namespace shadowgrad::checkpoint {
namespace {

// Elements [begin, begin + count) of the flat state, put together from the shard files that overlap them.
FlatOptimizerState gather_from_shards(const std::map<std::string, std::string>& files, const Manifest& manifest,
                                      int64_t begin, int64_t count, int64_t total, const std::string& dir) {
  FlatOptimizerState out;
  out.begin = begin;
  out.count = count;
  int64_t covered = 0;
  bool first = true;
  for (const auto& name : optimizer_files(manifest)) {
    if (!files.count(name)) continue;  // not needed_by() this process: outside [begin, begin + count)
    const std::string path = dir + "/" + name;
    int64_t shard_total = 0;
    const FlatOptimizerState s = read_flat_state(files.at(name), path, &shard_total);
    if (shard_total != total)
      throw CorruptCheckpointError(fmt::format("optimizer shard '{}' holds the state of {} parameters, the model has {}", path,
                                   shard_total, total));
    if (!first && s.step != out.step)
      throw CorruptCheckpointError(fmt::format("optimizer shard '{}' is at update {}, the others at {}", path, s.step,
                                               out.step));
    out.step = s.step;
    first = false;
    const int64_t lo = std::max(begin, s.begin), hi = std::min(begin + count, s.begin + s.count);
    if (lo >= hi) continue;
    covered += hi - lo;
    for (const auto& [field, t] : s.fields) {
      auto f = std::find_if(out.fields.begin(), out.fields.end(), [&](const auto& kv) { return kv.first == field; });
      if (f == out.fields.end()) f = out.fields.insert(out.fields.end(), {field, at::zeros({count}, t.options())});
      f->second.narrow(0, lo - begin, hi - lo).copy_(t.narrow(0, lo - s.begin, hi - lo));
    }
  }
  if (covered != count)
    throw CorruptCheckpointError(fmt::format("the optimizer shards of '{}' cover {} of the {} elements [{}, {})", dir,
                                             covered, count, begin, begin + count));
  return out;
}

} // namespace

bool needed_by(const Topology& topology, const Manifest& manifest, const std::string& name) {
  // Shard r of W holds [r * size, (r + 1) * size) with size = ceil(total / W), as ShardPlan cuts them. Were that
  // rule to change, a skipped shard would show up as "the ... shards cover X of the Y elements".
  auto overlaps = [&](int64_t world, auto file_name) {
    const int64_t total = element_count(topology.params), size = (total + world - 1) / world;
    for (int64_t r = 0; r < world; ++r)
      if (name == file_name(int(r), int(world)))
        return r * size < topology.shard_begin + topology.shard_owned && topology.shard_begin < (r + 1) * size;
    return true;
  };
  if (topology.sharded && manifest.optimizer_shards > 0 && name.rfind("optimizer-shard-", 0) == 0)
    return overlaps(manifest.optimizer_shards, shard_file_name);
  if (!topology.weight_pieces.empty() && manifest.model_shards > 0 && name.rfind("model-shard-", 0) == 0)
    return overlaps(manifest.model_shards, weight_shard_file_name);
  return true;
}

std::string shard_file_name(int rank, int world_size) {
  return fmt::format("optimizer-shard-{:05d}-of-{:05d}.pt", rank, world_size);
}

std::vector<std::string> optimizer_files(const Manifest& manifest) {
  if (manifest.optimizer_shards <= 0) return {"optimizer.pt"};
  std::vector<std::string> out;
  for (int r = 0; r < manifest.optimizer_shards; ++r) out.push_back(shard_file_name(r, int(manifest.optimizer_shards)));
  return out;
}

std::vector<FileEntry> save_optimizer_shards(const std::string& tmp_dir, torch::optim::Optimizer& optimizer,
                                             const Topology& topology, bool ready) {
  const int world = topology.world_size;
  if (topology.exchange({topology.rank == 0 ? int64_t(ready) : 0}).at(0) != 1)
    throw std::runtime_error("rank 0 could not create the checkpoint's temporary directory");
  const bool weights = !topology.weight_pieces.empty();
  // Per rank: written?, then bytes and crc32 of its optimizer shard and (ZeRO-3) of its model shard.
  std::vector<int64_t> mine = {0, 0, 0, 0, 0};
  std::string error;
  const int64_t total = element_count(topology.params);
  // Writes one file durably; its bytes and crc32 go to mine[at], mine[at + 1].
  auto write = [&](const std::string& name, size_t at, const std::function<void(torch::serialize::OutputArchive&)>& fill) {
    DurableWriter w(tmp_dir + "/" + name);
    serialize(w, fill);
    w.commit();
    mine[at] = w.bytes();
    mine[at + 1] = int64_t(w.crc32());
  };
  try {
    FlatOptimizerState slice = flatten(optimizer, 0, topology.shard_owned);
    slice.begin = topology.shard_begin;
    write(shard_file_name(topology.rank, world), 1, [&](auto& archive) { write_flat_state(archive, slice, total); });
    if (weights)
      write(weight_shard_file_name(topology.rank, world), 3, [&](auto& archive) {
        write_weight_shard(archive, topology.weight_pieces, topology.shard_begin, total);
      });
    mine[0] = 1;
  } catch (const std::exception& e) {
    error = e.what();
  }
  // Every rank learns whether every other one wrote its files, so all give up together or none does.
  const std::vector<int64_t> all = topology.exchange(mine);
  std::vector<FileEntry> entries;
  for (int r = 0; r < world; ++r) {
    const int64_t* got = &all.at(5 * r);
    if (got[0] != 1)
      throw std::runtime_error(r == topology.rank ? error
                                                  : fmt::format("rank {} could not write its shards ({}{})", r,
                                                                shard_file_name(r, world),
                                                                weights ? ", " + weight_shard_file_name(r, world) : ""));
    entries.push_back({shard_file_name(r, world), got[1], crc32_hex(uint32_t(got[2]))});
    if (weights) entries.push_back({weight_shard_file_name(r, world), got[3], crc32_hex(uint32_t(got[4]))});
  }
  return entries;
}

void save_own_shard(const std::string& tmp_dir, const std::string& final_dir, torch::optim::Optimizer& optimizer,
                    const Topology& topology) {
  if (!topology.sharded) return;
  try {
    save_optimizer_shards(tmp_dir, optimizer, topology, /*ready=*/false);
  } catch (const std::exception& e) {
    throw std::runtime_error(fmt::format("cannot write checkpoint '{}': {}", final_dir, e.what()));
  }
}

void cancel_shards(const std::string& tmp_dir, torch::optim::Optimizer& optimizer, const Topology& topology) {
  try {
    save_optimizer_shards(tmp_dir, optimizer, topology, /*ready=*/false);
  } catch (const std::exception&) {
    // expected: "rank 0 could not create ..." (or the collective failed too); rank 0 reports its own error
  }
}

void load_optimizer_state(const std::map<std::string, std::string>& files, const Manifest& manifest,
                          torch::optim::Optimizer& optimizer, const Topology& topology, const std::string& dir) {
  const int64_t total = element_count(topology.params);
  optimizer.state().clear();  // replaced, not merged: nothing is left over from a checkpoint that failed to load
  if (manifest.optimizer_shards <= 0) {
    const std::string path = dir + "/optimizer.pt";
    if (!topology.sharded) {
      deserialize(files.at("optimizer.pt"), path, [&](auto& archive) { optimizer.load(archive); });
      check_state_shapes(optimizer, path);
      return;
    }
    // The whole state exists on this process only for the duration of the load.
    std::vector<at::Tensor> shapes;
    for (const auto& p : topology.params) shapes.push_back(at::zeros_like(p));
    auto whole = topology.make_whole_optimizer(shapes);
    deserialize(files.at("optimizer.pt"), path, [&](auto& archive) { whole->load(archive); });
    check_state_shapes(*whole, path);
    FlatOptimizerState slice;
    try {
      slice = flatten(*whole, topology.shard_begin, topology.shard_owned);
    } catch (const std::invalid_argument& e) {  // e.g. parameters at different update counts
      throw CorruptCheckpointError(fmt::format("checkpoint file '{}' is corrupt: {}", path, e.what()));
    }
    unflatten_into(optimizer, 0, slice);
    return;
  }
  if (!topology.sharded && flat_size(optimizer) != total)
    throw std::invalid_argument("load_optimizer_state: the optimizer's parameters are not the topology's");
  const int64_t begin = topology.sharded ? topology.shard_begin : 0;
  const int64_t count = topology.sharded ? topology.shard_owned : total;
  unflatten_into(optimizer, 0, gather_from_shards(files, manifest, begin, count, total, dir));
}

} // namespace shadowgrad::checkpoint
