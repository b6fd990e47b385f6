#pragma once
// Records LibTorch's per-op profile of a window of optimizer steps into a chrome://tracing file
// (config key profiler=trace). bench/trace_summary.py turns the file into a per-op table.
#include <cstdint>
#include <memory>
#include <string>

namespace torch::autograd::profiler {
struct RecordProfile;
}

namespace shadowgrad::train {

class StepProfiler {
 public:
  // Profiles steps [first, first + count) (0-based) into `path`; count 0 profiles nothing.
  StepProfiler(std::string path, int64_t first, int64_t count);
  ~StepProfiler();
  StepProfiler(const StepProfiler&) = delete;
  StepProfiler& operator=(const StepProfiler&) = delete;

  void before_step(int64_t step);
  // Ends the window after its last step: the trace is written then, not at exit.
  void after_step(int64_t step);

 private:
  std::string path_;
  int64_t first_, count_;
  std::unique_ptr<torch::autograd::profiler::RecordProfile> recording_;
};

} // namespace shadowgrad::train
