#include <catch2/catch.hpp>

#include "train/LrSchedule.h"

using shadowgrad::train::LrSchedule;

TEST_CASE("warmup rises linearly, cosine decays to the final fraction", "[schedule]") {
  LrSchedule s(1.0, 100, 0.1, 0.1);
  CHECK(s(0) == Approx(0.1));
  CHECK(s(4) == Approx(0.5));
  CHECK(s(9) == Approx(1.0));
  CHECK(s(10) == Approx(1.0));
  CHECK(s(55) == Approx(0.1 + 0.9 * 0.5));
  CHECK(s(100) == Approx(0.1));
  CHECK(s(500) == Approx(0.1));
  for (int i = 10; i < 99; ++i) CHECK(s(i + 1) <= s(i));
}
