#include "config/BatchSizeSchedule.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>

#include <fmt/format.h>

#include "util/Errors.h"

namespace shadowgrad::config {
namespace {

[[noreturn]] void bad(const std::string& entry, const std::string& why) {
  throw ConfigError(fmt::format("batch_size_schedule entry '{}': {}", entry, why));
}

std::string trimmed(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t"), e = s.find_last_not_of(" \t");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

// "2M" -> 2000000 tokens; "500s" -> step 500 (in_steps). Decimals are allowed when the product is whole ("1.5M").
int64_t parse_at(const std::string& entry, std::string at, bool& in_steps) {
  double scale = 1;
  in_steps = false;
  if (!at.empty()) {
    switch (at.back()) {
    case 's': in_steps = true; break;
    case 'k': scale = 1e3; break;
    case 'M': scale = 1e6; break;
    case 'B': scale = 1e9; break;
    default: scale = 0;
    }
    if (scale != 0) {
      if (in_steps || scale != 1) at.pop_back();
    } else {
      scale = 1;
    }
  }
  errno = 0;
  char* end = nullptr;
  const double v = std::strtod(at.c_str(), &end);
  if (at.empty() || end != at.c_str() + at.size() || errno == ERANGE || !std::isfinite(v) || v < 0)
    bad(entry, "the part before ':' must be a token count (a number, optionally with k, M or B) or a step (a number "
               "with s), e.g. 2M or 500s");
  const double x = v * scale;
  if (x != std::floor(x) || x > 9e18) bad(entry, fmt::format("{} is not a whole number of {}", x, in_steps ? "steps" : "tokens"));
  return static_cast<int64_t>(x);
}

int64_t parse_batch(const std::string& entry, const std::string& text) {
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || end != text.c_str() + text.size() || errno == ERANGE || v < 1)
    bad(entry, "the part after ':' must be a global batch of at least 1 sequence");
  return v;
}

} // namespace

BatchSizeSchedule BatchSizeSchedule::parse(const std::string& text) {
  BatchSizeSchedule s;
  if (trimmed(text).empty()) return s;
  size_t from = 0;
  std::string unit_from;  // the first point after 0 fixes the unit ("0" has none)
  while (from <= text.size()) {
    const size_t comma = std::min(text.find(',', from), text.size());
    const std::string entry = trimmed(text.substr(from, comma - from));
    from = comma + 1;
    const size_t colon = entry.find(':');
    if (colon == std::string::npos) bad(entry, "expected AT:BATCH, e.g. 2M:64 (tokens) or 500s:64 (steps)");
    bool in_steps = false;
    BatchSizePoint p{parse_at(entry, trimmed(entry.substr(0, colon)), in_steps),
                     parse_batch(entry, trimmed(entry.substr(colon + 1))), entry};
    if (s.points_.empty()) {
      if (p.at != 0) bad(entry, "the first point must be at 0 (the batch the run starts with), e.g. 0:32");
    } else {
      const BatchSizePoint& prev = s.points_.back();
      if (!unit_from.empty() && in_steps != s.in_steps_)
        bad(entry, fmt::format("mixes steps and tokens: '{}' counts {}; give every point in one unit", unit_from,
                               s.in_steps_ ? "steps" : "tokens"));
      if (unit_from.empty()) s.in_steps_ = in_steps;
      if (p.at <= prev.at) bad(entry, fmt::format("points must be in increasing order, and it does not come after '{}'",
                                                  prev.text));
      if (p.batch < prev.batch)
        bad(entry, fmt::format("the global batch may not shrink ({} after {} in '{}')", p.batch, prev.batch, prev.text));
      if (p.batch % prev.batch != 0)
        bad(entry, fmt::format("{} is not an integer multiple of the batch before it ({} in '{}'); use e.g. {} or {}",
                               p.batch, prev.batch, prev.text, (p.batch / prev.batch) * prev.batch,
                               (p.batch / prev.batch + 1) * prev.batch));
    }
    s.points_.push_back(p);
    if (s.points_.size() == 2) unit_from = entry;
    if (comma == text.size()) break;
  }
  return s;
}

size_t BatchSizeSchedule::point_at(int64_t step, int64_t tokens) const {
  const int64_t where = in_steps_ ? step : tokens;
  size_t i = 0;
  while (i + 1 < points_.size() && points_[i + 1].at <= where) ++i;
  return i;
}

} // namespace shadowgrad::config
