#include "memory/TrackingAllocator.h"

#include <algorithm>
#include <atomic>
#include <iterator>
#include <vector>

#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/alloc_cpu.h>

namespace shadowgrad::memory {
namespace {
std::atomic<bool> g_installed{false};

// Smaller blocks come from glibc's arenas without page faults; rounding to pages lets sizes that differ
// by a few bytes share blocks.
constexpr size_t kMinCachedBytes = 64 * 1024;
constexpr size_t kPageBytes = 4096;

size_t capacity_for(size_t nbytes) {
  return nbytes < kMinCachedBytes ? nbytes : (nbytes + kPageBytes - 1) / kPageBytes * kPageBytes;
}
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

c10::DataPtr TrackingAllocator::allocate(size_t nbytes) {
  const size_t capacity = capacity_for(nbytes);
  void* data = nullptr;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto hit = free_.find(capacity);
    if (hit != free_.end()) {
      data = hit->second;
      free_.erase(hit);
      cached_ -= static_cast<int64_t>(capacity);
      ++cache_hits_;
    }
  }
  if (!data) data = c10::alloc_cpu(capacity);  // throws c10::Error on out-of-memory
  {
    std::lock_guard<std::mutex> lock(mutex_);
    live_[data] = Block{nbytes, capacity};
    current_ += static_cast<int64_t>(nbytes);
    if (current_ > peak_) peak_ = current_;
    ++allocations_;
  }
  // raw_allocate() requires data == context: the context is what the deleter receives.
  return {data, data, &TrackingAllocator::deleter, c10::Device(c10::DeviceType::CPU)};
}

c10::DeleterFnPtr TrackingAllocator::raw_deleter() const { return &TrackingAllocator::deleter; }

void TrackingAllocator::copy_data(void* dest, const void* src, std::size_t count) const {
  default_copy_data(dest, src, count);
}

void TrackingAllocator::deleter(void* ptr) { get().release(ptr); }

void TrackingAllocator::release(void* ptr) {
  if (!ptr) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = live_.find(ptr);
    if (it != live_.end()) {
      const Block block = it->second;
      current_ -= static_cast<int64_t>(block.requested);
      live_.erase(it);
      const auto capacity = static_cast<int64_t>(block.capacity);
      if (block.capacity >= kMinCachedBytes && cached_ + capacity <= cache_limit_) {
        free_.emplace(block.capacity, ptr);
        cached_ += capacity;
        return;
      }
    }
  }
  c10::free_cpu(ptr);
}

void TrackingAllocator::set_cache_limit(int64_t bytes) {
  std::vector<void*> evicted;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    cache_limit_ = std::max<int64_t>(0, bytes);
    // Largest first: the fewest blocks to give back.
    while (cached_ > cache_limit_ && !free_.empty()) {
      auto last = std::prev(free_.end());
      cached_ -= static_cast<int64_t>(last->first);
      evicted.push_back(last->second);
      free_.erase(last);
    }
  }
  for (void* p : evicted) c10::free_cpu(p);
}

int64_t TrackingAllocator::cached_bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return cached_;
}

int64_t TrackingAllocator::cache_hits() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return cache_hits_;
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
