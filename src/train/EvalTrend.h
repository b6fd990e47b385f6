#pragma once
// Watching eval_loss for overfitting: the best evaluation so far, and a warning when eval_loss has risen at
// early_warning_evals consecutive evaluations (each higher than the one before), naming the best step. A resumed run
// starts from the evaluations metrics.jsonl kept, so it warns where a straight run would.
//
//   EvalTrend trend(cfg.early_warning_evals, start.earlier.evaluations);
//   if (auto warning = trend.add(step, eval_loss)) spdlog::warn("{}", *warning);
//   trend.best_step();   // -1 before the first finite eval_loss
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint/MetricsTail.h"

namespace shadowgrad::train {

class EvalTrend {
 public:
  // `warn_after` rises in a row make a warning; 0 never warns. `earlier`: the evaluations before this process.
  EvalTrend(int64_t warn_after, const std::vector<checkpoint::Evaluation>& earlier);

  // Records an evaluation; returns the warning when this one makes `warn_after` (or more) rises in a row.
  std::optional<std::string> add(int64_t step, double eval_loss);
  int64_t best_step() const { return best_ ? best_->step : -1; }
  double best_loss() const;

 private:
  int64_t warn_after_;
  std::vector<checkpoint::Evaluation> seen_;
  std::optional<checkpoint::Evaluation> best_;
  int64_t rises_ = 0;  // consecutive evaluations each above the one before
};

} // namespace shadowgrad::train
