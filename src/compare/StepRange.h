#pragma once

// An inclusive range of optimizer steps, parsed from the --steps syntax.
//
//   StepRange::parse("3:10");  // steps 3..10      StepRange::parse("5:");  // step 5 to the end
//   StepRange::parse(":4");    // steps 1..4       StepRange::parse("7");   // step 7 only
//
// A malformed or empty range throws InputError.

#include <climits>
#include <string>
#include <string_view>

namespace shadowgrad::compare {

struct StepRange {
  int from = 1;
  int to = INT_MAX; // INT_MAX: open-ended

  static StepRange parse(std::string_view text);

  bool contains(int step) const { return step >= from && step <= to; }
  bool openEnded() const { return to == INT_MAX; }
  std::string str() const; // "3:10", "5:", "1:" (all)
};

} // namespace shadowgrad::compare
