#include "checkpoint/RunLayout.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "util/Errors.h"

namespace shadowgrad::checkpoint {
namespace {

std::string product(int64_t pdbs, int64_t k, int64_t world) {
  return fmt::format("per_device_batch_size={} x gradient_accumulation_steps={} x WORLD_SIZE={}", pdbs, k, world);
}

std::string processes(int64_t world) { return fmt::format("{} process{}", world, world == 1 ? "" : "es"); }

std::string optimizer_layout(int64_t shards) {
  return shards > 0 ? fmt::format("optimizer state in {} ZeRO-1 shards", shards) : "whole optimizer state";
}

} // namespace

void record_layout(Manifest& m, const BatchLayout& layout, const Topology& topology) {
  m.per_device_batch_size = layout.per_device_batch_size;
  m.gradient_accumulation_steps = layout.gradient_accumulation_steps;
  m.world_size = topology.world_size;
  m.global_batch = layout.per_device_batch_size * layout.gradient_accumulation_steps * topology.world_size;
  // A batch that grows: the batch of the next step, as the policy left it.
  if (m.state.global_batch > 0 && m.state.global_batch % (layout.per_device_batch_size * topology.world_size) == 0) {
    m.global_batch = m.state.global_batch;
    m.gradient_accumulation_steps = m.global_batch / (layout.per_device_batch_size * topology.world_size);
  }
  m.optimizer_shards = topology.sharded ? topology.world_size : 0;
}

void check_global_batch(const Manifest& m, const BatchLayout& layout, int world_size, const std::string& dir) {
  if (m.global_batch < 0) return;
  const int64_t now = layout.per_device_batch_size * layout.gradient_accumulation_steps * world_size;
  if (now == m.global_batch) return;
  const int64_t per_k = layout.per_device_batch_size * world_size;
  // global_batch_size=N keeps it equal at any process count; a K that fits this count is the other way.
  std::string hint = fmt::format(" (global_batch_size={}", m.global_batch);
  if (layout.global_batch_size == 0 && m.global_batch % per_k == 0)
    hint += fmt::format(", or here gradient_accumulation_steps={}", m.global_batch / per_k);
  hint += ")";
  throw InputError(fmt::format("checkpoint '{}' was written with a global batch of {} ({}), but this run's is {} ({}); "
                               "keep per_device_batch_size x gradient_accumulation_steps x WORLD_SIZE equal on "
                               "resume{}, or use a new run_name",
                               dir, m.global_batch,
                               product(m.per_device_batch_size, m.gradient_accumulation_steps, m.world_size), now,
                               product(layout.per_device_batch_size, layout.gradient_accumulation_steps,
                                       world_size), hint));
}

void log_new_layout(const Manifest& m, const BatchLayout& layout, const Topology& topology) {
  if (m.world_size < 0) return;
  const int64_t shards = topology.sharded ? topology.world_size : 0;
  if (m.world_size == topology.world_size && m.gradient_accumulation_steps == layout.gradient_accumulation_steps &&
      m.optimizer_shards == shards)
    return;
  spdlog::info("resharding: the checkpoint was written by {} with gradient_accumulation_steps={} and {}; this run has "
               "{} with gradient_accumulation_steps={} and {} (global batch {} unchanged)",
               processes(m.world_size), m.gradient_accumulation_steps, optimizer_layout(m.optimizer_shards),
               processes(topology.world_size), layout.gradient_accumulation_steps, optimizer_layout(shards),
               m.global_batch);
}

} // namespace shadowgrad::checkpoint
