// FusedAdamW against torch::optim::AdamW: the same parameters and state after several steps, with fp32 and
// bf16 gradients; and the stock fallback for cases the fused loop does not take.
#include <catch2/catch.hpp>

#include <cmath>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/optim/adamw.h>

#include "accumulate/Scale.h"
#include "train/FusedAdamW.h"
#include "util/OptimizerStateKey.h"
#include "RelativeError.h"

using namespace shadowgrad;

namespace {

using relative_error::rel_diff;

// Runs `steps` updates of both optimizers from the same start and gradients; returns the worst relative
// difference over parameters and both moment buffers.
double compare(c10::ScalarType grad_dtype, int steps, bool amsgrad = false) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(11);
  std::vector<at::Tensor> start{at::randn({100003}, gen), at::randn({17, 5}, gen)};
  auto clone = [&] {
    std::vector<at::Tensor> out;
    for (const auto& t : start) out.push_back(t.clone().requires_grad_());
    return out;
  };
  auto pa = clone(), pb = clone();
  auto options = torch::optim::AdamWOptions(3e-2).betas({0.9, 0.95}).eps(1e-8).weight_decay(0.1).amsgrad(amsgrad);
  torch::optim::AdamW stock(pa, options);
  train::FusedAdamW fused(pb, options);
  for (int s = 0; s < steps; ++s) {
    for (size_t i = 0; i < start.size(); ++i) {
      auto g = at::randn(start[i].sizes(), gen).to(grad_dtype);
      pa[i].mutable_grad() = g;
      pb[i].mutable_grad() = g.clone();
    }
    stock.step();
    fused.step();
  }
  double worst = 0;
  for (size_t i = 0; i < start.size(); ++i) {
    worst = std::max(worst, rel_diff(pb[i].detach(), pa[i].detach()));
    auto key = shadowgrad::util::optimizer_state_key(pa[i]);
    auto key_b = shadowgrad::util::optimizer_state_key(pb[i]);
    auto& sa = static_cast<torch::optim::AdamWParamState&>(*stock.state().at(key));
    auto& sb = static_cast<torch::optim::AdamWParamState&>(*fused.state().at(key_b));
    CHECK(sa.step() == sb.step());
    worst = std::max(worst, rel_diff(sb.exp_avg(), sa.exp_avg()));
    worst = std::max(worst, rel_diff(sb.exp_avg_sq(), sa.exp_avg_sq()));
  }
  return worst;
}

} // namespace

TEST_CASE("FusedAdamW matches torch::optim::AdamW with fp32 gradients", "[optimizer]") {
  CHECK(compare(at::kFloat, 5) <= 1e-6);
}

TEST_CASE("FusedAdamW matches torch::optim::AdamW with bf16 gradients", "[optimizer][bf16]") {
  CHECK(compare(at::kBFloat16, 5) <= 1e-6);
}

TEST_CASE("FusedAdamW falls back to the stock step for amsgrad", "[optimizer]") {
  CHECK(compare(at::kFloat, 3, true) == 0.0);
}

TEST_CASE("FusedAdamW moves the parameters the way AdamW does, not merely somewhere", "[optimizer]") {
  // Guard against a comparison that could never fail: a wrong learning rate must show up.
  auto p = at::ones({1000}).requires_grad_();
  auto q = at::ones({1000}).requires_grad_();
  train::FusedAdamW a({p}, torch::optim::AdamWOptions(1e-2));
  torch::optim::AdamW b({q}, torch::optim::AdamWOptions(2e-2));
  p.mutable_grad() = at::ones({1000});
  q.mutable_grad() = at::ones({1000});
  a.step();
  b.step();
  CHECK(rel_diff(p.detach(), q.detach()) > 1e-3);
}

TEST_CASE("bf16 moments: stochastic rounding within one ulp, unbiased, reproducible, and half the state", "[optimizer][bf16]") {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(5);
  const auto start = at::randn({200000}, gen);
  const auto grad = at::randn({200000}, gen);
  auto run = [&](c10::ScalarType state_dtype) {
    auto p = start.clone().requires_grad_();
    train::FusedAdamW opt({p}, torch::optim::AdamWOptions(1e-2).betas({0.9, 0.95}));
    opt.set_state_dtype(state_dtype);
    p.mutable_grad() = grad.clone();
    opt.step();
    auto& s = static_cast<torch::optim::AdamWParamState&>(*opt.state().begin()->second);
    return std::make_pair(s.exp_avg().clone(), s.exp_avg_sq().clone());
  };
  const auto [m32, v32] = run(at::kFloat);
  const auto [m16, v16] = run(at::kBFloat16);
  REQUIRE(m16.scalar_type() == at::kBFloat16);
  REQUIRE(v16.scalar_type() == at::kBFloat16);
  CHECK(m16.element_size() * 2 == m32.element_size());
  const auto [m16b, v16b] = run(at::kBFloat16);
  CHECK(at::equal(m16, m16b));  // the same bits on a second run: the rounding is a pure function of the step
  CHECK(at::equal(v16, v16b));
  for (const auto& [low, exact] : {std::make_pair(m16, m32), std::make_pair(v16, v32)}) {
    // The error in units of the bf16 spacing at each value: within (-1, 1), and zero on average (round-to-nearest
    // would also be within 1/2 ulp, but it never rounds a value to the farther neighbour: SR must, often).
    const auto nearest = exact.to(at::kBFloat16).to(at::kFloat);
    const auto ulp = at::abs(exact) * std::ldexp(1.0, -7);  // at least the spacing's lower bound, 2^-8 x 2|x|
    const auto err = (low.to(at::kFloat) - exact) / ulp.clamp_min(1e-30);
    CHECK(err.abs().max().item<double>() < 1.0);
    CHECK(std::abs(err.mean().item<double>()) < 0.01);
    const double farther = (low.to(at::kFloat) != nearest).to(at::kFloat).mean().item<double>();
    INFO("fraction rounded to the farther neighbour " << farther);
    CHECK(farther > 0.2);
    CHECK(farther < 0.3);  // uniform low bits: 1/4 on average
  }
}

TEST_CASE("a gradient scale read by FusedAdamW gives the bits of scaling the gradient first, and lasts one step",
          "[optimizer][clip]") {
  // Gradient clipping hands its factor to the update instead of a pass over the gradients (train/TrainStep.cpp):
  // the parameters and moments must be bit for bit those of accumulate::scale_tensor_ followed by the plain step.
  const auto grad_dtype = GENERATE(at::kFloat, at::kBFloat16);
  const auto state_dtype = GENERATE(at::kFloat, at::kBFloat16);
  INFO("grad " << c10::toString(grad_dtype) << ", moments " << c10::toString(state_dtype));
  auto gen = at::make_generator<at::CPUGeneratorImpl>(5);
  const auto start = at::randn({70001}, gen);
  auto pa = start.clone().requires_grad_(), pb = start.clone().requires_grad_();
  auto options = torch::optim::AdamWOptions(3e-2).betas({0.9, 0.95}).eps(1e-8).weight_decay(0.1);
  train::FusedAdamW first(std::vector<at::Tensor>{pa}, options), read(std::vector<at::Tensor>{pb}, options);
  first.set_state_dtype(state_dtype);
  read.set_state_dtype(state_dtype);
  const double factor = 0.3137;  // not a power of two: every product is rounded
  for (int s = 0; s < 3; ++s) {
    // A gradient with large and tiny values, so that the scaled bf16 values round.
    auto g = (at::randn({70001}, gen) * at::exp(at::randn({70001}, gen) * 4)).to(grad_dtype);
    pa.mutable_grad() = g.clone();
    pb.mutable_grad() = g.clone();
    accumulate::scale_tensor_(pa.mutable_grad(), factor);
    first.step();
    if (s < 2) read.scale_next_gradients(factor);
    else accumulate::scale_tensor_(pb.mutable_grad(), factor);  // step 3: the factor of step 2 must not linger
    read.step();
    CHECK(at::equal(pb.grad(), s < 2 ? g : pa.grad()));  // the gradient itself is left as it was
    CHECK(at::equal(pa.detach(), pb.detach()));
    auto& sa = static_cast<torch::optim::AdamWParamState&>(*first.state().at(util::optimizer_state_key(pa)));
    auto& sb = static_cast<torch::optim::AdamWParamState&>(*read.state().at(util::optimizer_state_key(pb)));
    CHECK(at::equal(sa.exp_avg(), sb.exp_avg()));
    CHECK(at::equal(sa.exp_avg_sq(), sb.exp_avg_sq()));
  }
  CHECK(!at::equal(pa.detach(), start));
}
