#include "checkpoint/MetricsTail.h"

#include <cstdlib>
#include <filesystem>
#include <limits>

#include "checkpoint/DurableFile.h"

namespace shadowgrad::checkpoint {

MetricsTail truncate_metrics(const std::string& path, int64_t step) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  MetricsTail tail{nan, nan};
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return tail;
  const std::string text = read_whole_file(path);
  std::string kept;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) break;  // a torn last line from a crash
    const std::string line = text.substr(pos, end - pos);
    pos = end + 1;
    const size_t at = line.find("\"step\": ");
    if (at == std::string::npos) continue;
    const int64_t s = std::strtoll(line.c_str() + at + 8, nullptr, 10);
    if (s < 1 || s > step) continue;
    const size_t l = line.find("\"loss\": ");
    const double loss = l == std::string::npos ? nan : std::strtod(line.c_str() + l + 8, nullptr);
    if (s == 1) tail.first_loss = loss;
    tail.last_loss = loss;
    kept += line + "\n";
  }
  const std::string tmp = path + ".tmp";
  write_durably(tmp, kept);
  std::filesystem::rename(tmp, path);
  return tail;
}

} // namespace shadowgrad::checkpoint
