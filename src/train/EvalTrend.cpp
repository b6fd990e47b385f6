#include "train/EvalTrend.h"

#include <cmath>
#include <limits>

#include <fmt/format.h>

namespace shadowgrad::train {

EvalTrend::EvalTrend(int64_t warn_after, const std::vector<checkpoint::Evaluation>& earlier) : warn_after_(warn_after) {
  for (const auto& e : earlier) add(e.step, e.eval_loss);
}

double EvalTrend::best_loss() const { return best_ ? best_->eval_loss : std::numeric_limits<double>::quiet_NaN(); }

std::optional<std::string> EvalTrend::add(int64_t step, double eval_loss) {
  if (!std::isfinite(eval_loss)) return std::nullopt;  // written as null: neither a rise nor a best
  const bool rose = !seen_.empty() && eval_loss > seen_.back().eval_loss;
  rises_ = rose ? rises_ + 1 : 0;
  seen_.push_back({step, eval_loss});
  if (!best_ || eval_loss < best_->eval_loss) best_ = checkpoint::Evaluation{step, eval_loss};
  if (warn_after_ <= 0 || rises_ < warn_after_) return std::nullopt;
  std::string path;
  for (size_t i = seen_.size() - size_t(rises_) - 1; i < seen_.size(); ++i)
    path += fmt::format("{}{:.4f} (step {})", path.empty() ? "" : " -> ", seen_[i].eval_loss, seen_[i].step);
  return fmt::format("eval_loss has risen at {} evaluations in a row: {}; the best was {:.4f} at step {} "
                     "(overfitting? keep_best_checkpoint=true keeps that step's checkpoint, export_hf --best exports "
                     "it; fewer num_epochs or a lower learning_rate trains less)",
                     rises_, path, best_->eval_loss, best_->step);
}

} // namespace shadowgrad::train
