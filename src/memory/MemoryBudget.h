#pragma once
// How much memory this process may still take: the tighter of its cgroup's limit (v2 memory.max - memory.current,
// v1 memory.limit_in_bytes - memory.usage_in_bytes) and the kernel's MemAvailable; and what it holds now (VmRSS).
// memory_budget_mib=0 is built from both (train/MicrobatchFit.h).
//
//   memory::MemoryHeadroom h = memory::read_headroom();      // h.bytes, h.source: "cgroup v2 memory.max", ...
//   memory::read_headroom("/tmp/fake_root")                   // tests: the same files under another root
#include <cstdint>
#include <string>

namespace shadowgrad::memory {

struct MemoryHeadroom {
  int64_t bytes = -1;   // -1: nothing could be read
  std::string source;   // where the figure came from, for the log
};

// Reads <root>/proc/self/cgroup, <root>/sys/fs/cgroup/... and <root>/proc/meminfo.
MemoryHeadroom read_headroom(const std::string& root = "");

// This process's resident memory (VmRSS of <root>/proc/self/status), in bytes; -1 when it cannot be read.
int64_t resident_bytes(const std::string& root = "");

} // namespace shadowgrad::memory
