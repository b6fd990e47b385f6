#include "compare/MetricsFile.h"

#include <cmath>
#include <fstream>
#include <sstream>

#include "util/Errors.h"
#include "compare/JsonLine.h"

namespace shadowgrad::compare {
namespace fs = std::filesystem;

namespace {

std::string where(const fs::path &path, size_t line) { return path.string() + ":" + std::to_string(line); }

int stepOf(const JsonLine &json, const fs::path &path, size_t line) {
  auto it = json.numbers.find("step");
  if (it == json.numbers.end())
    throw InputError(where(path, line) + ": no numeric \"step\" field");
  double s = it->second;
  // Steps are counted from 1 by the trainer (0: eval_on_start's evaluation before the first); anything else means the
  // file is not what we think it is.
  if (!std::isfinite(s) || s != std::floor(s) || s < 0 || s > 1e9)
    throw InputError(where(path, line) + ": \"step\" must be an integer >= 0, got " + std::to_string(s));
  return static_cast<int>(s);
}

} // namespace

fs::path resolveMetricsPath(const fs::path &runOrFile) {
  std::error_code ec;
  if (fs::is_directory(runOrFile, ec)) {
    fs::path file = runOrFile / "metrics.jsonl";
    if (!fs::is_regular_file(file, ec))
      throw InputError("run directory " + runOrFile.string() + " has no metrics.jsonl");
    return file;
  }
  if (fs::is_regular_file(runOrFile, ec))
    return runOrFile;
  throw InputError(runOrFile.string() + ": no such run directory or metrics file");
}

MetricsFile MetricsFile::load(const fs::path &path) {
  fs::path file = resolveMetricsPath(path);
  std::ifstream in(file, std::ios::binary);
  if (!in)
    throw InputError(file.string() + ": cannot open for reading");
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad())
    throw InputError(file.string() + ": read error");
  return parse(text.str(), file);
}

MetricsFile MetricsFile::parse(const std::string &text, const fs::path &path) {
  MetricsFile out;
  out.path_ = path;
  std::map<int, size_t> lineOfStep;
  std::istringstream lines(text);
  std::string lineText;
  for (size_t lineNo = 1; std::getline(lines, lineText); ++lineNo) {
    if (lineText.find_first_not_of(" \t\r") == std::string::npos)
      continue;
    JsonLine json;
    try {
      json = parseJsonLine(lineText);
    } catch (const JsonSyntaxError &e) {
      throw InputError(where(path, lineNo) + ":" + std::to_string(e.column) + ": malformed JSON: " + e.what());
    }
    Row row;
    row.line = lineNo;
    row.step = stepOf(json, path, lineNo);
    // A repeated step would make "the value at step N" ambiguous (e.g. two runs appended to one file).
    auto [it, fresh] = lineOfStep.emplace(row.step, lineNo);
    if (!fresh)
      throw InputError(where(path, lineNo) + ": step " + std::to_string(row.step) + " already appeared on line " +
                       std::to_string(it->second));
    row.numbers = std::move(json.numbers);
    row.nonNumeric = std::move(json.nonNumeric);
    out.rows_.push_back(std::move(row));
  }
  if (out.rows_.empty())
    throw InputError(path.string() + ": no metric rows (empty file)");
  return out;
}

std::map<int, double> MetricsFile::series(const std::string &metric) const {
  std::map<int, double> out;
  for (const Row &row : rows_) {
    if (row.nonNumeric.count(metric))
      throw InputError(where(path_, row.line) + ": metric '" + metric + "' is not a number");
    auto it = row.numbers.find(metric);
    if (it != row.numbers.end())
      out.emplace(row.step, it->second);
  }
  if (out.empty()) {
    std::string known;
    for (const auto &[key, value] : rows_.front().numbers)
      known += (known.empty() ? "" : ", ") + key;
    throw InputError(path_.string() + ": no line has metric '" + metric + "' (first line has: " + known + ")");
  }
  return out;
}

} // namespace shadowgrad::compare
