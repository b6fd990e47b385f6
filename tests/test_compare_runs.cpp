// Tests for src/compare and apps/compare_runs: parsing, the tolerance rule at its edges, the verdict, and the
// binary's exit codes (0 pass, 1 fail, 2 bad input).

#include <sys/wait.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "util/Errors.h"
#include "compare/JsonLine.h"
#include "compare/MetricsFile.h"
#include "compare/ConfigDiff.h"
#include "compare/Report.h"
#include "compare/RunComparison.h"
#include "compare/StepRange.h"
#include "compare/Tolerance.h"
#include "Skip.h"

namespace fs = std::filesystem;
using namespace shadowgrad::compare;
using shadowgrad::InputError;
using Catch::Matchers::Contains;
using Catch::Matchers::StartsWith;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

// A scratch directory removed at scope exit.
class TempDir {
public:
  TempDir() {
    std::random_device rd;
    path_ = fs::temp_directory_path() / ("shadowgrad-compare-" + std::to_string(rd()) + std::to_string(rd()));
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  // Writes `text` to dir/relative (creating parents) and returns the full path.
  fs::path write(const std::string &relative, const std::string &text) const {
    fs::path p = path_ / relative;
    fs::create_directories(p.parent_path());
    std::ofstream(p) << text;
    return p;
  }
  const fs::path &path() const { return path_; }

private:
  fs::path path_;
};

// metrics.jsonl text with one line per value, steps counted from `firstStep`.
std::string metricsText(const std::vector<double> &loss, int firstStep = 1) {
  std::string out;
  for (size_t i = 0; i < loss.size(); ++i)
    out += "{\"step\": " + std::to_string(firstStep + static_cast<int>(i)) +
           ", \"loss\": " + (std::isnan(loss[i]) ? std::string("NaN") : std::to_string(loss[i])) + ", \"lr\": 0.001}\n";
  return out;
}

std::map<int, double> seriesOf(const std::vector<double> &values, int firstStep = 1) {
  std::map<int, double> out;
  for (size_t i = 0; i < values.size(); ++i)
    out[firstStep + static_cast<int>(i)] = values[i];
  return out;
}

CompareOptions withTolerance(double rtol, double atol) {
  CompareOptions o;
  o.tolerance = Tolerance{rtol, atol};
  return o;
}

} // namespace

TEST_CASE("parseJsonLine keeps numbers and sets other values aside", "[compare]") {
  JsonLine line = parseJsonLine(
      R"( {"step": 3, "loss": -2.5e-1, "tag": "a\"b", "ok": true, "nested": {"x": [1, {"y": null}]}, "n": null} )");
  CHECK(line.numbers.at("step") == 3);
  CHECK(line.numbers.at("loss") == -0.25);
  CHECK(std::isnan(line.numbers.at("n")));
  CHECK(line.nonNumeric == std::set<std::string>{"tag", "ok", "nested"});

  JsonLine nonFinite = parseJsonLine(R"({"a": NaN, "b": -Infinity, "c": inf, "d": 1e999})");
  CHECK(std::isnan(nonFinite.numbers.at("a")));
  CHECK(nonFinite.numbers.at("b") == -kInf);
  CHECK(nonFinite.numbers.at("c") == kInf);
  CHECK(nonFinite.numbers.at("d") == kInf);
  CHECK(parseJsonLine("{}").numbers.empty());
}

TEST_CASE("parseJsonLine rejects malformed lines with a column", "[compare]") {
  for (const char *bad : {"", "[1, 2]", R"({"step": 1,})", R"({"step": 1} trailing)", R"({"step" 1})", R"({"step": 1)",
                          R"({"step": abc})", R"({"a": 1, "a": 2})", R"({"s": "open)"}) {
    CAPTURE(bad);
    CHECK_THROWS_AS(parseJsonLine(bad), JsonSyntaxError);
  }
  try {
    parseJsonLine(R"({"step": 1,})");
  } catch (const JsonSyntaxError &e) {
    CHECK(e.column == 12);
  }
}

TEST_CASE("MetricsFile parses rows and series", "[compare]") {
  MetricsFile f = MetricsFile::parse(
      "{\"step\": 1, \"loss\": 2.0}\n\n{\"step\": 2, \"loss\": 1.5, \"peak_mem_bytes\": 10}\n", "m.jsonl");
  REQUIRE(f.rows().size() == 2);
  CHECK(f.rows()[1].line == 3); // blank lines are skipped but still counted
  CHECK(f.series("loss") == std::map<int, double>{{1, 2.0}, {2, 1.5}});
  CHECK(f.series("peak_mem_bytes") == std::map<int, double>{{2, 10.0}}); // a metric that starts late
}

TEST_CASE("MetricsFile errors name the file and line", "[compare]") {
  auto message = [](const std::string &text) {
    try {
      MetricsFile::parse(text, "runs/x/metrics.jsonl");
    } catch (const InputError &e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK_THAT(message("{\"step\": 1, \"loss\": 1}\n{\"step\": 2, \"loss\": }\n"),
             StartsWith("runs/x/metrics.jsonl:2:") && Contains("malformed JSON"));
  CHECK_THAT(message("{\"loss\": 1}\n"), StartsWith("runs/x/metrics.jsonl:1:") && Contains("\"step\""));
  CHECK_THAT(message("{\"step\": 1.5}\n"), Contains("integer >= 0"));
  CHECK_THAT(message("{\"step\": -1}\n"), Contains("integer >= 0"));
  CHECK_THAT(message("{\"step\": 1}\n{\"step\": 1}\n"), StartsWith("runs/x/metrics.jsonl:2:") && Contains("line 1"));
  CHECK_THAT(message("\n\n"), Contains("no metric rows"));

  MetricsFile f = MetricsFile::parse("{\"step\": 1, \"loss\": 1, \"tag\": \"x\"}\n", "m.jsonl");
  CHECK_THROWS_WITH(f.series("accuracy"), Contains("no line has metric 'accuracy'") && Contains("loss"));
  CHECK_THROWS_WITH(f.series("tag"), Contains("m.jsonl:1") && Contains("not a number"));
}

TEST_CASE("MetricsFile::load accepts a run dir or the file, and reports what is missing", "[compare]") {
  TempDir dir;
  fs::path file = dir.write("run/metrics.jsonl", metricsText({1.0, 0.5}));
  CHECK(MetricsFile::load(dir.path() / "run").path() == file);
  CHECK(MetricsFile::load(file).rows().size() == 2);
  fs::create_directories(dir.path() / "empty_run");
  CHECK_THROWS_WITH(MetricsFile::load(dir.path() / "empty_run"), Contains("has no metrics.jsonl"));
  CHECK_THROWS_WITH(MetricsFile::load(dir.path() / "nope"), Contains("no such run directory"));
}

TEST_CASE("StepRange parses the --steps syntax", "[compare]") {
  CHECK(StepRange::parse("3:10").from == 3);
  CHECK(StepRange::parse("3:10").to == 10);
  CHECK(StepRange::parse("5:").openEnded());
  CHECK(StepRange::parse(":4").from == 1);
  CHECK(StepRange::parse(":4").to == 4);
  CHECK(StepRange::parse("7").contains(7));
  CHECK_FALSE(StepRange::parse("7").contains(8));
  CHECK(StepRange::parse(":").openEnded());
  CHECK(StepRange::parse("3:3").str() == "3:3");
  for (const char *bad : {"", "a:b", "0:3", "-1:", "3:1", "1:2:3", "1.5", " 2"}) {
    CAPTURE(bad);
    CHECK_THROWS_AS(StepRange::parse(bad), InputError);
  }
}

TEST_CASE("Tolerance: exactly at the bound passes, the next double above fails", "[compare]") {
  // Values are exactly representable, so "at the bound" is exact in floating point.
  Tolerance absolute{0.0, 0.5};
  CHECK(absolute.isClose(1.5, 1.0));
  CHECK(absolute.isClose(0.5, 1.0));
  CHECK_FALSE(absolute.isClose(std::nextafter(1.5, 2.0), 1.0));

  Tolerance relative{0.25, 0.0};
  CHECK(relative.isClose(5.0, 4.0));
  CHECK_FALSE(relative.isClose(std::nextafter(5.0, 6.0), 4.0));
  // B is the reference: 3 vs 4 is at the bound (1 <= 0.25 * 4), 4 vs 3 is outside (1 > 0.25 * 3).
  CHECK(relative.isClose(3.0, 4.0));
  CHECK_FALSE(relative.isClose(4.0, 3.0));

  Tolerance both{0.25, 0.5};
  CHECK(both.isClose(5.5, 4.0));
  CHECK_FALSE(both.isClose(std::nextafter(5.5, 6.0), 4.0));

  Tolerance exact{0.0, 0.0};
  CHECK(exact.isClose(0.1, 0.1));
  CHECK_FALSE(exact.isClose(0.1, std::nextafter(0.1, 1.0)));
}

TEST_CASE("Tolerance: NaN never matches, equal infinities do", "[compare]") {
  Tolerance loose{1.0, 1.0};
  CHECK_FALSE(loose.isClose(kNaN, kNaN));
  CHECK_FALSE(loose.isClose(kNaN, 1.0));
  CHECK_FALSE(loose.isClose(1.0, kNaN));
  CHECK(loose.isClose(kInf, kInf));
  CHECK_FALSE(loose.isClose(kInf, -kInf));
  CHECK_FALSE(loose.isClose(kInf, 1.0));
  CHECK_THROWS_AS((Tolerance{-1.0, 0.0}.validate()), InputError);
  CHECK_THROWS_AS((Tolerance{0.0, kNaN}.validate()), InputError);
}

TEST_CASE("compareSeries: identical runs pass, a perturbed step fails", "[compare]") {
  std::vector<double> base{4.0, 3.5, 3.0, 2.5};
  RunComparison same = compareSeries(seriesOf(base), seriesOf(base), CompareOptions{});
  CHECK(same.passed());
  CHECK(same.steps.size() == 4);
  CHECK_THAT(formatVerdict(same), StartsWith("PASS: 4 steps of 'loss' within rtol=1e-05 atol=0"));

  // The comparison must be able to fail: a deliberate 1e-4 relative error at step 3.
  std::vector<double> perturbed = base;
  perturbed[2] *= 1 + 1e-4;
  RunComparison diff = compareSeries(seriesOf(perturbed), seriesOf(base), CompareOptions{});
  CHECK_FALSE(diff.passed());
  CHECK(diff.mismatches == 1);
  CHECK(diff.firstMismatch() == 3);
  CHECK(diff.steps[*diff.maxRel].step == 3);
  CHECK(diff.steps[2].relDiff == Approx(1e-4));
  CHECK_THAT(formatVerdict(diff),
             StartsWith("FAIL: 1 of 4 steps of 'loss' outside rtol=1e-05 atol=0, first at step 3"));

  // ... and a looser tolerance lets the same pair pass.
  CHECK(compareSeries(seriesOf(perturbed), seriesOf(base), withTolerance(2e-4, 0)).passed());
}

TEST_CASE("compareSeries: step range, partial overlap and no overlap", "[compare]") {
  auto a = seriesOf({1.0, 2.0, 3.0, 4.0, 5.0});    // steps 1..5
  auto b = seriesOf({2.0, 3.0, 9.0, 5.0, 6.0}, 2); // steps 2..6, wrong at step 4

  RunComparison all = compareSeries(a, b, CompareOptions{});
  CHECK(all.steps.size() == 4);
  CHECK(all.onlyInA == std::vector<int>{1});
  CHECK(all.onlyInB == std::vector<int>{6});
  CHECK_FALSE(all.passed());
  CHECK_THAT(formatVerdict(all), Contains("1 steps only in A") && Contains("1 steps only in B"));

  CompareOptions early;
  early.steps = StepRange::parse(":3");
  RunComparison first = compareSeries(a, b, early);
  CHECK(first.passed());
  CHECK(first.steps.size() == 2);

  CompareOptions late;
  late.steps = StepRange::parse("4");
  CHECK_FALSE(compareSeries(a, b, late).passed());

  CompareOptions outside;
  outside.steps = StepRange::parse("7:");
  CHECK_THROWS_WITH(compareSeries(a, b, outside), Contains("no overlapping steps"));
  CHECK_THROWS_AS(compareSeries(seriesOf({1.0}), seriesOf({1.0}, 2), CompareOptions{}), InputError);
}

TEST_CASE("compareSeries: NaN steps fail and rank as the largest diff", "[compare]") {
  RunComparison c = compareSeries(seriesOf({1.0, kNaN, 3.0}), seriesOf({1.5, kNaN, 3.0}), withTolerance(0, 1));
  CHECK(c.mismatches == 1);
  CHECK(c.firstMismatch() == 2);
  CHECK(c.steps[*c.maxAbs].step == 2);

  std::string json = formatJson(c);
  CHECK_THAT(json, StartsWith("{\"verdict\":\"FAIL\""));
  CHECK_THAT(json, Contains("{\"step\":2,\"a\":null,\"b\":null,\"abs_diff\":null,\"rel_diff\":null,\"close\":false}"));
  CHECK_THAT(json, Contains("\"compared\":3,\"mismatched\":1"));
}

TEST_CASE("formatTable marks exactly the steps outside tolerance", "[compare]") {
  RunComparison c = compareSeries(seriesOf({1.0, 2.5}), seriesOf({1.0, 2.0}), CompareOptions{});
  std::string table = formatTable(c);
  std::istringstream lines(table);
  std::string header, step1, step2;
  std::getline(lines, header);
  std::getline(lines, step1);
  std::getline(lines, step2);
  CHECK_THAT(header, Contains("loss A") && Contains("rel diff"));
  CHECK_THAT(step1, !Contains(kMismatchMark));
  CHECK_THAT(step2, Contains(kMismatchMark));
}

TEST_CASE("compareRuns reads both runs from disk", "[compare]") {
  TempDir dir;
  dir.write("a/metrics.jsonl", metricsText({4.0, 3.0}));
  dir.write("b/metrics.jsonl", metricsText({4.0, 3.0}));
  RunComparison c = compareRuns(dir.path() / "a", dir.path() / "b", CompareOptions{});
  CHECK(c.passed());
  CHECK(c.runA == (dir.path() / "a" / "metrics.jsonl").string());
  CompareOptions missing;
  missing.metric = "grad_norm";
  CHECK_THROWS_WITH(compareRuns(dir.path() / "a", dir.path() / "b", missing), Contains("a/metrics.jsonl"));
}

TEST_CASE("configDiff names the keys whose values differ, not the run's name", "[compare]") {
  TempDir dir;
  dir.write("a/config.yml", "# comment\nrun_name: a\nsteps: 40\nlearning_rate: 0.01\ndtype: float32\n");
  dir.write("b/config.yml", "run_name: b\nsteps: 20\nlearning_rate: 0.01\ndtype: float32\nnew_key: 1\n");
  const auto diffs = configDiff((dir.path() / "a").string(), (dir.path() / "b").string());
  REQUIRE(diffs.size() == 2);
  CHECK(diffs[0].key == "new_key");
  CHECK(diffs[0].a == "(absent)");
  CHECK(diffs[1].key == "steps");
  CHECK(formatConfigDiff(diffs) == "config.yml differs in 2 keys: new_key (A: (absent), B: 1), steps (A: 40, B: 20)\n");
  CHECK(configDiff((dir.path() / "a").string(), (dir.path() / "missing").string()).empty());
  CHECK(formatConfigDiff({}).empty());
}

#ifdef COMPARE_RUNS_BIN

namespace {

struct ProcessResult {
  int exitCode = -1;
  std::string output; // stdout and stderr together
};

ProcessResult runCompare(const std::string &args) {
  std::string command = std::string("'") + COMPARE_RUNS_BIN + "' " + args + " 2>&1";
  ProcessResult result;
  FILE *pipe = popen(command.c_str(), "r");
  REQUIRE(pipe != nullptr);
  char buffer[4096];
  size_t n;
  while ((n = fread(buffer, 1, sizeof buffer, pipe)) > 0)
    result.output.append(buffer, n);
  int status = pclose(pipe);
  result.exitCode = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

std::string quoted(const fs::path &p) { return "'" + p.string() + "'"; }

} // namespace

TEST_CASE("compare_runs binary: exit codes 0, 1 and 2", "[compare][cli]") {
  TempDir dir;
  fs::path a = dir.write("a/metrics.jsonl", metricsText({4.0, 3.0, 2.0})).parent_path();
  fs::path same = dir.write("same/metrics.jsonl", metricsText({4.0, 3.0, 2.0})).parent_path();
  fs::path off = dir.write("off/metrics.jsonl", metricsText({4.0, 3.0, 2.1})).parent_path();
  fs::path broken = dir.write("broken/metrics.jsonl", "{\"step\": 1, \"loss\": 4.0}\n{\"step\": 2, \"loss\": 3.0\n");
  fs::path later = dir.write("later/metrics.jsonl", metricsText({1.0}, 10)).parent_path();

  ProcessResult pass = runCompare(quoted(a) + " " + quoted(same));
  CHECK(pass.exitCode == 0);
  CHECK_THAT(pass.output, Contains("PASS: 3 steps of 'loss'"));

  ProcessResult fail = runCompare(quoted(a) + " " + quoted(off));
  CHECK(fail.exitCode == 1);
  CHECK_THAT(fail.output, Contains("!!") && Contains("FAIL: 1 of 3 steps"));
  CHECK_THAT(fail.output, !Contains("config.yml differs"));
  // Runs with different configs say which keys differ before the table.
  dir.write("a/config.yml", "steps: 3\n");
  dir.write("off/config.yml", "steps: 4\n");
  const std::string differing = runCompare(quoted(a) + " " + quoted(off)).output;
  CHECK_THAT(differing, Contains("config.yml differs in 1 key: steps (A: 3, B: 4)\n"));
  CHECK(differing.find("config.yml differs") < differing.find("!!"));

  // The same pair passes when the step range leaves out the differing step, or the tolerance covers it.
  CHECK(runCompare(quoted(a) + " " + quoted(off) + " --steps 1:2").exitCode == 0);
  CHECK(runCompare(quoted(a) + " " + quoted(off) + " --atol 0.1").exitCode == 0);

  ProcessResult json = runCompare(quoted(a) + " " + quoted(off) + " --json");
  CHECK(json.exitCode == 1);
  CHECK_THAT(json.output, StartsWith("{\"verdict\":\"FAIL\""));

  ProcessResult malformed = runCompare(quoted(a) + " " + quoted(broken));
  CHECK(malformed.exitCode == 2);
  CHECK_THAT(malformed.output, Contains(broken.string() + ":2:"));

  CHECK(runCompare(quoted(a) + " " + quoted(dir.path() / "missing")).exitCode == 2);
  CHECK(runCompare(quoted(a) + " " + quoted(same) + " --metric accuracy").exitCode == 2);
  CHECK(runCompare(quoted(a) + " " + quoted(later)).exitCode == 2);
  CHECK(runCompare(quoted(a) + " " + quoted(same) + " --steps 3:1").exitCode == 2);
  CHECK(runCompare(quoted(a) + " " + quoted(same) + " --steps x").exitCode == 2);
  CHECK(runCompare(quoted(a) + " " + quoted(same) + " --rtol abc").exitCode == 2);
  CHECK(runCompare(quoted(a)).exitCode == 2);
  CHECK(runCompare("--help").exitCode == 0);
}

#else

TEST_CASE("compare_runs binary: exit codes 0, 1 and 2", "[compare][cli]") {
  SG_SKIP("COMPARE_RUNS_BIN is not defined, so the compare_runs binary is not tested");
}

#endif
