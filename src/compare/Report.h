#pragma once

// Text renderings of a RunComparison: the step table, the one-line verdict, and a JSON object for scripts.
//
//   std::cout << formatTable(c) << formatVerdict(c) << "\n";
//   std::cout << formatJson(c) << "\n";
//
// Numbers in the JSON use the shortest form that reads back exactly; non-finite numbers become null there.

#include <string>

#include "compare/RunComparison.h"

namespace shadowgrad::compare {

// Marks a step outside tolerance in the table.
inline constexpr const char *kMismatchMark = "!!";

std::string formatTable(const RunComparison &c);   // header + one line per step, each ending in '\n'
std::string formatVerdict(const RunComparison &c); // "PASS: ..." or "FAIL: ...", no newline
std::string formatJson(const RunComparison &c);    // one JSON object, no newline

} // namespace shadowgrad::compare
