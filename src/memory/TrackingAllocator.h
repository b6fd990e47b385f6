#pragma once
// A CPU allocator that wraps c10's and counts bytes: every CPU tensor LibTorch allocates after
// install() goes through it, so current and peak bytes are measured, not estimated.
//
//   shadowgrad::memory::TrackingAllocator::install();   // first thing in main(), before any tensor
//   auto& mem = shadowgrad::memory::TrackingAllocator::get();
//   mem.reset_peak();
//   run_one_step();
//   int64_t step_peak = mem.peak_bytes();
//
// What it sees: tensor storage allocated through c10::GetCPUAllocator() (every at::empty, every
// autograd buffer). What it cannot see: memory allocated before install(), and scratch buffers that
// oneDNN or OpenBLAS take with their own malloc. Tensors allocated before install() keep the default
// deleter, so installing late is safe; it only under-counts.
//
// It also keeps freed blocks of 64 KiB and more for reuse, up to set_cache_limit() bytes. A training step
// allocates the same sizes every microbatch; without the cache glibc maps and unmaps them each time, and
// the page faults on fresh pages took most of the kernel time of a seed-model step (docs/performance.md).
// Cached blocks are not live tensors: current_bytes() and peak_bytes() leave them out; cached_bytes()
// says how many there are.
#include <cstdint>
#include <map>
#include <mutex>
#include <unordered_map>

#include <c10/core/Allocator.h>

namespace shadowgrad::memory {

class TrackingAllocator final : public c10::Allocator {
 public:
  // Installs the process-wide tracking allocator as LibTorch's CPU allocator. Idempotent.
  static void install();
  // Whether install() has run in this process.
  static bool installed();
  // The process-wide instance (counting only once installed).
  static TrackingAllocator& get();

  c10::DataPtr allocate(size_t nbytes) override;
  c10::DeleterFnPtr raw_deleter() const override;
  // Tensor clones of CPU storage: a plain memcpy, as c10's default CPU allocator does.
  void copy_data(void* dest, const void* src, std::size_t count) const override;

  // Bytes allocated through this allocator and not yet freed.
  int64_t current_bytes() const;
  // Highest current_bytes() since install() or the last reset_peak().
  int64_t peak_bytes() const;
  // Starts a new peak window at the current level.
  void reset_peak();
  // Allocations made so far (a counter, never reset).
  int64_t allocations() const;

  // Upper bound on freed bytes kept for reuse; 0 turns the cache off and frees what it holds.
  void set_cache_limit(int64_t bytes);
  // Freed bytes held for reuse now.
  int64_t cached_bytes() const;
  // Allocations served from the cache so far (a counter, never reset).
  int64_t cache_hits() const;

 private:
  TrackingAllocator() = default;
  static void deleter(void* ptr);
  void release(void* ptr);

  struct Block {
    size_t requested = 0;  // what the tensor asked for: what current_bytes() counts
    size_t capacity = 0;   // what was allocated: the cache's key
  };

  mutable std::mutex mutex_;
  mutable std::unordered_map<void*, Block> live_;
  mutable std::multimap<size_t, void*> free_;  // capacity -> cached block
  mutable int64_t current_ = 0, peak_ = 0, allocations_ = 0, cached_ = 0, cache_hits_ = 0;
  int64_t cache_limit_ = 0;
};

} // namespace shadowgrad::memory
