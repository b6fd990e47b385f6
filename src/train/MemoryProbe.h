#pragma once
// Memory reports for the trainer: after a run, and `trainer CONFIG --memory-report`, which runs one
// optimizer step and reports without training further or writing a run directory (as MaxText's AOT
// memory report answers "will it fit?" without a training run).
//
//   memory::MemoryReport r = probe_memory(cfg);
//   std::cout << memory::format_table(r) << memory::to_json(r);
//
// Before the model is built, from the config alone (nothing allocated): what the run will hold at the least, and the
// refusal (exit 2) of a run whose footprint is over what this process may take.
//
//   refuse_what_cannot_fit(cfg, device, world);              // throws InputError naming the figure and what would fit
//   memory::Footprint f = footprint_from_config(cfg, world);
//
// And the probe behind per_device_batch_size=auto (train/MicrobatchFit.h): one forward + backward at microbatch 1 and
// 2, without an update.
//
//   MicrobatchProbe p = probe_microbatches(cfg, model, *source, device);
//   p.model.predicted_peak(4);   p.estimate.weights ...
#include <cstdint>

#include <c10/core/Device.h>

#include "memory/BatchFit.h"
#include "memory/Footprint.h"
#include "memory/MemoryReport.h"
#include "model/Decoder.h"

namespace shadowgrad::config {
struct Config;
}
namespace shadowgrad::data {
class DataSource;
}
namespace shadowgrad::memory {
class MemoryMeter;
}

namespace shadowgrad::train {

class TrainStep;

// The report for a TrainStep's model, optimizer and shadow tree, with the meter's peaks over `steps`.
memory::MemoryReport memory_report(TrainStep& step, const memory::MemoryMeter& meter, int64_t steps);

// Builds the model, runs step 0 (one optimizer step) and reports. Writes no files. torch::optim
// creates optimizer state during that first update, so the step's peak can be below a later step's.
memory::MemoryReport probe_memory(const config::Config& cfg);

// The run's footprint, lower bounds all: the weights as stored (a LoRA run's frozen base in weight_dtype, its fp32
// adapters), the trained set's shadow tree (grad_dtype) and optimizer state (optimizer_state_bytes_after_update, its
// 1/world_size slice with shard_optimizer_over_data), hoist_weight_cast's compute-dtype copies of the trained
// weights, and what backward keeps of one microbatch under remat_policy (per_device_batch_size=auto counts as 1).
memory::Footprint footprint_from_config(const config::Config& cfg, int64_t world_size);

// On a CPU device: throws InputError when footprint_from_config(cfg) is over what this process may take (the headroom
// under its cgroup limit or MemAvailable, memory/MemoryBudget.h, shared by LOCAL_WORLD_SIZE processes). The message
// gives the figure, its parts, and which lean settings (LoRA, a bf16 base, bf16 shadow and moments, remat) would fit.
// Does nothing on CUDA (the headroom read is the host's) or when no headroom can be read.
void refuse_what_cannot_fit(const config::Config& cfg, c10::Device device, int64_t world_size);

struct MicrobatchProbe {
  memory::MicrobatchModel model;    // the predicted step peak per microbatch size
  memory::MemoryEstimate estimate;  // what that peak is made of; save_remat_full stays -1 (see below)
};

// Runs one forward + backward of `model` at microbatch 1 and at 2 through a TrainStep of its own, each measured by a
// MemoryMeter of its own, and fits MicrobatchModel to the two peaks plus the optimizer state that the first update
// will create (optimizer_state_bytes_after_update; with shard_optimizer_over_data its 1/world_size slice). Nothing
// is updated: the weights and any optimizer are untouched, and the probe's shadow tree is freed. Data: the first
// examples of step 0, read without changing the source.
MicrobatchProbe probe_microbatches(const config::Config& cfg, model::Decoder& model, const data::DataSource& source,
                                   c10::Device device, int64_t world_size);

// What remat_policy=full would save at microbatch 1 on `model`, measured the same way (0 if it is already full).
int64_t measure_remat_full_saving(const config::Config& cfg, model::Decoder& model, const data::DataSource& source,
                                  c10::Device device);

} // namespace shadowgrad::train
