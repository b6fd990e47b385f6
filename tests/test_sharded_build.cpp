// ZeRO-3 builds the model unit by unit (train/ModelBuild.h): each rank, a thread with its own ProcessGroupGloo
// (RankThreads.h), builds and reads a pretrained base one unit at a time, keeping its range. What it allocates on the
// way stays within its range and two units, never the whole model, and the values are bitwise one process's.
#include <catch2/catch.hpp>

#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <string>
#include <vector>

#include <unistd.h>

#include "RankThreads.h"
#include "TinyConfig.h"
#include "distributed/DataParallel.h"
#include "distributed/ParameterShards.h"
#include "hub/Export.h"
#include "hub/Import.h"
#include "memory/MemoryMeter.h"
#include "memory/MemoryReport.h"
#include "memory/TrackingAllocator.h"
#include "model/WeightCount.h"
#include "train/ModelBuild.h"

using namespace shadowgrad;

namespace sharded_build {

namespace fs = std::filesystem;

// Eight layers, so that a rank's range and two blocks are well under the whole model at 4 ranks.
config::Config deep_tiny(bool lora) {
  auto c = tiny_config();
  c.given_keys.clear();  // the model directory's config.json sets the model keys
  c.base_num_decoder_layers = 8;
  c.shard_optimizer_over_data = true;
  c.shard_parameters_over_data = true;
  if (lora) {
    c.lora_rank = 4;
    c.lora_alpha = 8;
  }
  return c;
}

// A model directory holding a model of another seed than `c`'s, in several safetensors shards.
fs::path write_base(const config::Config& c, const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("sg_build_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  auto other = c;
  other.init_weights_seed = c.init_weights_seed + 17;
  other.lora_rank = 0;
  model::Decoder m(model::DecoderOptions::from_config(other));
  hub::export_model_dir(other, *m, (dir / "no_run").string(), (dir / "model").string(), {"float32", 20000});
  return dir;
}

// Bytes of the model's tensors outside the units (the RoPE tables, the mask, adapters): built whole on every rank.
int64_t outside_units(model::Decoder& m) {
  std::vector<at::Tensor> outside;
  for (const auto& t : m->named_buffers(/*recurse=*/false))
    if (m->unit_of(t.key()) < 0) outside.push_back(t.value());
  for (const auto& t : m->named_parameters(/*recurse=*/false))
    if (m->unit_of(t.key()) < 0) outside.push_back(t.value());
  return memory::tensor_bytes(outside);
}

} // namespace sharded_build

TEST_CASE("ZeRO-3 builds and loads the model unit by unit: each rank's tensor peak stays within its range and two "
          "units, under the whole model, and the weights are bitwise one process's",
          "[sharded][zero3][build]") {
  using namespace sharded_build;
  memory::MemoryMeter meter(c10::Device(c10::kCPU));  // installs the tracking allocator
  for (bool lora : {false, true}) {
    INFO("lora=" << lora);
    auto c = deep_tiny(lora);
    const fs::path dir = write_base(c, lora ? "lora" : "full");
    c.load_parameters_path = (dir / "model").string();
    hub::configure_from_model_dir(c);
    hub::WeightSources sources;
    sources.base = c.load_parameters_path;
    train::BuiltModel one = train::build_model(c, sources, nullptr, c10::Device(c10::kCPU));
    const auto units = one.model->unit_tensors();
    std::vector<at::Tensor> whole;
    for (const auto& u : units) whole.insert(whole.end(), u.begin(), u.end());
    const int64_t whole_bytes = memory::tensor_bytes(whole);
    REQUIRE(model::count_weights(one.model->options()).base * 4 == whole_bytes);

    const int world = 4;
    std::mutex building;  // one rank builds at a time: the allocator counts the whole test process
    std::condition_variable all_built;
    int built_ranks = 0;
    std::vector<int64_t> peak(world), held(world), largest(world), outside(world);
    std::vector<uint64_t> hashes(world);
    require_no_errors(run_ranks(world, [&](distributed::Communicator& comm) {
      const int r = comm.rank();
      auto dp = std::make_shared<distributed::DataParallel>(share(comm), distributed::DataParallelOptions::from_config(c));
      std::unique_lock<std::mutex> lock(building);
      auto& mem = memory::TrackingAllocator::get();
      const int64_t before = mem.current_bytes();
      mem.reset_peak();
      train::BuiltModel b = train::build_model(c, sources, dp.get(), c10::Device(c10::kCPU));
      peak[r] = mem.peak_bytes() - before;
      REQUIRE(b.shards);
      held[r] = memory::tensor_bytes(b.shards->pieces());
      largest[r] = b.shards->largest_unit_bytes();
      outside[r] = outside_units(b.model);
      hashes[r] = b.shards->start_checksum();
      ++built_ranks;
      all_built.notify_all();
      all_built.wait(lock, [&] { return built_ranks == world; });  // nobody allocates while another measures
      lock.unlock();
      dp->verify_same_start({}, b.shards->start_checksum());
      b.shards->gather_all();  // collective: every rank's range
      const auto mine = b.model->unit_tensors();
      for (size_t u = 0; u < units.size(); ++u)
        for (size_t i = 0; i < units[u].size(); ++i)
          if (!at::equal(mine[u][i], units[u][i])) throw std::runtime_error("unit " + std::to_string(u) + " differs");
      b.shards->release_all();
    }));
    for (int r = 0; r < world; ++r) {
      INFO("rank " << r << ": peak " << peak[r] << " B, range " << held[r] << ", largest unit " << largest[r]
                   << ", outside the units " << outside[r] << ", whole model " << whole_bytes);
      CHECK(peak[r] <= held[r] + 2 * largest[r] + outside[r]);
      CHECK(peak[r] < whole_bytes);
      CHECK(hashes[r] == distributed::checksum(whole));  // the whole weights' hash, though never held whole
    }
    fs::remove_all(dir);
  }
}
