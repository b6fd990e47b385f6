#pragma once
// Linear warmup to the peak, then cosine decay to final_fraction x peak (MaxText's schedule).
// Evaluated once per optimizer step, never per microbatch.
//
//   LrSchedule s(3e-3, /*schedule_steps=*/100, /*warmup_fraction=*/0.1, /*final_fraction=*/0.1);
//   double lr = s(step);   // step is 0-based
#include <cstdint>

namespace shadowgrad::train {

class LrSchedule {
 public:
  LrSchedule(double peak, int64_t schedule_steps, double warmup_fraction, double final_fraction);
  double operator()(int64_t step) const;

 private:
  double peak_, final_fraction_;
  int64_t schedule_steps_, warmup_steps_;
};

} // namespace shadowgrad::train
