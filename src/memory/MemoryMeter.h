#pragma once
// Peak memory per optimizer step, on whichever device trains: on CPU it reads the TrackingAllocator,
// on CUDA (only in a build against CUDA LibTorch) the CUDA caching allocator's statistics.
//
//   MemoryMeter meter(device);
//   for (...) {
//     meter.begin_step();                 // a new peak window starts at the current level
//     run_step();
//     int64_t step_peak = meter.end_step();
//   }
//   meter.run_peak();  meter.max_step_peak();
#include <cstdint>
#include <string>

#include <c10/core/Device.h>

namespace shadowgrad::memory {

class MemoryMeter {
 public:
  // On CPU, installs the TrackingAllocator if nobody has yet (late installs under-count).
  explicit MemoryMeter(c10::Device device);

  int64_t current_bytes() const;
  // Peak since construction or since the last begin_step().
  int64_t window_peak_bytes() const;

  void begin_step();
  // The step's peak. Also folds it into run_peak() and max_step_peak().
  int64_t end_step();

  // Highest level seen since construction, including set-up before the first step.
  int64_t run_peak() const;
  int64_t max_step_peak() const { return measured() ? max_step_peak_ : -1; }
  // False on CUDA when the build has no CUDA statistics: every figure is then -1.
  bool measured() const;
  // "cpu: tracking allocator" or "cuda:0: CUDA caching allocator".
  std::string source() const;

 private:
  c10::Device device_;
  int64_t run_peak_ = 0, max_step_peak_ = 0;
};

// Whether this binary was built with the CUDA statistics path (SHADOWGRAD_WITH_CUDA).
bool built_with_cuda_stats();

} // namespace shadowgrad::memory
