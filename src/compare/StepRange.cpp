#include "compare/StepRange.h"

#include <charconv>

#include "util/Errors.h"

namespace shadowgrad::compare {
namespace {

int parseStep(std::string_view part, std::string_view whole) {
  int value = 0;
  auto [end, ec] = std::from_chars(part.data(), part.data() + part.size(), value);
  if (ec != std::errc() || end != part.data() + part.size() || value < 1)
    throw InputError("step range '" + std::string(whole) +
                     "': expected FROM:TO, FROM:, :TO or STEP with integer steps >= 1");
  return value;
}

} // namespace

StepRange StepRange::parse(std::string_view text) {
  StepRange range;
  size_t colon = text.find(':');
  if (colon == std::string_view::npos) {
    range.from = range.to = parseStep(text, text);
    return range;
  }
  std::string_view lo = text.substr(0, colon), hi = text.substr(colon + 1);
  if (lo.empty() && hi.empty())
    return range; // ":" means everything, like a Python slice
  if (!lo.empty())
    range.from = parseStep(lo, text);
  if (!hi.empty())
    range.to = parseStep(hi, text);
  if (range.from > range.to)
    throw InputError("step range '" + std::string(text) + "' is empty: FROM is after TO");
  return range;
}

std::string StepRange::str() const {
  return std::to_string(from) + ":" + (openEnded() ? std::string() : std::to_string(to));
}

} // namespace shadowgrad::compare
