// The fused SwiGLU and RoPE nodes (model/SwiGluFunction.h, model/RopeFunction.h, over src/kernels) against the ATen
// expressions they replaced in the decoder, forward and both gradients: fp32 within 1e-6 of the largest value (RoPE:
// equal), bf16 within bf16's rounding and rounded once; odd sizes (tails of no whole vector), results equal with 1
// and 2 threads, and NaN in, NaN out.
#include <catch2/catch.hpp>

#include <cmath>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <torch/csrc/autograd/autograd.h>

#include "model/RopeFunction.h"
#include "model/SwiGluFunction.h"
#include "RelativeError.h"

using namespace shadowgrad;

namespace {

// The decoder's expressions before the fusion (Decoder.cpp, 2026-11-30).
at::Tensor swiglu_aten(const at::Tensor& gate, const at::Tensor& up) { return at::silu(gate) * up; }

// x [B,T,H,D] -> [B,H,T,D]
at::Tensor rope_aten(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin, double scale) {
  auto xt = x.transpose(1, 2);
  const int64_t T = xt.size(2), half = xt.size(3) / 2;
  auto rotated = at::cat({-xt.slice(-1, half), xt.slice(-1, 0, half)}, -1);
  auto y = xt * cos.slice(0, 0, T) + rotated * sin.slice(0, 0, T);
  return scale == 1.0 ? y : y.mul_(scale);
}

using relative_error::rel_diff;

// Every element of `rounded` (bf16) within half a bf16 spacing of `exact` (fp32), plus `slack` of the largest:
// one rounding of a value correct to fp32 accuracy.
bool rounded_once(const at::Tensor& rounded, const at::Tensor& exact, double slack) {
  auto err = (rounded.to(at::kFloat) - exact).abs();
  auto bound = exact.abs() * std::ldexp(1.0, -8) + slack * exact.abs().max().item<double>();
  return (err <= bound).all().item<bool>();
}

bool same_values(const at::Tensor& a, const at::Tensor& b) {
  return a.sizes() == b.sizes() && a.scalar_type() == b.scalar_type() && (a == b).all().item<bool>();
}

struct OutAndGrads {
  at::Tensor out;
  std::vector<at::Tensor> grads;  // of each input
};

// out = f(inputs), then the gradients of sum(out * grad_out).
template <class F>
OutAndGrads run(F f, const std::vector<at::Tensor>& inputs, const at::Tensor& grad_out) {
  std::vector<at::Tensor> leaves;
  for (const auto& t : inputs) leaves.push_back(t.detach().clone().requires_grad_());
  OutAndGrads r;
  r.out = f(leaves);
  torch::autograd::backward({r.out}, {grad_out});
  r.out = r.out.detach();
  for (auto& l : leaves) r.grads.push_back(l.grad());
  return r;
}

OutAndGrads with_threads(int threads, const std::function<OutAndGrads()>& f) {
  const int before = at::get_num_threads();
  at::set_num_threads(threads);
  OutAndGrads r = f();
  at::set_num_threads(before);
  return r;
}

struct SwiGluCase {
  at::Tensor gate, up, grad_out;  // fp32
};

SwiGluCase swiglu_case(std::vector<int64_t> shape, uint64_t seed) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  return {at::randn(shape, gen) * 4, at::randn(shape, gen), at::randn(shape, gen)};
}

OutAndGrads swiglu_fused(const SwiGluCase& c, c10::ScalarType dtype) {
  return run([](const std::vector<at::Tensor>& in) { return model::swiglu(in[0], in[1]); },
             {c.gate.to(dtype), c.up.to(dtype)}, c.grad_out.to(dtype));
}

OutAndGrads swiglu_reference(const SwiGluCase& c, c10::ScalarType dtype) {
  return run([](const std::vector<at::Tensor>& in) { return swiglu_aten(in[0], in[1]); },
             {c.gate.to(dtype), c.up.to(dtype)}, c.grad_out.to(dtype));
}

struct RopeCase {
  at::Tensor x, cos, sin, grad_out;  // fp32; x [B,T,H,D], grad_out [B,H,T,D]
};

// Tables as the decoder builds them: fp64 angles, half-split, rows for more positions than T.
RopeCase rope_case(int64_t B, int64_t T, int64_t H, int64_t D, uint64_t seed) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  const int64_t half = D / 2;
  auto inv_freq = at::pow(10000.0, -at::arange(half, at::kDouble) / double(half));
  auto angles = at::outer(at::arange(T + 5, at::kDouble), inv_freq);
  return {at::randn({B, T, H, D}, gen), at::cat({angles.cos(), angles.cos()}, -1).to(at::kFloat),
          at::cat({angles.sin(), angles.sin()}, -1).to(at::kFloat), at::randn({B, H, T, D}, gen)};
}

// model::rope without positions (its last argument has a default, which a function pointer does not carry).
at::Tensor rope_fused(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin, double scale) {
  return model::rope(x, cos, sin, scale);
}

template <class F>
OutAndGrads rope_run(F f, const RopeCase& c, c10::ScalarType dtype, double scale) {
  const auto cos = c.cos.to(dtype), sin = c.sin.to(dtype);
  return run([&](const std::vector<at::Tensor>& in) { return f(in[0], cos, sin, scale); }, {c.x.to(dtype)},
             c.grad_out.to(dtype));
}

} // namespace

TEST_CASE("swiglu matches silu(gate) * up in fp32 forward and backward", "[fused]") {
  for (auto shape : {std::vector<int64_t>{3, 37, 53}, std::vector<int64_t>{2, 129, 131}, std::vector<int64_t>{7}}) {
    auto c = swiglu_case(shape, 1);
    auto fused = swiglu_fused(c, at::kFloat), ref = swiglu_reference(c, at::kFloat);
    CHECK(rel_diff(fused.out, ref.out) < 1e-6);
    CHECK(rel_diff(fused.grads[0], ref.grads[0]) < 1e-6);
    CHECK(rel_diff(fused.grads[1], ref.grads[1]) < 1e-6);
  }
}

TEST_CASE("swiglu in bf16 is rounded once and within bf16 rounding of the ATen ops", "[fused]") {
  auto c = swiglu_case({3, 37, 53}, 2);
  auto fused = swiglu_fused(c, at::kBFloat16), ref = swiglu_reference(c, at::kBFloat16);
  REQUIRE(fused.out.scalar_type() == at::kBFloat16);
  REQUIRE(fused.grads[0].scalar_type() == at::kBFloat16);
  CHECK(rel_diff(fused.out, ref.out) < 1e-2);
  CHECK(rel_diff(fused.grads[0], ref.grads[0]) < 1e-2);
  CHECK(rel_diff(fused.grads[1], ref.grads[1]) < 1e-2);
  // fp32 math on the same bf16 inputs, rounded once at the end.
  SwiGluCase rounded{c.gate.to(at::kBFloat16).to(at::kFloat), c.up.to(at::kBFloat16).to(at::kFloat),
                     c.grad_out.to(at::kBFloat16).to(at::kFloat)};
  auto exact = swiglu_reference(rounded, at::kFloat);
  CHECK(rounded_once(fused.out, exact.out, 1e-6));
  CHECK(rounded_once(fused.grads[0], exact.grads[0], 1e-6));
  CHECK(rounded_once(fused.grads[1], exact.grads[1], 1e-6));
  // The check can fail: the ATen chain rounds twice or more and is not always within half a spacing.
  CHECK_FALSE(rounded_once(ref.grads[0], exact.grads[0], 1e-6));
}

TEST_CASE("swiglu gives the same bits with 1 and 2 threads", "[fused]") {
  auto c = swiglu_case({2, 129, 131}, 3);  // 33798 elements: several blocks
  for (auto dtype : {at::kFloat, at::kBFloat16}) {
    auto one = with_threads(1, [&] { return swiglu_fused(c, dtype); });
    auto two = with_threads(2, [&] { return swiglu_fused(c, dtype); });
    CHECK(same_values(one.out, two.out));
    CHECK(same_values(one.grads[0], two.grads[0]));
    CHECK(same_values(one.grads[1], two.grads[1]));
  }
}

TEST_CASE("swiglu passes NaN through", "[fused]") {
  for (auto dtype : {at::kFloat, at::kBFloat16}) {
    auto c = swiglu_case({5, 19}, 4);
    c.gate[1][3] = NAN;
    c.up[2][18] = NAN;
    c.grad_out[4][0] = NAN;
    auto fused = swiglu_fused(c, dtype), ref = swiglu_reference(c, dtype);
    CHECK(at::isnan(fused.out).sum().item<int64_t>() == 2);
    CHECK(same_values(at::isnan(fused.out), at::isnan(ref.out)));
    CHECK(at::isnan(fused.grads[0])[1][3].item<bool>());
    CHECK(at::isnan(fused.grads[1])[1][3].item<bool>());
    CHECK(at::isnan(fused.grads[0])[2][18].item<bool>());
    CHECK(same_values(at::isnan(fused.grads[0]), at::isnan(ref.grads[0])));
    CHECK(same_values(at::isnan(fused.grads[1]), at::isnan(ref.grads[1])));
  }
}

TEST_CASE("swiglu falls back to the ATen ops for other dtypes", "[fused]") {
  auto c = swiglu_case({3, 11}, 5);  // fp64 (ATen's CPU silu has no fp16)
  auto fused = swiglu_fused(c, at::kDouble), ref = swiglu_reference(c, at::kDouble);
  CHECK(same_values(fused.out, ref.out));
  CHECK(same_values(fused.grads[0], ref.grads[0]));
}

TEST_CASE("rope in fp32 gives the ATen expression's values forward and backward", "[fused]") {
  for (double scale : {1.0, 0.125, 1.0 / std::sqrt(96.0)}) {
    for (auto c : {rope_case(2, 37, 3, 10, 6), rope_case(1, 19, 8, 64, 7), rope_case(3, 5, 2, 2, 8)}) {
      auto fused = rope_run(rope_fused, c, at::kFloat, scale), ref = rope_run(rope_aten, c, at::kFloat, scale);
      REQUIRE(fused.out.is_contiguous());
      CHECK(same_values(fused.out, ref.out.contiguous()));
      CHECK(same_values(fused.grads[0], ref.grads[0]));
    }
  }
}

TEST_CASE("rope in bf16 is rounded once and within bf16 rounding of the ATen expression", "[fused]") {
  auto c = rope_case(2, 37, 3, 22, 9);
  auto fused = rope_run(rope_fused, c, at::kBFloat16, 0.125), ref = rope_run(rope_aten, c, at::kBFloat16, 0.125);
  REQUIRE(fused.out.scalar_type() == at::kBFloat16);
  CHECK(rel_diff(fused.out, ref.out) < 1e-2);
  CHECK(rel_diff(fused.grads[0], ref.grads[0]) < 1e-2);
  RopeCase rounded{c.x.to(at::kBFloat16).to(at::kFloat), c.cos.to(at::kBFloat16).to(at::kFloat),
                   c.sin.to(at::kBFloat16).to(at::kFloat), c.grad_out.to(at::kBFloat16).to(at::kFloat)};
  auto exact = rope_run(rope_aten, rounded, at::kFloat, 0.125);
  CHECK(rounded_once(fused.out, exact.out, 1e-6));
  CHECK(rounded_once(fused.grads[0], exact.grads[0], 1e-6));
  CHECK_FALSE(rounded_once(ref.out, exact.out, 1e-6));  // the ATen expression rounds three times
}

TEST_CASE("rope with positions rotates each token by its own position's row, forward and backward", "[fused][sft]") {
  auto c = rope_case(2, 11, 3, 8, 12);
  // Row 0 packs examples of 4, 3, 2, 1 and 1 tokens (positions restart); row 1 starts at position 5.
  auto pos = at::tensor(std::vector<int64_t>{0, 1, 2, 3, 0, 1, 2, 0, 1, 0, 0, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15},
                        at::kLong).view({2, 11});
  auto x = c.x.clone().requires_grad_(true), x_ref = c.x.clone().requires_grad_(true);
  auto out = model::rope(x, c.cos, c.sin, 0.125, pos);  // [B,H,T,D]
  std::vector<at::Tensor> rows;  // the reference: each token alone, through the ATen expression at its position
  for (int64_t b = 0; b < 2; ++b) {
    std::vector<at::Tensor> tokens;
    for (int64_t t = 0; t < 11; ++t) {
      const int64_t p = pos[b][t].item<int64_t>();
      tokens.push_back(rope_aten(x_ref.slice(0, b, b + 1).slice(1, t, t + 1), c.cos.slice(0, p, p + 1),
                                 c.sin.slice(0, p, p + 1), 0.125));  // [1,H,1,D]
    }
    rows.push_back(at::cat(tokens, 2));
  }
  auto ref = at::cat(rows, 0);
  CHECK(same_values(out, ref));
  (out * c.grad_out).sum().backward();
  (ref * c.grad_out).sum().backward();
  CHECK(same_values(x.grad(), x_ref.grad()));
}

TEST_CASE("rope's backward reads a gradient laid out as x ([B,T,H,D], transposed) where it lies, same bits",
          "[fused]") {
  // SDPA's backward hands q's and k's gradients as transposed views of [B,T,H,D]; the kernel reads them in place
  // instead of copying them to [B,H,T,D] first. Either layout must give the same gradient, bit for bit.
  auto c = rope_case(2, 13, 3, 8, 14);
  auto pos = at::arange(13, at::kLong).flip(0).repeat({2, 1});  // and with a gathered table
  for (auto dtype : {at::kFloat, at::kBFloat16})
    for (bool positions : {false, true}) {
      INFO(c10::toString(dtype) << ", positions " << positions);
      auto g = c.grad_out.to(dtype).transpose(1, 2).contiguous().transpose(1, 2);  // [B,H,T,D] view of [B,T,H,D]
      REQUIRE_FALSE(g.is_contiguous());
      auto grad_of = [&](const at::Tensor& grad_out) {
        auto x = c.x.to(dtype).clone().requires_grad_(true);  // a fresh leaf per call
        auto out = positions ? model::rope(x, c.cos.to(dtype), c.sin.to(dtype), 0.125, pos)
                             : model::rope(x, c.cos.to(dtype), c.sin.to(dtype), 0.125);
        out.backward(grad_out);
        return x.grad();
      };
      CHECK(same_values(grad_of(g), grad_of(g.contiguous())));
    }
}

TEST_CASE("rope gives the same bits with 1 and 2 threads", "[fused]") {
  auto c = rope_case(3, 67, 5, 22, 10);  // 1005 rows: several blocks
  for (auto dtype : {at::kFloat, at::kBFloat16}) {
    auto one = with_threads(1, [&] { return rope_run(rope_fused, c, dtype, 0.125); });
    auto two = with_threads(2, [&] { return rope_run(rope_fused, c, dtype, 0.125); });
    CHECK(same_values(one.out, two.out));
    CHECK(same_values(one.grads[0], two.grads[0]));
  }
}

TEST_CASE("rope passes NaN through", "[fused]") {
  for (auto dtype : {at::kFloat, at::kBFloat16}) {
    auto c = rope_case(2, 7, 3, 10, 11);
    c.x[1][4][2][3] = NAN;         // reaches y[1][2][4] at d = 3 and its partner d = 8
    c.grad_out[0][1][5][9] = NAN;  // reaches grad x[0][5][1] at d = 9 and d = 4
    auto fused = rope_run(rope_fused, c, dtype, 0.125), ref = rope_run(rope_aten, c, dtype, 0.125);
    CHECK(at::isnan(fused.out).sum().item<int64_t>() == 2);
    CHECK(at::isnan(fused.out)[1][2][4][8].item<bool>());
    CHECK(same_values(at::isnan(fused.out), at::isnan(ref.out.contiguous())));
    CHECK(at::isnan(fused.grads[0]).sum().item<int64_t>() == 2);
    CHECK(at::isnan(fused.grads[0])[0][5][1][4].item<bool>());
    CHECK(same_values(at::isnan(fused.grads[0]), at::isnan(ref.grads[0])));
  }
}

TEST_CASE("rope falls back to the ATen expression for fp16 and refuses odd head_dim", "[fused]") {
  auto c = rope_case(2, 9, 3, 10, 12);
  auto fused = rope_run(rope_fused, c, at::kHalf, 0.125), ref = rope_run(rope_aten, c, at::kHalf, 0.125);
  CHECK(same_values(fused.out, ref.out.contiguous()));
  CHECK(same_values(fused.grads[0], ref.grads[0]));
  CHECK_THROWS_AS(model::rope(at::zeros({1, 2, 1, 3}), at::zeros({2, 3}), at::zeros({2, 3}), 1.0),
                  std::invalid_argument);
  CHECK_THROWS_AS(model::rope(c.x, c.cos.slice(0, 0, 4), c.sin.slice(0, 0, 4), 1.0), std::invalid_argument);
}
