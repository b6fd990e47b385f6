#include "config/GlobalBatch.h"

#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "config/BatchSizeSchedule.h"
#include "util/Errors.h"

namespace shadowgrad::config {
namespace {

// The per_device_batch_size values that split `per_process` sequences into whole microbatches.
std::vector<int64_t> divisors(int64_t per_process) {
  std::vector<int64_t> small, large;
  for (int64_t d = 1; d * d <= per_process; ++d) {
    if (per_process % d != 0) continue;
    small.push_back(d);
    if (d != per_process / d) large.insert(large.begin(), per_process / d);
  }
  small.insert(small.end(), large.begin(), large.end());
  return small;
}

// batch_size_schedule: its first batch is the run's global_batch_size (K is derived from it below, and from each later
// batch at its step), and every point must split into whole microbatches on every process.
void resolve_schedule(Config& cfg, int64_t world_size) {
  const BatchSizeSchedule schedule = BatchSizeSchedule::parse(cfg.batch_size_schedule);
  if (schedule.empty()) return;
  if (cfg.global_batch_size != 0 && cfg.global_batch_size != schedule.first())
    throw ConfigError(fmt::format("global_batch_size={} but batch_size_schedule starts at {} ('{}'); the schedule sets "
                                  "the global batch: leave global_batch_size out",
                                  cfg.global_batch_size, schedule.first(), schedule.points().front().text));
  cfg.global_batch_size = schedule.first();
  const int64_t per_k = cfg.per_device_batch_size == kAuto ? world_size : cfg.per_device_batch_size * world_size;
  for (const auto& p : schedule.points())
    if (p.batch % per_k != 0)
      throw ConfigError(fmt::format("batch_size_schedule entry '{}': a global batch of {} sequences does not split into "
                                    "{}WORLD_SIZE={}{}; make every batch of the schedule a multiple of {}",
                                    p.text, p.batch,
                                    cfg.per_device_batch_size == kAuto
                                        ? std::string()
                                        : fmt::format("per_device_batch_size={} x ", cfg.per_device_batch_size),
                                    world_size, cfg.per_device_batch_size == kAuto ? "" : " microbatches", per_k));
}

// batch_size_policy=gns doubles from the starting batch up to global_batch_size_max.
void check_policy_limit(const Config& cfg, int64_t world_size) {
  if (cfg.batch_size_policy != BatchSizePolicy::gns || cfg.global_batch_size_max == 0) return;
  const int64_t start = cfg.global_batch_size > 0 ? cfg.global_batch_size : cfg.local_batch() * world_size;
  if (cfg.per_device_batch_size != kAuto && cfg.global_batch_size_max < start)
    throw ConfigError(fmt::format("global_batch_size_max={} is below the starting global batch of {} sequences "
                                  "(batch_size_policy=gns only grows it)",
                                  cfg.global_batch_size_max, start));
}

} // namespace

void derive_accumulation_steps(Config& cfg, int64_t world_size) {
  resolve_schedule(cfg, world_size);
  check_policy_limit(cfg, world_size);
  const int64_t gbs = cfg.global_batch_size;
  if (gbs == 0) return;
  if (cfg.per_device_batch_size == kAuto) {  // K follows once the trainer has chosen it (train/MicrobatchFit.h)
    if (gbs % world_size != 0)
      throw ConfigError(fmt::format("per_device_batch_size=auto: global_batch_size={} is not a multiple of "
                                    "WORLD_SIZE={}, so no microbatch divides it",
                                    gbs, world_size));
    if (cfg.given_keys.count("gradient_accumulation_steps"))
      throw ConfigError("per_device_batch_size=auto derives gradient_accumulation_steps from global_batch_size and the "
                        "microbatch it picks; do not give gradient_accumulation_steps too");
    return;
  }
  const int64_t pdbs = cfg.per_device_batch_size;
  const int64_t per_step = pdbs * world_size;
  if (gbs % per_step != 0) {
    const std::string what =
        fmt::format("global_batch_size={} is not a multiple of per_device_batch_size={} x WORLD_SIZE={}", gbs, pdbs,
                    world_size);
    if (gbs % world_size != 0)
      throw ConfigError(fmt::format("{}; no per_device_batch_size divides it: make global_batch_size a multiple of "
                                    "WORLD_SIZE={}",
                                    what, world_size));
    throw ConfigError(fmt::format("{}; per_device_batch_size values that divide it: {}", what,
                                  fmt::join(divisors(gbs / world_size), ", ")));
  }
  const int64_t k = gbs / per_step;
  if (cfg.given_keys.count("gradient_accumulation_steps") && cfg.gradient_accumulation_steps != k)
    throw ConfigError(fmt::format("gradient_accumulation_steps={} was given, but global_batch_size={} / "
                                  "(per_device_batch_size={} x WORLD_SIZE={}) makes it {}; give one of the two",
                                  cfg.gradient_accumulation_steps, gbs, pdbs, world_size, k));
  cfg.gradient_accumulation_steps = k;
}

std::string without_derived_k(const std::string& config_yaml) {
  const bool derived = config_yaml.find("\nglobal_batch_size: ") != std::string::npos &&
                       config_yaml.find("\nglobal_batch_size: 0\n") == std::string::npos;
  if (!derived) return config_yaml;
  std::istringstream in(config_yaml);
  std::string out;
  for (std::string line; std::getline(in, line);)
    if (line.rfind("gradient_accumulation_steps:", 0) != 0) out += line + "\n";
  return out;
}

} // namespace shadowgrad::config
