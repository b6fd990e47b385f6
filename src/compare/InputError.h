#pragma once

// The one error type of the compare library: the inputs (files, metric name, step range) cannot be compared.
// apps/compare_runs maps it to exit code 2, so "FAIL" (exit 1) always means "compared, and differed".
//
//   try { auto m = MetricsFile::load("runs/a"); } catch (const InputError& e) { std::cerr << e.what(); }

#include <stdexcept>
#include <string>

namespace shadowgrad::compare {

class InputError : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

} // namespace shadowgrad::compare
