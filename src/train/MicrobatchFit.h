#pragma once
// per_device_batch_size=auto: the largest microbatch that divides global_batch_size / WORLD_SIZE and whose predicted
// step peak fits memory_budget_mib; with an explicit per_device_batch_size and memory_budget_mib > 0, the check that
// it fits. Rank 0 probes (probe_microbatches in train/MemoryProbe.h: one forward + backward at microbatch 1 and 2,
// no update) and decides; every rank uses its decision. A microbatch that does not fit is an InputError before
// training, giving the estimate and what grad_dtype=bfloat16, adam_state_dtype=bfloat16 and remat_policy=full would
// each save on this model.
//
//   fit_microbatch(cfg, model, *source, device, dp.get(), world);   // sets cfg.per_device_batch_size, then K
//   // log: pdbs=auto: 4 (predicted peak 1210 MiB of 1300; 121 MiB per sequence; K=2)
//
// The budget is in the tracking allocator's units: tensor bytes (peak_mem_bytes). memory_budget_mib=0 means 90 % of
// what this process may use, i.e. its resident memory plus its share (1 / LOCAL_WORLD_SIZE) of the headroom under
// its cgroup limit or MemAvailable (memory/MemoryBudget.h), less what it holds outside tensors (resident minus
// tracked bytes: code, allocator cache, BLAS scratch), which the tracked peak does not count.
#include <cstdint>

#include <c10/core/Device.h>

#include "model/Decoder.h"

namespace shadowgrad::config {
struct Config;
}
namespace shadowgrad::data {
class DataSource;
}
namespace shadowgrad::distributed {
class DataParallel;
}

namespace shadowgrad::train {

// Whether fit_microbatch probes: per_device_batch_size is auto or memory_budget_mib > 0. Rank 0 alone then runs the
// whole model, so ZeRO-3 builds it whole first (train/ModelBuild.h).
bool probes_microbatch(const config::Config& cfg);

// Does nothing unless probes_microbatch(cfg).
void fit_microbatch(config::Config& cfg, model::Decoder& model, const data::DataSource& source, c10::Device device,
                    distributed::DataParallel* dp, int64_t world_size);

} // namespace shadowgrad::train
