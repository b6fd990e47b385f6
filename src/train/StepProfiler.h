#pragma once
// Records LibTorch's per-op profile of a window of optimizer steps into a chrome://tracing file
// (config key profiler=trace), each op with its input shapes and what it moved, which no host changes:
//   "args": {"shapes": [[M,K],[K,N]], "in": ["f32", "f32"], "out": ["f32"], "bytes": [in_bytes, out_bytes]}
// ("in"/"out": the dtypes of its tensor inputs and outputs; bytes: their elements times element sizes).
// bench/trace_summary.py turns the file into a per-op table; bench/step_budget.py into a step-time budget with op
// counts and bytes per step.
//
//   StepProfiler profiler(run_dir + "/profile.trace.json", /*first=*/1, /*count=*/1);
//   for (...) { profiler.before_step(s); run_step(s); profiler.after_step(s); }
#include <cstdint>
#include <memory>
#include <string>

namespace shadowgrad::train {

struct OpsMoved;

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
  std::shared_ptr<OpsMoved> moved_;  // the bytes and dtypes of each recorded op
};

} // namespace shadowgrad::train
