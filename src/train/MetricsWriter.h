#pragma once
// metrics.jsonl: one JSON object per optimizer step, flushed as it is written so a crash loses nothing
// and `tail -f` works. Doubles are written in shortest round-trip form, so two runs can be compared
// as exact decimal strings; non-finite values are written as null.
//
//   MetricsWriter m(dir.file("metrics.jsonl"));
//   m.write({{"step", 1}, {"loss", 2.5}});
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

namespace shadowgrad::train {

// A flat JSON object of numbers, in insertion order.
using JsonNumbers = std::vector<std::pair<std::string, double>>;

std::string to_json(const JsonNumbers& fields);

class MetricsWriter {
 public:
  explicit MetricsWriter(const std::string& path);
  ~MetricsWriter();
  MetricsWriter(const MetricsWriter&) = delete;
  MetricsWriter& operator=(const MetricsWriter&) = delete;

  void write(const JsonNumbers& fields);

 private:
  std::FILE* file_;
  std::string path_;
};

} // namespace shadowgrad::train
