#pragma once
// Cutting metrics.jsonl back to a checkpoint's step when a run resumes, and reading back what the kept lines say
// (a run that is finished from disk, without training, takes its summary from them).
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace shadowgrad::checkpoint {

// One line of metrics.jsonl that holds an eval_loss.
struct Evaluation {
  int64_t step;
  double eval_loss;  // NaN when it was written as null
};

struct MetricsTail {
  double first_loss, last_loss;  // NaN when absent
  int64_t steps = 0;             // lines kept
  double tokens = 0;             // sum of "tokens" over the kept lines
  double seconds = 0;            // sum of "step_time_s"
  double peak_mem_bytes = -1;    // largest "peak_mem_bytes"; -1 when absent
  double eval_loss = std::numeric_limits<double>::quiet_NaN();  // the last "eval_loss"; NaN when none
  std::vector<Evaluation> evaluations;                           // every kept line's eval_loss, in step order
};

// Drops the lines of metrics.jsonl whose "step" is past `step` (and a torn last line), atomically, so a
// resumed run has each step once. Returns what the kept lines say (for summary.json).
MetricsTail truncate_metrics(const std::string& path, int64_t step);

// The evaluations metrics.jsonl holds (whole lines only); empty when the file is absent. Reads, never writes: a
// trainer may be appending to it.
std::vector<Evaluation> read_evaluations(const std::string& path);

// The evaluation with the lowest finite eval_loss (the earliest of equals); nullptr when none is finite.
const Evaluation* best_evaluation(const std::vector<Evaluation>& evaluations);

} // namespace shadowgrad::checkpoint
