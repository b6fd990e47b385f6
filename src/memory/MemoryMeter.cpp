#include "memory/MemoryMeter.h"

#include <algorithm>

#include <spdlog/spdlog.h>

#include "memory/TrackingAllocator.h"

#ifdef SHADOWGRAD_WITH_CUDA
#include <c10/core/CachingDeviceAllocator.h>
#endif

namespace shadowgrad::memory {
namespace {

#ifdef SHADOWGRAD_WITH_CUDA
// Bytes held by live tensors on `device` (not the allocator's cached, unused blocks). c10's interface to the CUDA
// caching allocator, which libc10_cuda registers when hardware=cuda loads it (accumulate/CudaLibrary.h).
auto cuda_allocated(c10::Device device) {
  const auto stats = c10::getDeviceAllocator(c10::kCUDA)->getDeviceStats(device.index() < 0 ? 0 : device.index());
  return stats.allocated_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)];
}
#endif

} // namespace

bool built_with_cuda_stats() {
#ifdef SHADOWGRAD_WITH_CUDA
  return true;
#else
  return false;
#endif
}

MemoryMeter::MemoryMeter(c10::Device device) : device_(device) {
  if (device_.is_cuda() && !built_with_cuda_stats())
    spdlog::warn("built without SHADOWGRAD_WITH_CUDA: peak memory is not measured on {}", device_.str());
  if (device_.is_cpu() && !TrackingAllocator::installed()) {
    spdlog::warn("the tracking allocator was installed late: tensors allocated earlier are not counted");
    TrackingAllocator::install();
  }
  run_peak_ = window_peak_bytes();
}

int64_t MemoryMeter::current_bytes() const {
#ifdef SHADOWGRAD_WITH_CUDA
  if (device_.is_cuda()) return cuda_allocated(device_).current;
#endif
  if (!measured()) return -1;
  return TrackingAllocator::get().current_bytes();
}

int64_t MemoryMeter::window_peak_bytes() const {
#ifdef SHADOWGRAD_WITH_CUDA
  if (device_.is_cuda()) return cuda_allocated(device_).peak;
#endif
  if (!measured()) return -1;
  return TrackingAllocator::get().peak_bytes();
}

void MemoryMeter::begin_step() {
  run_peak_ = std::max(run_peak_, window_peak_bytes());
#ifdef SHADOWGRAD_WITH_CUDA
  if (device_.is_cuda()) {
    c10::getDeviceAllocator(c10::kCUDA)->resetPeakStats(device_.index() < 0 ? 0 : device_.index());
    return;
  }
#endif
  if (device_.is_cpu()) TrackingAllocator::get().reset_peak();
}

int64_t MemoryMeter::end_step() {
  if (!measured()) return -1;
  const int64_t peak = window_peak_bytes();
  run_peak_ = std::max(run_peak_, peak);
  max_step_peak_ = std::max(max_step_peak_, peak);
  return peak;
}

int64_t MemoryMeter::run_peak() const { return measured() ? std::max(run_peak_, window_peak_bytes()) : -1; }

bool MemoryMeter::measured() const { return device_.is_cpu() || built_with_cuda_stats(); }

std::string MemoryMeter::source() const {
  if (!measured()) return device_.str() + ": not measured (no CUDA statistics in this build)";
  if (device_.is_cuda()) return device_.str() + ": CUDA caching allocator";
  return "cpu: tracking allocator";
}

} // namespace shadowgrad::memory
