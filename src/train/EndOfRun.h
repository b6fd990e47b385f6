#pragma once
// The files a finished run leaves in its directory: summary.json, memory_report.json (also printed) and loss.png.
//
//   if (start.state.step == cfg.steps) return finish_from_disk(start, step, meter);   // nothing left to train
//   ...
//   write_end_of_run_files(*start.dir, summary, memory_report(step, meter, cfg.steps));
#include "memory/MemoryReport.h"
#include "train/StartPoint.h"
#include "train/Training.h"

namespace shadowgrad::memory {
class MemoryMeter;
}

namespace shadowgrad::train {

void write_end_of_run_files(const RunDirectory& dir, const RunSummary& summary, const memory::MemoryReport& mem);

// A run whose last step is checkpointed but which stopped before its end-of-run files (a signal during the last
// step): finishes it from what is on disk, metrics.jsonl and the checkpoint, without training.
RunSummary finish_from_disk(const StartPoint& start, TrainStep& step, const memory::MemoryMeter& meter);

} // namespace shadowgrad::train
