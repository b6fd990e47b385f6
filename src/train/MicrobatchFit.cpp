#include "train/MicrobatchFit.h"

#include <algorithm>
#include <string>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "config/Config.h"
#include "config/GlobalBatch.h"
#include "data/DataSource.h"
#include "distributed/DataParallel.h"
#include "distributed/Environment.h"
#include "memory/BatchFit.h"
#include "memory/MemoryBudget.h"
#include "memory/MemoryMeter.h"
#include "train/MemoryProbe.h"
#include "util/Errors.h"

namespace shadowgrad::train {
namespace {

constexpr double kMiB = 1024.0 * 1024.0;

struct Budget {
  int64_t bytes = 0;
  std::string source;
};

// memory_budget_mib, or 0: 90 % of what this process may use, its resident memory now plus its share of the
// headroom, less what it holds outside tensors (code, allocator cache, BLAS scratch: resident minus tracked bytes,
// about 190 MiB here), which the tracking allocator's peak does not count.
Budget memory_budget(const config::Config& cfg, int64_t held_now) {
  if (cfg.memory_budget_mib > 0)
    return {int64_t(cfg.memory_budget_mib * kMiB), fmt::format("memory_budget_mib={}", cfg.memory_budget_mib)};
  const memory::MemoryHeadroom headroom = memory::read_headroom();
  if (headroom.bytes < 0)
    throw InputError("memory_budget_mib=0 needs /proc/meminfo or a cgroup memory limit, and neither could be read; "
                     "give memory_budget_mib");
  const int64_t sharing = distributed::ProcessEnvironment::from_environment().local_world_size;
  const int64_t resident = std::max(memory::resident_bytes(), held_now);
  const int64_t outside_tensors = resident - held_now;
  const auto bytes = int64_t(0.9 * double(resident + headroom.bytes / sharing)) - outside_tensors;
  return {bytes, fmt::format("90 % of {} MiB resident + {}{}, less {} MiB outside tensors", resident >> 20,
                             headroom.source, sharing > 1 ? fmt::format(" / {} processes", sharing) : "",
                             outside_tensors >> 20)};
}

// Rank 0's decision: the microbatch to train with. Throws InputError when none fits.
int64_t decide(const config::Config& cfg, model::Decoder& model, const data::DataSource& source, c10::Device device,
               int64_t world_size) {
  const bool automatic = cfg.per_device_batch_size == config::kAuto;
  if (automatic && (cfg.global_batch_size <= 0 || cfg.global_batch_size % world_size != 0))
    throw ConfigError(fmt::format("per_device_batch_size=auto needs a global_batch_size that WORLD_SIZE={} divides "
                                  "(global_batch_size={})",
                                  world_size, cfg.global_batch_size));
  const Budget budget = memory_budget(cfg, memory::MemoryMeter(device).current_bytes());
  const MicrobatchProbe probe = probe_microbatches(cfg, model, source, device, world_size);
  const int64_t local = automatic ? cfg.global_batch_size / world_size : cfg.per_device_batch_size;
  const auto pick = memory::largest_fitting(probe.model, local, budget.bytes);
  const int64_t wanted = automatic ? (pick ? pick->microbatch : 1) : cfg.per_device_batch_size;
  const int64_t predicted = probe.model.predicted_peak(wanted);
  if (predicted > budget.bytes) {
    memory::MemoryEstimate estimate = probe.estimate;
    estimate.save_remat_full = measure_remat_full_saving(cfg, model, source, device);
    std::string message = memory::does_not_fit_message(estimate, wanted, predicted, budget.bytes, budget.source);
    if (pick) message += fmt::format(" per_device_batch_size={} would fit (predicted peak {}).", pick->microbatch,
                                     memory::mib(pick->predicted_peak));
    throw InputError(message);
  }
  if (automatic)
    spdlog::info("pdbs=auto: {} (predicted peak {} MiB of {}; {} MiB per sequence; K={}) | budget: {}", wanted,
                 memory::mib_number(predicted), memory::mib_number(budget.bytes), memory::mib_number(probe.model.per_sequence), local / wanted,
                 budget.source);
  else
    spdlog::info("per_device_batch_size={} fits: predicted peak {} MiB of {}; {} MiB per sequence | budget: {}",
                 wanted, memory::mib_number(predicted), memory::mib_number(budget.bytes), memory::mib_number(probe.model.per_sequence), budget.source);
  return wanted;
}

} // namespace

bool probes_microbatch(const config::Config& cfg) {
  return cfg.per_device_batch_size == config::kAuto || cfg.memory_budget_mib > 0;
}

void fit_microbatch(config::Config& cfg, model::Decoder& model, const data::DataSource& source, c10::Device device,
                    distributed::DataParallel* dp, int64_t world_size) {
  const bool automatic = cfg.per_device_batch_size == config::kAuto;
  if (!probes_microbatch(cfg)) return;
  const int rank = dp ? dp->rank() : 0;
  int64_t chosen = 0;
  std::string refusal;
  if (rank == 0) {
    try {
      chosen = decide(cfg, model, source, device, world_size);
    } catch (const InputError& e) {
      refusal = e.what();  // told to the others as microbatch 0, so that nobody waits for a decision
    }
  }
  if (dp) chosen = int64_t(dp->global_sum(rank == 0 ? double(chosen) : 0.0));
  if (!refusal.empty()) throw InputError(refusal);
  if (chosen < 1) throw InputError("rank 0 found no microbatch that fits the memory budget; its message says why");
  if (rank != 0 && automatic) spdlog::info("pdbs=auto: {} (rank 0's decision)", chosen);
  cfg.per_device_batch_size = chosen;
  config::derive_accumulation_steps(cfg, world_size);
}

} // namespace shadowgrad::train
