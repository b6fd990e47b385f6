#pragma once
// Memory reports for the trainer: after a run, and `trainer CONFIG --memory-report`, which runs one
// optimizer step and reports without training further or writing a run directory (as MaxText's AOT
// memory report answers "will it fit?" without a training run).
//
//   memory::MemoryReport r = probe_memory(cfg);
//   std::cout << memory::format_table(r) << memory::to_json(r);
//
// And the probe behind per_device_batch_size=auto (train/MicrobatchFit.h): one forward + backward at microbatch 1 and
// 2, without an update.
//
//   MicrobatchProbe p = probe_microbatches(cfg, model, *source, device);
//   p.model.predicted_peak(4);   p.estimate.weights ...
#include <cstdint>

#include <c10/core/Device.h>

#include "memory/BatchFit.h"
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
