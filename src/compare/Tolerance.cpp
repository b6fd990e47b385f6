#include "compare/Tolerance.h"

#include <cmath>

#include <fmt/format.h>

#include "util/Errors.h"

namespace shadowgrad::compare {

bool Tolerance::isClose(double a, double b) const {
  if (std::isnan(a) || std::isnan(b))
    return false;
  // An infinity is close only to itself; without this, inf vs -inf would pass against the infinite bound.
  if (std::isinf(a) || std::isinf(b))
    return a == b;
  return std::fabs(a - b) <= atol + rtol * std::fabs(b);
}

void Tolerance::validate() const {
  if (!std::isfinite(rtol) || rtol < 0)
    throw InputError(fmt::format("rtol must be a finite number >= 0, got {}", rtol));
  if (!std::isfinite(atol) || atol < 0)
    throw InputError(fmt::format("atol must be a finite number >= 0, got {}", atol));
}

std::string Tolerance::str() const { return fmt::format("rtol={:g} atol={:g}", rtol, atol); }

} // namespace shadowgrad::compare
