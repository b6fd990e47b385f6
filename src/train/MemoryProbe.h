#pragma once
// Memory reports for the trainer: after a run, and `trainer CONFIG --memory-report`, which runs one
// optimizer step and reports without training further or writing a run directory (as MaxText's AOT
// memory report answers "will it fit?" without a training run).
//
//   memory::MemoryReport r = probe_memory(cfg);
//   std::cout << memory::format_table(r) << memory::to_json(r);
#include <cstdint>

#include "memory/MemoryReport.h"

namespace shadowgrad::config {
struct Config;
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

} // namespace shadowgrad::train
