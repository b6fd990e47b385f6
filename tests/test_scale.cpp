// Clipping over a bf16 shadow tree without fp32 copies: the scaling (accumulate/Scale.h) against fp32 math rounded
// once; ShadowAccumulator's norm of a bf16 tree (SquaredNorm.h's blocked sums) and its clip landing on max_norm.
#include <catch2/catch.hpp>

#include <cmath>

#include <ATen/ATen.h>
#include <torch/nn/modules/linear.h>

#include "accumulate/Scale.h"
#include "accumulate/ShadowAccumulator.h"

using namespace shadowgrad;

namespace {

// Several 64 Ki-element blocks and a ragged tail.
at::Tensor bf16_values(int64_t n = (int64_t{1} << 16) * 5 + 123) {
  at::manual_seed(7);
  return at::randn({n}).mul_(3).to(at::kBFloat16);
}

} // namespace

TEST_CASE("scale_tensor_ of a bf16 tensor is fp32 math rounded once, unlike 1.13's mul_", "[accumulate][scale]") {
  const at::Tensor start = bf16_values();
  const double factor = 0.123456789;  // far from a bf16 value: mul_ rounds it to 0.12353515625 first
  at::Tensor t = start.clone();
  accumulate::scale_tensor_(t, factor);
  const at::Tensor want = start.to(at::kFloat).mul_(float(factor)).to(at::kBFloat16);
  CHECK(at::equal(t, want));
  CHECK_FALSE(at::equal(start.clone().mul_(factor), want));  // the test can tell the two apart
  // fp32 takes mul_.
  at::Tensor f = start.to(at::kFloat);
  accumulate::scale_tensor_(f, factor);
  CHECK(at::equal(f, start.to(at::kFloat).mul_(factor)));
}

TEST_CASE("clipping a bf16 shadow tree lands on max_norm", "[accumulate][scale]") {
  torch::nn::Linear lin(300, 300);
  accumulate::ShadowAccumulator acc(lin->parameters(), at::kBFloat16);
  acc.begin();
  at::manual_seed(3);
  (lin->forward(at::randn({2, 300})) * 100).sum().backward();  // varied values: rounding errors average out
  acc.end();
  double sum = 0;
  for (const auto& s : acc.shadows()) sum += s.to(at::kDouble).pow(2).sum().item<double>();
  const double before = acc.global_norm();
  CHECK(before == Approx(std::sqrt(sum)).epsilon(1e-5));  // fp32 sums per block: 3.4e-6 off here
  CHECK(acc.clip_global_norm_(0.37) == before);
  CHECK(acc.global_norm() == Approx(0.37).epsilon(1e-3));
}
