#pragma once
// The steps from the start point to the last one. Each step is followed, in this order, by its evaluation (when
// due), its metrics.jsonl and console lines, the non-finite check, and, between steps, a checkpoint when one is due
// or the run is stopping. A signal (on any process) stops every process at the same step, after its checkpoint.
//
//   StartPoint start = open_run(...);
//   BatchSizePolicy policy(batches, continue_batch(start, ...));
//   RunSummary summary = run_steps(cfg, step, evaluator, meter, signals, start, device, policy);
//
// Rank 0 (the one with the run directory) writes this run's config.yml and appends to metrics.jsonl. Throws
// InterruptedError when stopped by a signal, NonFiniteError (train/NonFiniteGuard.h) after too many non-finite steps.
#include <c10/core/Device.h>

#include "train/Training.h"

namespace shadowgrad::memory {
class MemoryMeter;
}

namespace shadowgrad::train {

class BatchSizePolicy;
class Evaluator;
class StopSignals;
class TrainStep;
struct StartPoint;

RunSummary run_steps(const config::Config& cfg, TrainStep& step, Evaluator& evaluator, memory::MemoryMeter& meter,
                     const StopSignals& signals, StartPoint& start, c10::Device device, BatchSizePolicy& policy);

} // namespace shadowgrad::train
