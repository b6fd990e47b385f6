#pragma once
// Records LibTorch's per-op profile of a window of optimizer steps into a chrome://tracing file
// (config key profiler=trace), each op with its input shapes ("args": {"shapes": [[M,K],[K,N]]}).
// bench/trace_summary.py turns the file into a per-op table; bench/step_budget.py into a step-time budget.
//
//   StepProfiler profiler(run_dir + "/profile.trace.json", /*first=*/1, /*count=*/1);
//   for (...) { profiler.before_step(s); run_step(s); profiler.after_step(s); }
#include <cstdint>
#include <string>

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
  void finish();

  std::string path_;
  int64_t first_, count_;
  bool recording_ = false;
};

} // namespace shadowgrad::train
