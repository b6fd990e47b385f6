// Sharded weights (shard_parameters_over_data, ZeRO-3) against one process, in both carry modes (the shadow tree
// sharded with shard_gradients_over_data, or whole and summed once per step): each rank is a thread with its own
// ProcessGroupGloo (RankThreads.h). docs/distributed.md, "Sharded training".
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "RelativeError.h"
#include "ShardedTraining.h"
#include "distributed/ParameterShards.h"
#include "train/MemoryProbe.h"

using namespace shadowgrad;
using namespace sharded_training;

namespace {

config::Config zero3_config(int64_t k, bool shard_grads, config::GradDtype carry) {
  auto c = sharded_config(k, shard_grads, carry, /*zero1=*/true);
  c.shard_parameters_over_data = true;
  return c;
}

// Every step's loss and norm within 1e-6 of one process, the weights within `weight_bound`.
void check_against_one(const std::vector<ShardedTrace>& ranks, const ShardedTrace& ref, double weight_bound) {
  for (size_t r = 0; r < ranks.size(); ++r) {
    const ShardedTrace& t = ranks[r];
    INFO("rank " << r);
    REQUIRE(t.loss.size() == ref.loss.size());
    for (size_t s = 0; s < ref.loss.size(); ++s) {
      CHECK(t.loss[s] == Approx(ref.loss[s]).epsilon(1e-6));
      CHECK(t.grad_norm[s] == Approx(ref.grad_norm[s]).epsilon(1e-6));
    }
    // The noise scale from each microbatch's local norm and the shards' global one, as one process measures them.
    CHECK(t.noise.updates == ref.noise.updates);
    CHECK(t.noise.ema_grad_sq == Approx(ref.noise.ema_grad_sq).epsilon(1e-5));
    CHECK(t.noise.ema_trace == Approx(ref.noise.ema_trace).epsilon(1e-5));
    const double err = relative_error::worst_rel_diff(t.weights, ref.weights);
    INFO("weights: " << err);
    CHECK(err <= weight_bound);
  }
}

} // namespace

TEST_CASE("sharded weights, fp32 with AdamW, both carry modes: every step's loss and norm within 1e-6 of one process, "
          "the weights after 4 steps within 1e-5, and 1/N of the weights per rank",
          "[sharded][zero3][exact]") {
  for (bool shard_grads : {true, false}) {
    for (int64_t k : {1, 4}) {
      for (int world : {2, 4}) {
        INFO("shard_gradients_over_data=" << shard_grads << " K=" << k << " world=" << world);
        const ShardedTrace ref = train_sharded(sharded_config(k * world, false, config::GradDtype::float32), 4, nullptr);
        const auto ranks = train_sharded_ranks(world, zero3_config(k, shard_grads, config::GradDtype::float32), 4);
        // As for ZeRO-2 (test_sharded.cpp): at 4 processes x K=4 plain data parallel itself measures 1.2e-5.
        check_against_one(ranks, ref, world == 4 && k == 4 ? 5e-5 : 1e-5);
        CHECK(ref.noise.updates == 4);  // the noise scale was measured at every step, and compared above
        int64_t whole = 0, held = 0;
        for (const auto& w : ref.weights) whole += w.numel() * int64_t(w.element_size());
        for (const ShardedTrace& t : ranks) {
          held += t.weight_bytes;
          CHECK(t.weight_bytes <= (whole + world * 4 - 1) / world);
          CHECK(t.gathered_high > 0);
          CHECK(t.gathered_high <= 2 * t.largest_unit);  // the unit in use and the one prefetched, never the model
          CHECK(t.last_step.broadcast > 0);
          CHECK(t.last_step.all_gather == 0);  // no all-gather of the updated weights: the next forward gathers them
        }
        CHECK(held == whole);  // the ranges cover the weights once
      }
    }
  }
}

TEST_CASE("sharded weights under LoRA (the frozen base sharded), remat, and reshard_after_forward=false match one "
          "process",
          "[sharded][zero3][exact]") {
  for (const std::string variant : {"lora", "remat", "keep"}) {
    INFO(variant);
    auto setup = [&](config::Config c) {
      if (variant == "lora") {
        c.lora_rank = 4;
        c.lora_alpha = 8;
      } else if (variant == "remat") {
        c.remat_policy = config::RematPolicy::full;
      } else {
        c.reshard_after_forward = false;
      }
      return c;
    };
    const ShardedTrace ref = train_sharded(setup(sharded_config(4, false, config::GradDtype::float32)), 3, nullptr);
    const auto ranks = train_sharded_ranks(2, setup(zero3_config(2, true, config::GradDtype::float32)), 3);
    check_against_one(ranks, ref, 1e-5);
  }
}

TEST_CASE("reshard_after_forward=false gathers each layer once per microbatch and holds more at once",
          "[sharded][zero3][count]") {
  auto c = zero3_config(2, false, config::GradDtype::float32);
  const auto again = train_sharded_ranks(2, c, 1);
  c.reshard_after_forward = false;
  const auto kept = train_sharded_ranks(2, c, 1);
  INFO("broadcasts per step " << again[0].last_step.broadcast << " -> " << kept[0].last_step.broadcast
                              << "; gathered high " << again[0].gathered_high << " -> " << kept[0].gathered_high);
  CHECK(kept[0].last_step.broadcast < again[0].last_step.broadcast);
  CHECK(kept[0].gathered_high > again[0].gathered_high);
}

TEST_CASE("sharded weights with a bf16 carry stay within the bf16 tolerance of one process", "[sharded][zero3][bf16]") {
  const ShardedTrace ref = train_sharded(sharded_config(4, false, config::GradDtype::bfloat16), 3, nullptr);
  for (bool shard_grads : {true, false}) {
    const auto ranks = train_sharded_ranks(2, zero3_config(2, shard_grads, config::GradDtype::bfloat16), 3);
    for (const ShardedTrace& t : ranks)
      for (size_t s = 0; s < ref.loss.size(); ++s) CHECK(t.loss[s] == Approx(ref.loss[s]).epsilon(1e-3));
  }
}

TEST_CASE("the pre-start plan counts each process's range of the weights and two gathered units, and the whole model "
          "at the start only where rank 0 probes the microbatch",
          "[sharded][zero3][memory]") {
  auto c = zero3_config(2, true, config::GradDtype::float32);
  const auto ranks = train_sharded_ranks(2, c, 1);
  const memory::Footprint plan = train::footprint_from_config(c, 2), whole = train::footprint_from_config(c, 1);
  INFO("plan: weights " << plan.weights << "; rank 0 holds " << ranks[0].weight_bytes << ", gathered at most "
                        << ranks[0].gathered_high << ", largest unit " << ranks[0].largest_unit);
  CHECK(plan.weights == ranks[0].weight_bytes + 2 * ranks[0].largest_unit);  // rank 0 holds ceil(T / 2) elements
  CHECK(ranks[0].gathered_high <= 2 * ranks[0].largest_unit);
  CHECK(plan.whole_at_start == 0);  // built unit by unit (test_sharded_build.cpp)
  CHECK(plan.total() < whole.total());
  c.per_device_batch_size = config::kAuto;  // rank 0 probes the whole model: built whole first
  c.global_batch_size = 8;
  CHECK(train::footprint_from_config(c, 2).whole_at_start == whole.weights);
}

namespace {
// ZeRO-3 with bf16 compute on 2 ranks for 3 steps; `wide`: every tensor travels as stored (fp32).
std::vector<ShardedTrace> train_bf16_ranks(bool wide) {
  auto c = zero3_config(2, false, config::GradDtype::bfloat16);
  c.dtype = config::ComputeDtype::bfloat16;
  std::vector<ShardedTrace> out(2);
  require_no_errors(run_ranks(2, [&](distributed::Communicator& comm) {
    auto dp = std::make_shared<distributed::DataParallel>(share(comm), distributed::DataParallelOptions::from_config(c));
    auto source = data::make_source(data::DataOptions::from_config(c));
    train::TrainStep step(train::StepOptions::from_config(c), model::Decoder(model::DecoderOptions::from_config(c)),
                          *source, c10::Device(c10::kCPU), dp);
    if (wide) step.parameter_shards()->cast_before_gather(at::kFloat);
    ShardedTrace& t = out[size_t(comm.rank())];
    for (int s = 0; s < 3; ++s) {
      const auto before = comm.counts();
      const auto stats = step.run(s);
      t.last_step.bytes = comm.counts().bytes - before.bytes;
      t.loss.push_back(stats.loss);
      t.grad_norm.push_back(stats.grad_norm);
    }
    step.gather_weights();
    for (const auto& p : step.accumulator().params()) t.weights.push_back(p.detach().clone());
  }));
  return out;
}
} // namespace

TEST_CASE("under bf16 compute the weights travel cast (half the bytes) and the model computes with the same values",
          "[sharded][zero3][bf16]") {
  const auto cast = train_bf16_ranks(false), wide = train_bf16_ranks(true);
  for (size_t r = 0; r < 2; ++r) {
    INFO("rank " << r << ": bytes a step " << cast[r].last_step.bytes << " cast, " << wide[r].last_step.bytes << " wide");
    // The model casts every matrix to bf16 before each use, so rounding it before the gather changes no value.
    CHECK(cast[r].loss == wide[r].loss);
    CHECK(cast[r].grad_norm == wide[r].grad_norm);
    REQUIRE(cast[r].weights.size() == wide[r].weights.size());
    for (size_t i = 0; i < cast[r].weights.size(); ++i) CHECK(at::equal(cast[r].weights[i], wide[r].weights[i]));
    // The matrices are nearly all of the weights; the carry's reduction (bf16, whole) is the same in both runs.
    CHECK(cast[r].last_step.bytes < wide[r].last_step.bytes);
  }
  CHECK(cast[0].last_step.bytes + cast[1].last_step.bytes < 0.8 * (wide[0].last_step.bytes + wide[1].last_step.bytes));
}
