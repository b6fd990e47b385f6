// Data parallel on c10d, in one test process: each rank is a thread with its own ProcessGroupGloo, meeting
// through a c10d::FileStore in a fresh temp directory (no ports, so ctest -j is safe). The multi-process runs of
// the real trainer (loss parity, ZeRO-1, bf16 buckets, killed and hung ranks, launch.sh) are in
// tests/distributed_test.sh.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <torch/optim/optimizer.h>
#include <unistd.h>

#include "RankThreads.h"
#include "RelativeError.h"
#include "TinyConfig.h"
#include "accumulate/ShadowAccumulator.h"
#include "data/DataSource.h"
#include "distributed/BucketedReduce.h"
#include "distributed/Communicator.h"
#include "distributed/DataParallel.h"
#include "distributed/Environment.h"
#include "distributed/FlatView.h"
#include "memory/MemoryReport.h"
#include "distributed/ShardedOptimizer.h"
#include "model/Decoder.h"
#include "train/TokenLoss.h"
#include "train/TrainStep.h"
#include "util/Errors.h"

using namespace shadowgrad;
namespace fs = std::filesystem;

namespace {

config::Config dist_config(int64_t k, int64_t batch) {
  auto c = tiny_config();
  c.synthetic_min_length_fraction = 0.2;  // uneven padding: shards hold different valid-token counts
  c.gradient_accumulation_steps = k;
  c.per_device_batch_size = batch;
  return c;
}

std::vector<at::Tensor> fp32_copies(const std::vector<at::Tensor>& ts) {
  std::vector<at::Tensor> out;
  for (const auto& t : ts) out.push_back(t.detach().to(at::kFloat).clone());
  return out;
}

// The shadow tree of step 0 of a single process with the whole global batch: the reference gradient.
std::vector<at::Tensor> single_process_gradient(const config::Config& c) {
  auto source = data::make_source(data::DataOptions::from_config(c));
  train::TrainStep step(train::StepOptions::from_config(c), model::Decoder(model::DecoderOptions::from_config(c)),
                        *source, c10::Device(c10::kCPU));
  step.accumulate_batch(0);
  return fp32_copies(step.accumulator().shadows());
}

} // namespace

TEST_CASE("FlatView reads and writes ranges that span tensors of different dtypes", "[distributed][unit]") {
  std::vector<at::Tensor> ts{at::arange(3, at::kFloat), at::arange(3, 8, at::kFloat).to(at::kBFloat16),
                             at::empty({0}), at::arange(8, 12, at::kFloat).view({2, 2})};
  distributed::FlatView flat(ts);
  REQUIRE(flat.numel() == 12);
  at::Tensor got = at::empty({7});
  flat.read(2, got);
  CHECK(at::equal(got, at::arange(2, 9, at::kFloat)));
  flat.write(1, at::full({10}, -1.f));
  CHECK(ts[0][0].item<float>() == 0.f);
  CHECK(ts[1].to(at::kFloat).eq(-1).all().item<bool>());
  CHECK(ts[3].view({-1})[2].item<float>() == -1.f);
  CHECK(ts[3].view({-1})[3].item<float>() == 11.f);
  CHECK_THROWS_AS(flat.read(10, at::empty({3})), std::out_of_range);
  CHECK_THROWS_AS(distributed::FlatView({at::zeros({2, 3}).t()}), std::invalid_argument);
}

TEST_CASE("the rendezvous variables: one process needs none, bad values are named", "[distributed][unit]") {
  struct Saved {
    std::vector<std::pair<std::string, std::string>> vars;
    Saved() {
      for (const char* n : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"}) {
        const char* v = std::getenv(n);
        vars.emplace_back(n, v ? v : "");
        unsetenv(n);
      }
    }
    ~Saved() {
      for (auto& [n, v] : vars) v.empty() ? unsetenv(n.c_str()) : setenv(n.c_str(), v.c_str(), 1);
    }
  } saved;
  using distributed::ProcessEnvironment;
  CHECK_FALSE(ProcessEnvironment::from_environment().distributed());
  CHECK(ProcessEnvironment::from_environment().local_world_size == 1);
  setenv("LOCAL_WORLD_SIZE", "0", 1);
  CHECK_THROWS_WITH(ProcessEnvironment::from_environment(), Catch::Contains("LOCAL_WORLD_SIZE='0'"));
  setenv("LOCAL_WORLD_SIZE", "2", 1);
  CHECK(ProcessEnvironment::from_environment().local_world_size == 2);
  setenv("WORLD_SIZE", "2", 1);
  setenv("RANK", "1", 1);
  CHECK_THROWS_WITH(ProcessEnvironment::from_environment(), Catch::Contains("MASTER_ADDR is not set"));
  setenv("MASTER_ADDR", "127.0.0.1", 1);
  setenv("MASTER_PORT", "70000", 1);
  CHECK_THROWS_WITH(ProcessEnvironment::from_environment(), Catch::Contains("MASTER_PORT='70000'"));
  setenv("MASTER_PORT", "29500", 1);
  auto env = ProcessEnvironment::from_environment();
  CHECK((env.distributed() && env.rank == 1 && env.world_size == 2 && env.master_port == 29500));
  setenv("RANK", "2", 1);
  CHECK_THROWS_AS(ProcessEnvironment::from_environment(), InputError);
}

TEST_CASE("the bucketed reduction sums fp32 and bf16 trees exactly, one all_reduce per bucket",
          "[distributed][buckets]") {
  const int world = 3;
  for (auto dtype : {at::kFloat, at::kBFloat16}) {
    std::vector<std::vector<at::Tensor>> results(world);
    std::vector<int64_t> calls(world), buckets(world);
    const int64_t bucket_bytes = 40;  // 10 fp32 values: the 37-element tree needs 4 buckets
    auto errors = run_ranks(world, [&](distributed::Communicator& comm) {
      const int r = comm.rank();
      // Small integers: exact in bf16 and in any summation order, so the sum must be exact.
      std::vector<at::Tensor> tree{at::full({5, 3}, r + 1.f).to(dtype), at::arange(22, at::kFloat).add(r).to(dtype)};
      const int64_t before = comm.counts().all_reduce;
      buckets[r] = distributed::all_reduce_sum_bucketed(comm, tree, bucket_bytes);
      calls[r] = comm.counts().all_reduce - before;
      results[r] = tree;
    });
    require_no_errors(errors);
    for (int r = 0; r < world; ++r) {
      CHECK(buckets[r] == 4);
      CHECK(calls[r] == 4);
      CHECK(distributed::bucket_count(37, bucket_bytes) == 4);
      CHECK(results[r][0].scalar_type() == dtype);
      CHECK(at::equal(results[r][0].to(at::kFloat), at::full({5, 3}, 6.f)));
      CHECK(at::equal(results[r][1].to(at::kFloat), at::arange(22, at::kFloat).mul(3).add(3)));
    }
  }
}

TEST_CASE("2 ranks x K=2 reduce to the single-process gradient of the whole global batch", "[distributed][parity]") {
  const auto reference = single_process_gradient(dist_config(4, 2));
  std::vector<std::vector<at::Tensor>> grads(2);
  auto errors = run_ranks(2, [&](distributed::Communicator& comm) {
    auto c = dist_config(2, 2);
    c.grad_reduce_bucket_mb = 0.01;  // several buckets
    auto dp = std::make_shared<distributed::DataParallel>(share(comm),
                                                          distributed::DataParallelOptions::from_config(c));
    auto source = data::make_source(data::DataOptions::from_config(c));
    train::TrainStep step(train::StepOptions::from_config(c), model::Decoder(model::DecoderOptions::from_config(c)),
                          *source, c10::Device(c10::kCPU), dp);
    step.accumulate_batch(0);
    grads[comm.rank()] = fp32_copies(step.accumulator().shadows());
  });
  require_no_errors(errors);
  CHECK(relative_error::worst_rel_diff(grads[0], reference) <= 1e-5);
  CHECK(relative_error::worst_rel_diff(grads[1], reference) <= 1e-5);
}

TEST_CASE("reducing before the last microbatch is folded (DeepSpeed #7985) misses the reference gradient",
          "[distributed][order]") {
  // The same loop as TrainStep::accumulate, written out so the reduction can be put in the wrong place. This shows
  // the parity checks are sensitive to the order; the right place is also checked through the fold count.
  const auto reference = single_process_gradient(dist_config(4, 2));
  for (bool reduce_early : {false, true}) {
    std::vector<std::vector<at::Tensor>> grads(2);
    std::vector<int64_t> folds(2);
    auto errors = run_ranks(2, [&](distributed::Communicator& comm) {
      auto c = dist_config(2, 2);
      distributed::DataParallel dp(share(comm), distributed::DataParallelOptions::from_config(c));
      auto source = data::make_source(data::DataOptions::from_config(c));
      model::Decoder model(model::DecoderOptions::from_config(c));
      accumulate::ShadowAccumulator acc(model->parameters(), at::kFloat);
      data::Batch batch = source->examples(0, comm.rank() * 4, 4);
      const double inv_tokens = 1.0 / double(dp.global_tokens(batch.valid_tokens()));
      acc.begin();
      for (int m = 0; m < 2; ++m) {
        if (reduce_early && m == 1) dp.reduce_gradients(acc);
        data::Batch micro = batch.slice(m * 2, 2);
        (train::token_loss_sum(model->forward(micro.tokens), micro.targets) * inv_tokens).backward();
      }
      acc.end();
      if (!reduce_early) dp.reduce_gradients(acc);
      folds[comm.rank()] = dp.folds_at_last_reduce();
      grads[comm.rank()] = fp32_copies(acc.shadows());
    });
    require_no_errors(errors);
    const int64_t params = int64_t(reference.size());
    if (reduce_early) {
      CHECK(folds[0] == params);  // only the first microbatch was in
      CHECK(relative_error::worst_rel_diff(grads[0], reference) > 1e-2);
    } else {
      CHECK(folds[0] == 2 * params);
      CHECK(relative_error::worst_rel_diff(grads[0], reference) <= 1e-5);
    }
  }
}

TEST_CASE("collectives per optimizer step: 2 + buckets (+1 noise scale) all_reduce, independent of K, plus the ZeRO-1 "
          "all_gather rounds",
          "[distributed][count]") {
  for (bool zero : {false, true}) {
    for (int64_t k : {1, 3}) {
      std::vector<distributed::CollectiveCounts> per_step(2);
      std::vector<int64_t> numel(2), folds(2), params(2);
      const bool c_noise = dist_config(k, 2).gradient_noise_scale;
      auto errors = run_ranks(2, [&](distributed::Communicator& comm) {
        auto c = dist_config(k, 2);
        c.grad_reduce_bucket_mb = 0.02;
        c.shard_optimizer_over_data = zero;
        auto dp = std::make_shared<distributed::DataParallel>(share(comm),
                                                              distributed::DataParallelOptions::from_config(c));
        auto source = data::make_source(data::DataOptions::from_config(c));
        train::TrainStep step(train::StepOptions::from_config(c), model::Decoder(model::DecoderOptions::from_config(c)),
                              *source, c10::Device(c10::kCPU), dp);
        step.run(0);
        const auto before = comm.counts();
        step.run(1);
        const auto after = comm.counts();
        const int r = comm.rank();
        per_step[r].all_reduce = after.all_reduce - before.all_reduce;
        per_step[r].all_gather = after.all_gather - before.all_gather;
        for (const auto& p : step.accumulator().params()) numel[r] += p.numel();
        params[r] = int64_t(step.accumulator().params().size());
        folds[r] = dp->folds_at_last_reduce();
      });
      require_no_errors(errors);
      const int64_t bucket_bytes = int64_t(0.02 * (1 << 20));
      const int64_t buckets = distributed::bucket_count(numel[0], bucket_bytes);
      // ZeRO-1: each rank owns ceil(N/2) elements; a round gathers bucket/2 of them from each rank.
      const int64_t shard = (numel[0] + 1) / 2, chunk = bucket_bytes / 4 / 2;
      const int64_t rounds = zero ? (shard + chunk - 1) / chunk : 0;
      INFO("zero=" << zero << " K=" << k << " parameters=" << numel[0] << " buckets=" << buckets
                   << " rounds=" << rounds);
      REQUIRE(buckets > 1);
      for (int r = 0; r < 2; ++r) {
        // valid tokens, the gradient buckets, the noise scale's norms (on by default), the loss
        CHECK(per_step[r].all_reduce == 2 + buckets + (c_noise ? 1 : 0));
        CHECK(per_step[r].all_gather == rounds);
        CHECK(folds[r] == k * params[r]);  // reduced after all K microbatches had been folded
      }
      if (zero) CHECK(rounds > 1);
    }
  }
}

TEST_CASE("ZeRO-1 matches the unsharded update and holds about 1/WORLD_SIZE of the optimizer state",
          "[distributed][zero]") {
  std::vector<std::vector<at::Tensor>> weights[2];
  std::vector<int64_t> state_bytes[2] = {std::vector<int64_t>(2), std::vector<int64_t>(2)};
  std::vector<double> losses[2][2];
  for (int zero = 0; zero < 2; ++zero) {
    weights[zero].resize(2);
    auto errors = run_ranks(2, [&](distributed::Communicator& comm) {
      auto c = dist_config(2, 2);
      c.grad_reduce_bucket_mb = 0.01;  // several all-gather rounds too
      c.shard_optimizer_over_data = zero == 1;
      auto dp = std::make_shared<distributed::DataParallel>(share(comm),
                                                            distributed::DataParallelOptions::from_config(c));
      auto source = data::make_source(data::DataOptions::from_config(c));
      train::TrainStep step(train::StepOptions::from_config(c), model::Decoder(model::DecoderOptions::from_config(c)),
                            *source, c10::Device(c10::kCPU), dp);
      for (int s = 0; s < 4; ++s) losses[zero][comm.rank()].push_back(step.run(s).loss);
      weights[zero][comm.rank()] = fp32_copies(step.accumulator().params());
      state_bytes[zero][comm.rank()] = memory::optimizer_state_bytes(step.optimizer());
    });
    require_no_errors(errors);
  }
  for (int r = 0; r < 2; ++r) {
    CHECK(relative_error::worst_rel_diff(weights[1][r], weights[0][r]) <= 1e-5);
    for (size_t s = 0; s < losses[0][r].size(); ++s) CHECK(losses[1][r][s] == Approx(losses[0][r][s]).epsilon(1e-5));
    const double ratio = double(state_bytes[1][r]) / double(state_bytes[0][r]);
    INFO("rank " << r << ": sharded " << state_bytes[1][r] << " bytes, unsharded " << state_bytes[0][r] << " bytes");
    CHECK(ratio == Approx(0.5).margin(0.001));
  }
  // Every rank ends with the same parameters.
  CHECK(relative_error::worst_rel_diff(weights[1][1], weights[1][0]) == 0);
}

TEST_CASE("different initial weights or configs on two ranks are caught before the first step",
          "[distributed][start]") {
  for (const std::string what : {"weights", "config"}) {
    auto errors = run_ranks(2, [&](distributed::Communicator& comm) {
      auto c = dist_config(1, 2);
      if (what == "config" && comm.rank() == 1) c.learning_rate *= 2;
      distributed::DataParallel dp(share(comm), distributed::DataParallelOptions::from_config(c));
      model::Decoder model(model::DecoderOptions::from_config(c));
      if (what == "weights" && comm.rank() == 1) {
        at::NoGradGuard no_grad;
        model->parameters()[3].view({-1})[0].add_(1e-3);
      }
      dp.verify_same_start(model->parameters());
    });
    for (int r = 0; r < 2; ++r) {
      INFO(what << ", rank " << r << ": " << errors[r]);
      CHECK_THAT(errors[r], Catch::Contains("rank 1 and rank 0 differ in the " +
                                            std::string(what == "config" ? "resolved config" : "initial weights")));
    }
  }
  // And identical starts pass.
  require_no_errors(run_ranks(2, [&](distributed::Communicator& comm) {
    auto c = dist_config(1, 2);
    distributed::DataParallel dp(share(comm), distributed::DataParallelOptions::from_config(c));
    model::Decoder model(model::DecoderOptions::from_config(c));
    dp.verify_same_start(model->parameters());
  }));
}

TEST_CASE("a rank that stops answering makes the others fail within collective_timeout_s", "[distributed][fault]") {
  std::atomic<bool> rank0_done{false};
  double seconds = -1;
  auto errors = run_ranks(
      2,
      [&](distributed::Communicator& comm) {
        if (comm.rank() == 1) {  // alive but silent, like a hung process
          while (!rank0_done) std::this_thread::sleep_for(std::chrono::milliseconds(20));
          return;
        }
        const auto start = std::chrono::steady_clock::now();
        try {
          at::Tensor t = at::ones({4});
          comm.all_reduce_sum_(t);
        } catch (...) {
          seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
          rank0_done = true;
          throw;
        }
        rank0_done = true;
      },
      /*timeout_s=*/1.0);
  INFO("rank 0: " << errors[0] << " after " << seconds << " s");
  CHECK_THAT(errors[0], Catch::Contains("all_reduce failed") && Catch::Contains("collective_timeout_s=1"));
  // The error names the silent peer (ranks are threads here: the same pid and host).
  CHECK_THAT(errors[0], Catch::Contains(fmt::format("[the others: rank 1: pid {} on host ", ::getpid())));
  CHECK(seconds >= 0.9);
  CHECK(seconds < 10);
  CHECK(errors[1].empty());
}
