#include "train/MetricsWriter.h"

#include <cmath>
#include <stdexcept>

#include <fmt/format.h>

namespace shadowgrad::train {

std::string to_json(const JsonNumbers& fields) {
  std::string out = "{";
  for (const auto& [key, value] : fields) {
    if (out.size() > 1) out += ", ";
    // Integral values print without a fraction ("step": 3), others in shortest round-trip form.
    if (!std::isfinite(value)) out += fmt::format("\"{}\": null", key);
    else if (value == std::floor(value) && std::fabs(value) < 9.0e15) out += fmt::format("\"{}\": {}", key, int64_t(value));
    else out += fmt::format("\"{}\": {}", key, value);
  }
  return out + "}";
}

MetricsWriter::MetricsWriter(const std::string& path) : file_(std::fopen(path.c_str(), "a")), path_(path) {
  if (!file_) throw std::runtime_error(fmt::format("cannot open '{}' for writing", path));
}

MetricsWriter::~MetricsWriter() { std::fclose(file_); }

void MetricsWriter::write(const JsonNumbers& fields) {
  std::string line = to_json(fields) + "\n";
  if (std::fputs(line.c_str(), file_) < 0 || std::fflush(file_) != 0)
    throw std::runtime_error(fmt::format("cannot write to '{}' (disk full?)", path_));
}

} // namespace shadowgrad::train
