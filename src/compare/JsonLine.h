#pragma once

// A deliberately small parser for one JSONL line: a flat JSON object. The project has no JSON dependency and a
// metrics line needs only "key -> number", so numbers are kept, every other value is parsed and set aside.
//
//   JsonLine line = parseJsonLine(R"({"step": 3, "loss": 2.5, "note": "warmup"})");
//   line.numbers.at("loss");        // 2.5
//   line.nonNumeric.count("note");  // 1
//
// Beyond strict JSON it accepts the non-finite spellings trainers emit (NaN, nan, Infinity, -Infinity, inf, -inf);
// null is stored as NaN, because a metric written as null is a value that is not known.

#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>

namespace shadowgrad::compare {

struct JsonLine {
  std::map<std::string, double> numbers;
  std::set<std::string> nonNumeric; // keys whose values are strings, booleans, arrays or objects
};

// Thrown with the 1-based column of the problem; callers add the file and line.
class JsonSyntaxError : public std::runtime_error {
public:
  JsonSyntaxError(const std::string &what, size_t column) : std::runtime_error(what), column(column) {}
  size_t column;
};

JsonLine parseJsonLine(std::string_view text);

} // namespace shadowgrad::compare
