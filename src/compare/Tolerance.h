#pragma once

// The closeness rule, numpy.isclose style with B as the reference: |a - b| <= atol + rtol * |b|.
// NaN is never close to anything, not even NaN: a run that diverged must not PASS a comparison. Equal
// infinities are close (a == b), any other infinity is not.
//
//   Tolerance tol{1e-5, 0.0};
//   tol.isClose(1.0, 1.0 + 1e-6); // true

#include <string>

namespace shadowgrad::compare {

struct Tolerance {
  double rtol = 1e-5;
  double atol = 0.0;

  bool isClose(double a, double b) const;
  void validate() const;   // throws InputError unless both are finite and >= 0
  std::string str() const; // "rtol=1e-05 atol=0"
};

} // namespace shadowgrad::compare
