#pragma once
// A whole training run, usable without the CLI:
//
//   auto cfg = shadowgrad::config::load_config(path, overrides);
//   shadowgrad::train::Training training(cfg);   // resolves dtype=auto; validates data and device; writes nothing
//   RunSummary summary = training.run();          // creates the run dir, trains, writes metrics
//
// Files in the run directory: config.yml (the resolved config; `trainer <run_dir>/config.yml` reruns it),
// metrics.jsonl (one line per optimizer step, with that step's peak_mem_bytes, and eval_loss/eval_s on evaluation
// steps), memory_report.json (see
// memory/MemoryReport.h), summary.json (written last, only on success) and loss.png (when gnuplot is
// installed).
#include <limits>
#include <memory>
#include <string>

#include <c10/core/Device.h>

#include "config/Config.h"
#include "train/ComputeDtype.h"

namespace shadowgrad::data {
class DataSource;
}

namespace shadowgrad::train {

class Evaluator;

struct RunSummary {
  std::string run_dir;
  int64_t steps = 0;
  double final_loss = 0;
  double first_loss = 0;
  double avg_tokens_per_s = 0;
  double seconds = 0;
  int64_t peak_mem_bytes = -1;  // whole run; -1 when not measured
  double eval_loss = std::numeric_limits<double>::quiet_NaN();  // the last evaluation's; NaN when none ran
  double gns_tokens = std::numeric_limits<double>::quiet_NaN();  // the last gradient noise scale; NaN when none
};

class Training {
 public:
  explicit Training(config::Config cfg);
  ~Training();
  RunSummary run();

 private:
  ComputeDtypeChoice dtype_;  // first: cfg_ holds its resolved value
  config::Config cfg_;
  c10::Device device_;
  std::unique_ptr<data::DataSource> source_;
  std::unique_ptr<Evaluator> evaluator_;  // eval_loss; built (and its data validated) before anything is written
};

} // namespace shadowgrad::train
