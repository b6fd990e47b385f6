#pragma once

// One run's metrics.jsonl, read whole: one JSON object per optimizer step, with an integer, 1-based "step".
//
//   MetricsFile a = MetricsFile::load("runs/ga4");   // a run dir, or the .jsonl path itself
//   std::map<int, double> loss = a.series("loss"); // step -> value; throws InputError if no line has "loss"
//
// Every problem is an InputError naming the file and, for content problems, the 1-based line.

#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace shadowgrad::compare {

class MetricsFile {
public:
  struct Row {
    int step = 0;
    size_t line = 0; // 1-based line in the file, for messages
    std::map<std::string, double> numbers;
    std::set<std::string> nonNumeric;
  };

  // `path` is a run directory holding metrics.jsonl, or a metrics file. Blank lines are skipped.
  static MetricsFile load(const std::filesystem::path &path);

  // Parses text as if read from `path` (which only appears in messages).
  static MetricsFile parse(const std::string &text, const std::filesystem::path &path);

  // step -> value of `metric` for the rows that carry it (some metrics start late, e.g. peak memory).
  std::map<int, double> series(const std::string &metric) const;

  const std::filesystem::path &path() const { return path_; }
  const std::vector<Row> &rows() const { return rows_; }

private:
  std::filesystem::path path_;
  std::vector<Row> rows_;
};

// Where a run directory keeps its metrics; load() accepts either form.
std::filesystem::path resolveMetricsPath(const std::filesystem::path &runOrFile);

} // namespace shadowgrad::compare
