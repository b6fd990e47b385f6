// Runs that survive real clusters, in one process: the flat optimizer state behind resharding, ZeRO-1 checkpoints
// written by ranks as threads (a rank that never arrives leaves no step-N), and the run directory's lock. The
// end-to-end runs of the real trainer (parity across process counts, truncated shards, a second writer, kill -9)
// are in tests/elastic_test.sh.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <torch/optim/adamw.h>
#include <torch/serialize/output-archive.h>
#include <unistd.h>

#include "CraftedCheckpoint.h"
#include "RankThreads.h"
#include "TinyConfig.h"
#include "checkpoint/Checkpointer.h"
#include "checkpoint/FlatOptimizerState.h"
#include "checkpoint/WeightShards.h"
#include "data/DataSource.h"
#include "distributed/DataParallel.h"
#include "model/Decoder.h"
#include "train/CheckpointTopology.h"
#include "train/RunLock.h"
#include "train/TrainStep.h"
#include "util/Errors.h"

using namespace shadowgrad;
namespace fs = std::filesystem;

namespace {

std::string elastic_scratch(const std::string& name) {
  auto dir = fs::temp_directory_path() / ("sg_elastic_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir.string();
}

void require_equal(const checkpoint::FlatOptimizerState& a, const checkpoint::FlatOptimizerState& b) {
  REQUIRE(a.step == b.step);
  REQUIRE(a.fields.size() == b.fields.size());
  for (size_t i = 0; i < a.fields.size(); ++i) {
    INFO(a.fields[i].first);
    REQUIRE(a.fields[i].first == b.fields[i].first);
    REQUIRE(at::equal(a.fields[i].second, b.fields[i].second));
  }
}

// The tiny model for ZeRO-1 over ranks as threads: K=2 microbatches of 2, buckets small enough to split it.
config::Config zero1_config() {
  auto c = tiny_config();
  c.per_device_batch_size = 2;
  c.gradient_accumulation_steps = 2;
  c.shard_optimizer_over_data = true;
  c.grad_reduce_bucket_mb = 0.01;
  return c;
}

// One rank's TrainStep on `comm`, with the data source it reads.
struct RankStep {
  std::unique_ptr<data::DataSource> source;
  std::unique_ptr<train::TrainStep> step;
  RankStep(distributed::Communicator& comm, const config::Config& c)
      : source(data::make_source(data::DataOptions::from_config(c))) {
    auto dp = std::make_shared<distributed::DataParallel>(share(comm), distributed::DataParallelOptions::from_config(c));
    step = std::make_unique<train::TrainStep>(train::StepOptions::from_config(c),
                                              model::Decoder(model::DecoderOptions::from_config(c)), *source,
                                              c10::Device(c10::kCPU), dp);
  }
};

} // namespace

TEST_CASE("flat optimizer state: AdamW state cut into slices and put together again is unchanged",
          "[elastic][unit]") {
  at::manual_seed(1);
  std::vector<at::Tensor> params = {at::randn({3, 5}), at::randn({7})};
  torch::optim::AdamW whole(params, torch::optim::AdamWOptions(1e-2));
  for (int s = 0; s < 2; ++s) {
    for (auto& p : params) p.mutable_grad() = at::randn_like(p);
    whole.step();
  }
  const auto full = checkpoint::flatten(whole, 0, 22);
  REQUIRE(full.step == 2);
  REQUIRE(full.fields.size() == 2);  // exp_avg, exp_avg_sq (no amsgrad)

  // Two ZeRO-1 style slices of 11 elements: one 1-D parameter each, spanning the two tensors' border.
  std::vector<checkpoint::FlatOptimizerState> slices;
  for (int r = 0; r < 2; ++r) {
    at::Tensor shard = at::zeros({11});
    torch::optim::AdamW sliced({shard}, torch::optim::AdamWOptions(1e-2));
    checkpoint::unflatten_into(sliced, 0, checkpoint::flatten(whole, 11 * r, 11));
    slices.push_back(checkpoint::flatten(sliced, 0, 11));
    slices.back().begin = 11 * r;
  }
  // ... and back into a fresh whole optimizer.
  std::vector<at::Tensor> copies = {params[0].clone(), params[1].clone()};
  torch::optim::AdamW rebuilt(copies, torch::optim::AdamWOptions(1e-2));
  for (const auto& s : slices) checkpoint::unflatten_into(rebuilt, s.begin, s);
  require_equal(checkpoint::flatten(rebuilt, 0, 22), full);

  // The next update from the rebuilt state is bitwise the original's.
  for (size_t i = 0; i < params.size(); ++i) {
    params[i].mutable_grad() = at::full_like(params[i], 0.5);
    copies[i].mutable_grad() = at::full_like(copies[i], 0.5);
  }
  whole.step();
  rebuilt.step();
  for (size_t i = 0; i < params.size(); ++i) CHECK(at::equal(params[i], copies[i]));
}

TEST_CASE("ZeRO-1 checkpoints: every rank writes its shard into one step-N and a rank that never arrives leaves none",
          "[elastic][zero]") {
  const std::string run_dir = elastic_scratch("zero");
  std::vector<checkpoint::FlatOptimizerState> slices(2);
  std::vector<int64_t> begins(2);
  const auto c = zero1_config();
  bool rank1_gives_up = false;
  auto train_and_save = [&](int64_t step_count) {
    return run_ranks(
        2,
        [&](distributed::Communicator& comm) {
          RankStep rank(comm, c);
          train::TrainStep& step = *rank.step;
          for (int64_t s = 0; s < step_count; ++s) step.run(s);
          const auto topology = train::checkpoint_topology(step);
          checkpoint::Checkpointer checkpoints(checkpoint::CheckpointOptions::from_config(c), run_dir, topology);
          if (rank1_gives_up && comm.rank() == 1) return;  // as if killed before writing its shard
          checkpoints.save({step_count, 0, 0}, *step.model(), step.optimizer());
          slices[comm.rank()] = checkpoint::flatten(step.optimizer(), 0, topology.shard_owned);
          begins[comm.rank()] = topology.shard_begin;
        },
        /*timeout_s=*/10);
  };
  require_no_errors(train_and_save(1));
  const std::string step1 = run_dir + "/checkpoints/step-1";
  for (const char* f : {"optimizer-shard-00000-of-00002.pt", "optimizer-shard-00001-of-00002.pt", "model.pt"})
    CHECK(fs::exists(step1 + "/" + f));
  CHECK_FALSE(fs::exists(step1 + "/optimizer.pt"));

  SECTION("one process with the whole state loads both shards, put together") {
    auto one = c;
    one.gradient_accumulation_steps = 4;  // same global batch of 8 with WORLD_SIZE=1
    one.shard_optimizer_over_data = false;
    auto source = data::make_source(data::DataOptions::from_config(one));
    train::TrainStep step(train::StepOptions::from_config(one), model::Decoder(model::DecoderOptions::from_config(one)),
                          *source, c10::Device(c10::kCPU));
    checkpoint::Checkpointer checkpoints(checkpoint::CheckpointOptions::from_config(one), run_dir,
                                         train::checkpoint_topology(step));
    REQUIRE(checkpoints.load(1, *step.model(), step.optimizer()).step == 1);
    for (int r = 0; r < 2; ++r) {
      INFO("rank " << r);
      require_equal(checkpoint::flatten(step.optimizer(), begins[r], slices[r].count), slices[r]);
    }
  }
  SECTION("the global batch must match: exit-2 error naming the three keys") {
    auto other = c;
    other.shard_optimizer_over_data = false;  // one process, K=2: global batch 4, not 8
    auto source = data::make_source(data::DataOptions::from_config(other));
    train::TrainStep step(train::StepOptions::from_config(other),
                          model::Decoder(model::DecoderOptions::from_config(other)), *source, c10::Device(c10::kCPU));
    checkpoint::Checkpointer checkpoints(checkpoint::CheckpointOptions::from_config(other), run_dir,
                                         train::checkpoint_topology(step));
    REQUIRE_THROWS_AS(checkpoints.load(1, *step.model(), step.optimizer()), InputError);
    REQUIRE_THROWS_WITH(checkpoints.load(1, *step.model(), step.optimizer()),
                        Catch::Matchers::Contains("per_device_batch_size=2 x gradient_accumulation_steps=2 x "
                                                  "WORLD_SIZE=1") &&
                            Catch::Matchers::Contains("gradient_accumulation_steps=4"));
  }
  SECTION("rank 1 dies before writing its shard: rank 0's save fails and leaves no step-2") {
    rank1_gives_up = true;
    auto errors = train_and_save(2);
    INFO("rank 0: " << errors[0]);
    CHECK(errors[0].find("cannot write checkpoint") != std::string::npos);
    CHECK(errors[1].empty());
    CHECK_FALSE(fs::exists(run_dir + "/checkpoints/step-2"));
    CHECK_FALSE(fs::exists(run_dir + "/checkpoints/.tmp-step-2"));
    CHECK(fs::exists(step1 + "/manifest.yml"));  // the earlier checkpoint is untouched
  }
  fs::remove_all(run_dir);
}

TEST_CASE("RunLock: one holder at a time (released with the holder) and acquire_if_present creates nothing",
          "[elastic][lock]") {
  const std::string dir = elastic_scratch("lock");
  CHECK_FALSE(train::RunLock::acquire_if_present(dir).has_value());
  CHECK_FALSE(fs::exists(dir + "/trainer.lock"));
  {
    auto held = train::RunLock::acquire(dir);
    // flock belongs to the open file: a second open in this very process conflicts as another process would.
    REQUIRE_THROWS_WITH(train::RunLock::acquire(dir),
                        Catch::Matchers::Contains("run directory '" + dir + "' is in use by another trainer (pid " +
                                                  std::to_string(::getpid()) + " on host "));
    REQUIRE_THROWS_AS(train::RunLock::acquire_if_present(dir), InputError);
  }
  CHECK(train::RunLock::acquire_if_present(dir).has_value());  // released when the holder went away
  fs::remove_all(dir);
}

TEST_CASE("a ZeRO-1 process keeps only the shard files that overlap its slice", "[elastic][unit]") {
  checkpoint::Topology t;
  t.params = {at::zeros({4}), at::zeros({6})};  // 10 elements: 2 shards of 5, or 4 slices of 3 (the last of 1)
  checkpoint::Manifest m;
  m.optimizer_shards = 2;
  const std::string first = checkpoint::shard_file_name(0, 2), second = checkpoint::shard_file_name(1, 2);
  CHECK(checkpoint::needed_by(t, m, first));  // not sharded: the whole state needs every shard
  t.sharded = true;
  t.shard_begin = 6;  // slice [6, 9)
  t.shard_owned = 3;
  CHECK_FALSE(checkpoint::needed_by(t, m, first));
  CHECK(checkpoint::needed_by(t, m, second));
  CHECK(checkpoint::needed_by(t, m, "model.pt"));
  t.shard_begin = 3;  // slice [3, 6) spans both shards
  CHECK(checkpoint::needed_by(t, m, first));
  CHECK(checkpoint::needed_by(t, m, second));
}

TEST_CASE("ZeRO-3 model shards: written by 3 processes, read back as 2 ranges, as a whole, and a gap is named",
          "[elastic][unit]") {
  const std::vector<at::Tensor> params = {at::randn({4, 3}), at::randn({7}), at::randn({2, 2})};  // 23 elements
  const at::Tensor flat = at::cat({params[0].reshape(-1), params[1], params[2].reshape(-1)});
  checkpoint::Manifest m;
  m.model_shards = 3;
  std::map<std::string, std::string> files;
  for (int r = 0; r < 3; ++r) {  // ceil(23 / 3) = 8: [0, 8), [8, 16), [16, 23), each split in two pieces
    const int64_t begin = 8 * r, count = std::min<int64_t>(8, 23 - begin);
    const std::vector<at::Tensor> pieces = {flat.narrow(0, begin, 3).clone(), flat.narrow(0, begin + 3, count - 3).clone()};
    torch::serialize::OutputArchive archive;
    checkpoint::write_weight_shard(archive, pieces, begin, 23);
    std::ostringstream bytes;
    archive.save_to(bytes);
    files[checkpoint::weight_shard_file_name(r, 3)] = bytes.str();
  }
  CHECK(checkpoint::model_files(m) == std::vector<std::string>{"model-shard-00000-of-00003.pt",
                                                                "model-shard-00001-of-00003.pt",
                                                                "model-shard-00002-of-00003.pt"});
  for (int64_t begin : {0, 12}) {  // two processes: [0, 12) and [12, 23), each across two shard files
    const int64_t count = begin == 0 ? 12 : 11;
    const at::Tensor range = checkpoint::read_weight_range(files, m, begin, count, 23, at::kFloat, "step-4");
    CHECK(at::equal(range, flat.narrow(0, begin, count)));
    std::vector<at::Tensor> pieces = {at::zeros({5}), at::zeros({count - 5})};
    checkpoint::put_range(range, pieces);
    CHECK(at::equal(at::cat(pieces), flat.narrow(0, begin, count)));
    CHECK(at::equal(checkpoint::cut_range(params, begin, count), range));  // the same range out of a whole model.pt
  }
  files.erase(checkpoint::weight_shard_file_name(1, 3));
  CHECK_THROWS_WITH(checkpoint::read_weight_range(files, m, 0, 23, 23, at::kFloat, "step-4"),
                    Catch::Contains("the model shards of 'step-4' cover 15 of the 23 elements [0, 23)"));
  CHECK_THROWS_WITH(checkpoint::read_weight_range(files, m, 0, 8, 30, at::kFloat, "step-4"),
                    Catch::Contains("holds 23 elements of Float; the model has 30"));
}

TEST_CASE("ZeRO-1: a re-signed damaged shard only rank 1 reads gives every rank the same verdict", "[elastic][zero]") {
  // Rank 0 never reads shard 1 (needed_by), so only rank 1 can find the damage: without a verdict agreed before
  // loading, rank 0 would load step-2 and rank 1 fall back to step-1, or rank 1 exit 2 while rank 0 waited.
  const std::string run_dir = elastic_scratch("verdict");
  const auto c = zero1_config();
  const std::string shard1 = run_dir + "/checkpoints/step-2/" + checkpoint::shard_file_name(1, 2);
  std::vector<int64_t> restored(2, -1);
  auto ranks = [&](bool write, const config::Config& cfg) {
    return run_ranks(
        2,
        [&](distributed::Communicator& comm) {
          RankStep rank(comm, cfg);
          train::TrainStep& step = *rank.step;
          checkpoint::Checkpointer checkpoints(checkpoint::CheckpointOptions::from_config(cfg), run_dir,
                                               train::checkpoint_topology(step));
          if (write)
            for (int64_t s = 0; s < 2; ++s) {
              step.run(s);
              checkpoints.save({s + 1, 0, 0}, *step.model(), step.optimizer());
            }
          else
            restored[comm.rank()] = checkpoints.restore(*step.model(), step.optimizer()).step;
        },
        /*timeout_s=*/20);
  };
  require_no_errors(ranks(true, c));
  {
    std::ifstream in(shard1, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    bytes.replace(0, 8, "\xff\xfe\x1b[2J\x07\x00", 8);  // the first zip header
    std::ofstream(shard1, std::ios::binary | std::ios::trunc) << bytes;
  }
  resign(run_dir + "/checkpoints/step-2", checkpoint::shard_file_name(1, 2));

  SECTION("resuming: both ranks fall back to step-1") {
    require_no_errors(ranks(false, c));
    CHECK(restored == std::vector<int64_t>{1, 1});
  }
  SECTION("load_checkpoint_step=2: both ranks throw, naming the shard; rank 0 says rank 1 found it") {
    auto explicit_step = c;
    explicit_step.load_checkpoint_step = 2;
    const auto errors = ranks(false, explicit_step);
    INFO("rank 0: " << errors[0] << "\nrank 1: " << errors[1]);
    CHECK_THAT(errors[1], Catch::StartsWith("checkpoint file '" + shard1 + "' is corrupt: "));
    CHECK(errors[0] == "rank 1 found: " + errors[1]);
    CHECK(restored == std::vector<int64_t>{-1, -1});
  }
  fs::remove_all(run_dir);
}
