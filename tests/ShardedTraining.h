#pragma once
// Training a tiny model for a few steps on one process or on ranks that are threads (RankThreads.h), recording what
// the sharded-training tests compare: test_sharded.cpp (ZeRO-1/2) and test_sharded_weights.cpp (ZeRO-3).
#include <memory>
#include <vector>

#include <ATen/ATen.h>

#include "RankThreads.h"
#include "TinyConfig.h"
#include "config/Config.h"
#include "data/DataSource.h"
#include "distributed/Communicator.h"
#include "distributed/DataParallel.h"
#include "distributed/ParameterShards.h"
#include "memory/MemoryReport.h"
#include "model/Decoder.h"
#include "train/ModelBuild.h"
#include "train/NoiseScale.h"
#include "train/TrainStep.h"

namespace sharded_training {

using namespace shadowgrad;

struct ShardedTrace {
  std::vector<double> loss, grad_norm;
  std::vector<at::Tensor> weights;
  int64_t shadow_bytes = 0, optimizer_bytes = 0;
  // ZeRO-3: this rank's range of the weights, the most gathered at once, the largest unit
  int64_t weight_bytes = 0, gathered_high = 0, largest_unit = 0;
  // The gradient noise scale's EMAs after the last step (its per-microbatch norms and the global one); updates 0 when
  // there is no estimate
  train::NoiseScaleState noise;
  distributed::CollectiveCounts last_step;
};

config::Config sharded_config(int64_t k, bool shard_grads, config::GradDtype carry, bool zero1 = false) {
  auto c = tiny_config();
  c.synthetic_min_length_fraction = 0.2;  // ragged: ranks hold different valid-token counts
  c.per_device_batch_size = 2;
  c.gradient_accumulation_steps = k;
  c.grad_dtype = carry;
  c.gradient_clipping_threshold = 0.3;  // clipped from the shards' global norm on some steps
  c.grad_reduce_bucket_mb = 0.01;       // several buckets
  c.shard_optimizer_over_data = shard_grads || zero1;
  c.shard_gradients_over_data = shard_grads;
  return c;
}

ShardedTrace train_sharded(const config::Config& c, int steps, distributed::Communicator* comm) {
  std::shared_ptr<distributed::DataParallel> dp;
  if (comm) dp = std::make_shared<distributed::DataParallel>(share(*comm), distributed::DataParallelOptions::from_config(c));
  auto source = data::make_source(data::DataOptions::from_config(c));
  // As the trainer builds it: under ZeRO-3 unit by unit, each process keeping its range (train/ModelBuild.h).
  train::BuiltModel built = train::build_model(c, {}, dp.get(), c10::Device(c10::kCPU));
  train::TrainStep step(train::StepOptions::from_config(c), built.model, *source, c10::Device(c10::kCPU), dp,
                        std::move(built.shards));
  ShardedTrace t;
  for (int s = 0; s < steps; ++s) {
    const auto before = comm ? comm->counts() : distributed::CollectiveCounts{};
    const auto stats = step.run(s);
    if (comm) {
      t.last_step.all_reduce = comm->counts().all_reduce - before.all_reduce;
      t.last_step.all_gather = comm->counts().all_gather - before.all_gather;
      t.last_step.broadcast = comm->counts().broadcast - before.broadcast;
      t.last_step.bytes = comm->counts().bytes - before.bytes;
    }
    t.loss.push_back(stats.loss);
    t.grad_norm.push_back(stats.grad_norm);
  }
  if (const auto* gns = step.noise_scale()) t.noise = gns->state();
  if (auto* shards = step.parameter_shards()) {
    t.weight_bytes = memory::tensor_bytes(shards->pieces());
    t.gathered_high = shards->gathered_bytes_high();
    t.largest_unit = shards->largest_unit_bytes();
  }
  step.gather_weights();  // ZeRO-3: the whole weights, from every rank's range
  for (const auto& p : step.accumulator().params()) t.weights.push_back(p.detach().clone());
  t.shadow_bytes = step.accumulator().bytes();
  t.optimizer_bytes = memory::optimizer_state_bytes(step.optimizer());
  return t;
}

std::vector<ShardedTrace> train_sharded_ranks(int world, const config::Config& c, int steps) {
  std::vector<ShardedTrace> out(static_cast<size_t>(world));
  require_no_errors(run_ranks(world, [&](distributed::Communicator& comm) { out[size_t(comm.rank())] = train_sharded(c, steps, &comm); }));
  return out;
}

} // namespace sharded_training
