#include "compare/RunComparison.h"

#include <cmath>
#include <limits>

#include "util/Errors.h"
#include "compare/MetricsFile.h"

namespace shadowgrad::compare {
namespace {

// Orders diffs so that NaN ranks above everything: the worst step is the one a reader must see.
bool worse(double x, double y) { return (std::isnan(x) && !std::isnan(y)) || x > y; }

double relativeDiff(double absDiff, double b) {
  if (absDiff == 0 || std::isnan(absDiff))
    return absDiff;
  if (b == 0)
    return std::numeric_limits<double>::infinity();
  return absDiff / std::fabs(b);
}

} // namespace

std::optional<int> RunComparison::firstMismatch() const {
  for (const StepDiff &d : steps)
    if (!d.close)
      return d.step;
  return std::nullopt;
}

RunComparison compareSeries(const std::map<int, double> &a, const std::map<int, double> &b,
                            const CompareOptions &options) {
  options.tolerance.validate();
  RunComparison out;
  out.options = options;
  for (const auto &[step, va] : a) {
    if (!options.steps.contains(step))
      continue;
    auto it = b.find(step);
    if (it == b.end()) {
      out.onlyInA.push_back(step);
      continue;
    }
    StepDiff d;
    d.step = step;
    d.a = va;
    d.b = it->second;
    d.absDiff = (d.a == d.b) ? 0.0 : std::fabs(d.a - d.b);
    d.relDiff = relativeDiff(d.absDiff, d.b);
    d.close = options.tolerance.isClose(d.a, d.b);
    out.mismatches += d.close ? 0 : 1;
    out.steps.push_back(d);
    size_t i = out.steps.size() - 1;
    if (!out.maxAbs || worse(d.absDiff, out.steps[*out.maxAbs].absDiff))
      out.maxAbs = i;
    if (!out.maxRel || worse(d.relDiff, out.steps[*out.maxRel].relDiff))
      out.maxRel = i;
  }
  for (const auto &[step, vb] : b)
    if (options.steps.contains(step) && !a.count(step))
      out.onlyInB.push_back(step);
  if (out.steps.empty())
    throw InputError("no overlapping steps of '" + options.metric + "' in step range " + options.steps.str() +
                     " (A has " + std::to_string(a.size()) + " steps, B has " + std::to_string(b.size()) + ")");
  return out;
}

RunComparison compareRuns(const std::filesystem::path &runA, const std::filesystem::path &runB,
                          const CompareOptions &options) {
  MetricsFile fileA = MetricsFile::load(runA);
  MetricsFile fileB = MetricsFile::load(runB);
  // Named, so that A's problems are reported before B's (argument evaluation order is unspecified).
  std::map<int, double> seriesA = fileA.series(options.metric);
  std::map<int, double> seriesB = fileB.series(options.metric);
  RunComparison out = compareSeries(seriesA, seriesB, options);
  out.runA = fileA.path().string();
  out.runB = fileB.path().string();
  return out;
}

} // namespace shadowgrad::compare
