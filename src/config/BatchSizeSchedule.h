#pragma once
// batch_size_schedule: the global batch (in sequences) as a function of training progress, e.g. "0:32,2M:64,8M:128":
// 32 sequences per step from the start, 64 once 2 M tokens have been trained on, 128 from 8 M. A point is
// AT:BATCH with AT a token count (suffixes k, M, B: 10^3, 10^6, 10^9) or a step (suffix s, e.g. "500s:64"); all points
// of a schedule use one of the two. Tokens are counted as sequences x max_target_length, so the step at which a point
// takes effect is known before the step runs: the first step that starts at or after it.
//
//   auto s = BatchSizeSchedule::parse("0:32,2M:64");   // ConfigError naming the entry when it is malformed
//   s.batch_at(/*step=*/10, /*tokens=*/2'000'000)      // 64
#include <cstdint>
#include <string>
#include <vector>

namespace shadowgrad::config {

struct BatchSizePoint {
  int64_t at = 0;        // tokens, or a 0-based step when in_steps
  int64_t batch = 0;     // global batch in sequences from `at` on
  std::string text;      // the entry as written, for messages
};

class BatchSizeSchedule {
 public:
  // "" is the empty schedule. Throws ConfigError naming the entry (and batch_size_schedule) when an entry is not
  // AT:BATCH, AT has a bad suffix, the first point is not at 0, points are not in increasing order, units mix, a batch
  // is below 1, or a batch is not an integer multiple of the one before (which also rules out a shrinking batch).
  static BatchSizeSchedule parse(const std::string& text);

  bool empty() const { return points_.empty(); }
  bool in_steps() const { return in_steps_; }
  const std::vector<BatchSizePoint>& points() const { return points_; }
  int64_t first() const { return points_.front().batch; }
  int64_t largest() const { return points_.back().batch; }
  // The index of the point in effect for a step that starts at 0-based `step` after `tokens` trained tokens.
  size_t point_at(int64_t step, int64_t tokens) const;
  int64_t batch_at(int64_t step, int64_t tokens) const { return points_[point_at(step, tokens)].batch; }

 private:
  std::vector<BatchSizePoint> points_;
  bool in_steps_ = false;
};

} // namespace shadowgrad::config
