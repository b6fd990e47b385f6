#include "compare/Report.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace shadowgrad::compare {
namespace {

std::string jsonNumber(double x) { return std::isfinite(x) ? fmt::format("{}", x) : "null"; }

std::string jsonString(const std::string &s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += fmt::format("\\u{:04x}", static_cast<int>(c));
    } else {
      out += c;
    }
  }
  return out + "\"";
}

std::string jsonSteps(const std::vector<int> &steps) {
  std::string out = "[";
  for (size_t i = 0; i < steps.size(); ++i)
    out += (i ? "," : "") + std::to_string(steps[i]);
  return out + "]";
}

std::string jsonMax(const RunComparison &c, const std::optional<size_t> &index, double StepDiff::*field) {
  if (!index)
    return "null";
  const StepDiff &d = c.steps[*index];
  return fmt::format("{{\"value\":{},\"step\":{}}}", jsonNumber(d.*field), d.step);
}

std::string maxText(const RunComparison &c) {
  const StepDiff &a = c.steps[*c.maxAbs];
  const StepDiff &r = c.steps[*c.maxRel];
  return fmt::format("max abs diff {:.3g} at step {}, max rel diff {:.3g} at step {}", a.absDiff, a.step, r.relDiff,
                     r.step);
}

} // namespace

std::string formatTable(const RunComparison &c) {
  const std::string &m = c.options.metric;
  // Wide enough for the longest step number and for the metric name in the value headers.
  int stepWidth = std::max<int>(4, static_cast<int>(std::to_string(c.steps.back().step).size()));
  int valueWidth = std::max<int>(16, static_cast<int>(m.size()) + 2);
  std::string out = fmt::format("{:>{}}  {:>{}}  {:>{}}  {:>10}  {:>10}\n", "step", stepWidth, m + " A", valueWidth,
                                m + " B", valueWidth, "abs diff", "rel diff");
  for (const StepDiff &d : c.steps) {
    out += fmt::format("{:>{}}  {:>{}.10g}  {:>{}.10g}  {:>10.3e}  {:>10.3e}{}\n", d.step, stepWidth, d.a, valueWidth,
                       d.b, valueWidth, d.absDiff, d.relDiff, d.close ? "" : std::string("  ") + kMismatchMark);
  }
  return out;
}

std::string formatVerdict(const RunComparison &c) {
  const std::string tol = c.options.tolerance.str();
  std::string out;
  if (c.passed()) {
    out = fmt::format("PASS: {} steps of '{}' within {} ({})", c.steps.size(), c.options.metric, tol, maxText(c));
  } else {
    out = fmt::format("FAIL: {} of {} steps of '{}' outside {}, first at step {} ({})", c.mismatches, c.steps.size(),
                      c.options.metric, tol, *c.firstMismatch(), maxText(c));
  }
  // Steps that could not be compared are worth a word: a run that stopped early still "passes" its overlap.
  if (!c.onlyInA.empty())
    out += fmt::format("; {} steps only in A not compared", c.onlyInA.size());
  if (!c.onlyInB.empty())
    out += fmt::format("; {} steps only in B not compared", c.onlyInB.size());
  return out;
}

std::string formatJson(const RunComparison &c) {
  const StepRange &r = c.options.steps;
  std::string out = "{";
  out += fmt::format("\"verdict\":\"{}\",\"metric\":{},\"run_a\":{},\"run_b\":{},", c.passed() ? "PASS" : "FAIL",
                     jsonString(c.options.metric), jsonString(c.runA), jsonString(c.runB));
  out += fmt::format("\"rtol\":{},\"atol\":{},\"step_range\":{{\"from\":{},\"to\":{}}},",
                     jsonNumber(c.options.tolerance.rtol), jsonNumber(c.options.tolerance.atol), r.from,
                     r.openEnded() ? std::string("null") : std::to_string(r.to));
  out += fmt::format("\"compared\":{},\"mismatched\":{},\"only_in_a\":{},\"only_in_b\":{},", c.steps.size(),
                     c.mismatches, jsonSteps(c.onlyInA), jsonSteps(c.onlyInB));
  out += fmt::format("\"max_abs_diff\":{},\"max_rel_diff\":{},", jsonMax(c, c.maxAbs, &StepDiff::absDiff),
                     jsonMax(c, c.maxRel, &StepDiff::relDiff));
  out += "\"steps\":[";
  for (size_t i = 0; i < c.steps.size(); ++i) {
    const StepDiff &d = c.steps[i];
    out += fmt::format("{}{{\"step\":{},\"a\":{},\"b\":{},\"abs_diff\":{},\"rel_diff\":{},\"close\":{}}}", i ? "," : "",
                       d.step, jsonNumber(d.a), jsonNumber(d.b), jsonNumber(d.absDiff), jsonNumber(d.relDiff),
                       d.close ? "true" : "false");
  }
  return out + "]}";
}

} // namespace shadowgrad::compare
