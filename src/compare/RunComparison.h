#pragma once

// Step-by-step comparison of one metric between two runs, A and B (B is the reference for relative diffs).
//
//   RunComparison c = compareRuns("runs/ga4", "runs/ga1", {"loss", Tolerance{1e-5, 0}, StepRange{}});
//   if (!c.passed()) std::cout << formatVerdict(c);    // see Report.h
//
// Only steps present in both runs (and inside the range) are compared; steps present in one run only are listed
// but do not fail the comparison. Nothing to compare at all is an InputError.

#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "compare/StepRange.h"
#include "compare/Tolerance.h"

namespace shadowgrad::compare {

struct CompareOptions {
  std::string metric = "loss";
  Tolerance tolerance;
  StepRange steps;
};

struct StepDiff {
  int step = 0;
  double a = 0, b = 0;
  double absDiff = 0; // |a - b|; NaN if either is NaN
  double relDiff = 0; // |a - b| / |b|; 0 when both are 0, inf when only b is 0
  bool close = false;
};

struct RunComparison {
  std::string runA, runB; // the metrics files, for reports
  CompareOptions options;
  std::vector<StepDiff> steps; // compared steps, ascending
  std::vector<int> onlyInA, onlyInB;
  size_t mismatches = 0;
  std::optional<size_t> maxAbs, maxRel; // indices into steps; NaN counts as the largest

  bool passed() const { return mismatches == 0; }
  std::optional<int> firstMismatch() const;
};

RunComparison compareSeries(const std::map<int, double> &a, const std::map<int, double> &b,
                            const CompareOptions &options);

// Loads both metrics files (run dirs or .jsonl paths) and compares options.metric.
RunComparison compareRuns(const std::filesystem::path &runA, const std::filesystem::path &runB,
                          const CompareOptions &options);

} // namespace shadowgrad::compare
