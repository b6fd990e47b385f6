#include "memory/MemoryBudget.h"

#include <algorithm>
#include <fstream>
#include <optional>
#include <sstream>
#include <vector>

#include <fmt/format.h>

namespace shadowgrad::memory {
namespace {

// cgroup v1 writes "no limit" as a page-rounded 2^63-1; anything from 2^62 up is no limit.
constexpr int64_t kNoLimit = int64_t(1) << 62;

std::optional<int64_t> read_number(const std::string& path) {
  std::ifstream in(path);
  std::string text;
  if (!(in >> text) || text == "max") return std::nullopt;
  try {
    size_t used = 0;
    const long long v = std::stoll(text, &used);
    if (used != text.size() || v < 0 || v >= kNoLimit) return std::nullopt;
    return int64_t(v);
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

// The cgroup paths of this process: "0::/a/b" (v2) and "N:memory:/a/b" (v1), from /proc/self/cgroup.
struct CgroupPaths {
  std::optional<std::string> v2, v1_memory;
};

CgroupPaths cgroup_paths(const std::string& root) {
  CgroupPaths out;
  std::ifstream in(root + "/proc/self/cgroup");
  for (std::string line; std::getline(in, line);) {
    const size_t a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
    if (line.compare(0, a, "0") == 0 && controllers.empty()) out.v2 = path;
    std::istringstream list(controllers);
    for (std::string c; std::getline(list, c, ',');)
      if (c == "memory") out.v1_memory = path;
  }
  return out;
}

// limit - usage in the first of `dirs` that has both files, with a description.
std::optional<MemoryHeadroom> cgroup_headroom(const std::vector<std::string>& dirs, const char* limit_file,
                                              const char* usage_file, const char* what) {
  for (const auto& dir : dirs) {
    const auto limit = read_number(dir + "/" + limit_file), usage = read_number(dir + "/" + usage_file);
    if (limit && usage)
      return MemoryHeadroom{std::max<int64_t>(0, *limit - *usage),
                            fmt::format("{} {} - {} ({} MiB free)", what, limit_file, usage_file,
                                        std::max<int64_t>(0, *limit - *usage) >> 20)};
  }
  return std::nullopt;
}

// The bytes of a "Key:   N kB" line of a /proc file (meminfo, self/status), if it has one.
std::optional<int64_t> proc_kib_field(const std::string& path, const std::string& key) {
  std::ifstream in(path);
  for (std::string word; in >> word;) {
    int64_t kib = 0;
    if (word == key && in >> kib) return kib * 1024;
    std::string rest;
    std::getline(in, rest);
  }
  return std::nullopt;
}

std::optional<int64_t> mem_available(const std::string& root) {
  return proc_kib_field(root + "/proc/meminfo", "MemAvailable:");
}

} // namespace

MemoryHeadroom read_headroom(const std::string& root) {
  const CgroupPaths paths = cgroup_paths(root);
  const std::string fs = root + "/sys/fs/cgroup";
  std::optional<MemoryHeadroom> cgroup;
  if (paths.v2) cgroup = cgroup_headroom({fs + *paths.v2, fs}, "memory.max", "memory.current", "cgroup v2");
  if (!cgroup && paths.v1_memory)
    cgroup = cgroup_headroom({fs + "/memory" + *paths.v1_memory, fs + "/memory"}, "memory.limit_in_bytes",
                             "memory.usage_in_bytes", "cgroup v1");
  const auto available = mem_available(root);
  if (cgroup && (!available || cgroup->bytes <= *available)) return *cgroup;
  if (available) return {*available, fmt::format("MemAvailable ({} MiB)", *available >> 20)};
  return cgroup.value_or(MemoryHeadroom{});
}

int64_t resident_bytes(const std::string& root) {
  return proc_kib_field(root + "/proc/self/status", "VmRSS:").value_or(-1);
}

} // namespace shadowgrad::memory
