#include "train/StepProfiler.h"

#include <spdlog/spdlog.h>
#include <torch/csrc/autograd/profiler_legacy.h>

namespace shadowgrad::train {

StepProfiler::StepProfiler(std::string path, int64_t first, int64_t count)
    : path_(std::move(path)), first_(first), count_(count) {}

StepProfiler::~StepProfiler() = default;

void StepProfiler::before_step(int64_t step) {
  if (count_ > 0 && step == first_ && !recording_) {
    spdlog::info("profiling steps {}..{} into {}", first_ + 1, first_ + count_, path_);
    recording_ = std::make_unique<torch::autograd::profiler::RecordProfile>(path_);
  }
}

void StepProfiler::after_step(int64_t step) {
  if (recording_ && step + 1 == first_ + count_) recording_.reset();  // writes the file
}

} // namespace shadowgrad::train
