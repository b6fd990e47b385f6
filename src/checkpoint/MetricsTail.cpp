#include "checkpoint/MetricsTail.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <limits>

#include "checkpoint/DurableFile.h"
#include "util/File.h"

namespace shadowgrad::checkpoint {

namespace {

// The number after `"key": ` in one metrics line (MetricsWriter's own format), or `fallback` when the key is
// absent or its value is not a number (a non-finite value is written as null).
double number_after(const std::string& line, const std::string& key, double fallback) {
  const std::string tag = "\"" + key + "\": ";
  const size_t at = line.find(tag);
  if (at == std::string::npos) return fallback;
  const char* start = line.c_str() + at + tag.size();
  char* end = nullptr;
  const double value = std::strtod(start, &end);
  return end == start ? fallback : value;
}

} // namespace

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
    const auto s = static_cast<int64_t>(number_after(line, "step", -1));
    if (s < 0 || s > step) continue;
    if (s == 0) {  // eval_on_start's evaluation before step 1: kept by a resume, not a step (a restart writes it again)
      if (step > 0) kept += line + "\n";
      continue;
    }
    const double loss = number_after(line, "loss", nan);
    if (s == 1) tail.first_loss = loss;
    tail.last_loss = loss;
    tail.steps += 1;
    tail.tokens += number_after(line, "tokens", 0);
    tail.seconds += number_after(line, "step_time_s", 0);
    tail.peak_mem_bytes = std::max(tail.peak_mem_bytes, number_after(line, "peak_mem_bytes", -1));
    tail.eval_loss = number_after(line, "eval_loss", tail.eval_loss);
    if (line.find("\"eval_loss\": ") != std::string::npos) tail.evaluations.push_back({s, number_after(line, "eval_loss", nan)});
    kept += line + "\n";
  }
  util::write_file_atomically(path, kept);
  return tail;
}

std::vector<Evaluation> read_evaluations(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return {};
  const std::string text = read_whole_file(path);
  std::vector<Evaluation> out;
  for (size_t pos = 0, end; (end = text.find('\n', pos)) != std::string::npos; pos = end + 1) {
    const std::string line = text.substr(pos, end - pos);
    if (line.find("\"eval_loss\": ") == std::string::npos || number_after(line, "step", 0) < 1) continue;  // no step 0
    out.push_back({static_cast<int64_t>(number_after(line, "step", 0)),
                   number_after(line, "eval_loss", std::numeric_limits<double>::quiet_NaN())});
  }
  return out;
}

const Evaluation* best_evaluation(const std::vector<Evaluation>& evaluations) {
  const Evaluation* best = nullptr;
  for (const auto& e : evaluations)
    if (std::isfinite(e.eval_loss) && (!best || e.eval_loss < best->eval_loss)) best = &e;
  return best;
}

} // namespace shadowgrad::checkpoint
