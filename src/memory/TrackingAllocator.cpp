#include "memory/TrackingAllocator.h"

#include <atomic>

#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/alloc_cpu.h>

namespace shadowgrad::memory {
namespace {
std::atomic<bool> g_installed{false};
} // namespace

TrackingAllocator& TrackingAllocator::get() {
  // Never destroyed: tensors freed during static destruction still find it.
  static auto* instance = new TrackingAllocator();
  return *instance;
}

void TrackingAllocator::install() {
  static std::once_flag once;
  std::call_once(once, [] {
    // Priority above the default (0) so a later default registration cannot displace it.
    c10::SetCPUAllocator(&get(), /*priority=*/1);
    g_installed = true;
  });
}

bool TrackingAllocator::installed() { return g_installed; }

c10::DataPtr TrackingAllocator::allocate(size_t nbytes) const {
  void* data = c10::alloc_cpu(nbytes);  // throws c10::Error on out-of-memory
  {
    std::lock_guard<std::mutex> lock(mutex_);
    sizes_[data] = nbytes;
    current_ += static_cast<int64_t>(nbytes);
    if (current_ > peak_) peak_ = current_;
    ++allocations_;
  }
  // raw_allocate() requires data == context: the context is what the deleter receives.
  return {data, data, &TrackingAllocator::deleter, c10::Device(c10::DeviceType::CPU)};
}

c10::DeleterFnPtr TrackingAllocator::raw_deleter() const { return &TrackingAllocator::deleter; }

void TrackingAllocator::deleter(void* ptr) { get().release(ptr); }

void TrackingAllocator::release(void* ptr) {
  if (!ptr) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = sizes_.find(ptr);
    if (it != sizes_.end()) {
      current_ -= static_cast<int64_t>(it->second);
      sizes_.erase(it);
    }
  }
  c10::free_cpu(ptr);
}

int64_t TrackingAllocator::current_bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return current_;
}

int64_t TrackingAllocator::peak_bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return peak_;
}

void TrackingAllocator::reset_peak() {
  std::lock_guard<std::mutex> lock(mutex_);
  peak_ = current_;
}

int64_t TrackingAllocator::allocations() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return allocations_;
}

} // namespace shadowgrad::memory
