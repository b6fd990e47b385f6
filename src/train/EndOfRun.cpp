#include "train/EndOfRun.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include <spdlog/spdlog.h>

#include "memory/MemoryMeter.h"
#include "train/LossPlot.h"
#include "train/MemoryProbe.h"
#include "train/MetricsWriter.h"
#include "util/File.h"

namespace shadowgrad::train {

void write_end_of_run_files(const RunDirectory& dir, const RunSummary& summary, const memory::MemoryReport& mem) {
  write_file_atomically(dir.file("memory_report.json"), memory::to_json(mem));
  std::fputs(memory::format_table(mem).c_str(), stdout);
  JsonNumbers fields{{"steps", double(summary.steps)},
                     {"final_loss", summary.final_loss},
                     {"first_loss", summary.first_loss},
                     {"avg_tokens_per_s", summary.avg_tokens_per_s},
                     {"train_seconds", summary.seconds},
                     {"peak_mem_bytes", double(summary.peak_mem_bytes)},
                     {"eval_loss", summary.eval_loss}};  // null when no evaluation ran
  if (!std::isnan(summary.gns_tokens)) fields.push_back({"gns_tokens", summary.gns_tokens});
  write_file_atomically(dir.file("summary.json"), to_json(fields) + "\n");
  plot_loss_if_possible(dir.path());
}

RunSummary finish_from_disk(const StartPoint& start, TrainStep& step, const memory::MemoryMeter& meter) {
  RunSummary summary;
  summary.run_dir = start.dir ? start.dir->path() : "";
  summary.steps = start.state.step;
  summary.first_loss = start.earlier.first_loss;
  summary.final_loss = start.earlier.last_loss;
  summary.seconds = start.earlier.seconds;
  summary.avg_tokens_per_s = start.earlier.seconds > 0 ? start.earlier.tokens / start.earlier.seconds : 0;
  // The training steps' peaks are in metrics.jsonl; this process's own peak covers loading the checkpoint.
  summary.peak_mem_bytes = std::max(int64_t(start.earlier.peak_mem_bytes), meter.run_peak());
  summary.eval_loss = start.earlier.eval_loss;
  if (!start.dir) return summary;
  const bool finalised = std::filesystem::exists(start.dir->file("summary.json"));
  spdlog::info("run {} is already complete at step {}{}", start.dir->path(), start.state.step,
               finalised ? "; nothing to do (raise steps to train further)"
                         : "; writing its summary from metrics.jsonl and the checkpoint");
  if (finalised) return summary;
  memory::MemoryReport mem = memory_report(step, meter, start.earlier.steps);
  mem.peak_bytes = summary.peak_mem_bytes;
  mem.peak_step_bytes = int64_t(start.earlier.peak_mem_bytes);
  mem.source += " (step peaks read back from metrics.jsonl)";
  write_end_of_run_files(*start.dir, summary, mem);
  return summary;
}

} // namespace shadowgrad::train
