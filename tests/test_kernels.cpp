// The fused loops of src/kernels against the ATen ops they replace: fp32 within rounding, bf16 within one bf16
// rounding, NaN propagated, and the same bits for any thread count or task size.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>

#include "kernels/CrossEntropy.h"
#include "kernels/FastExp.h"
#include "model/RmsNormFunction.h"

using namespace shadowgrad;

namespace {

constexpr int64_t kIgnore = -100;

// The reference: fp32 log_softmax of the logits; loss per row, and softmax - onehot (0 on ignored rows).
std::pair<at::Tensor, at::Tensor> reference_cross_entropy(const at::Tensor& logits, const at::Tensor& targets) {
  auto log_probs = at::log_softmax(logits.to(at::kFloat), -1);
  auto valid = targets.ne(kIgnore);
  auto safe = targets.clamp_min(0).unsqueeze(1);
  auto loss = -log_probs.gather(1, safe).squeeze(1) * valid;
  auto grad = log_probs.exp().scatter_add(1, safe, -at::ones_like(safe, at::kFloat)) * valid.unsqueeze(1);
  return {loss, grad};
}

// The kernel on a copy of `logits` (fp32 or bf16); returns (loss per row, gradient as fp32).
std::pair<at::Tensor, at::Tensor> fused_cross_entropy(const at::Tensor& logits, const at::Tensor& targets,
                                                      int64_t grain) {
  auto buffer = logits.clone();
  auto loss = at::empty({logits.size(0)}, at::kFloat);
  if (buffer.scalar_type() == at::kBFloat16)
    kernels::cross_entropy_rows(reinterpret_cast<uint16_t*>(buffer.data_ptr<at::BFloat16>()),
                                targets.data_ptr<int64_t>(), loss.data_ptr<float>(), logits.size(0), logits.size(1),
                                kIgnore, grain);
  else
    kernels::cross_entropy_rows(buffer.data_ptr<float>(), targets.data_ptr<int64_t>(), loss.data_ptr<float>(),
                                logits.size(0), logits.size(1), kIgnore, grain);
  return {loss, buffer.to(at::kFloat)};
}

double max_abs(const at::Tensor& a, const at::Tensor& b) { return (a - b).abs().max().item<double>(); }

struct Logits {
  at::Tensor logits, targets;
};

Logits odd_logits(int64_t rows, int64_t vocab) {  // vocab not a multiple of 16: the tail loops run
  auto gen = at::make_generator<at::CPUGeneratorImpl>(11);
  auto logits = at::randn({rows, vocab}, gen, at::kFloat) * 4;
  auto targets = at::randint(0, vocab, {rows}, gen, at::kLong);
  targets[1] = kIgnore;  // a padding row
  targets[2] = vocab - 1;  // the target in the tail
  return {logits, targets};
}

} // namespace

TEST_CASE("fast_exp is within 2 ulp of std::exp and keeps NaN", "[kernels]") {
  double worst = 0;
  for (float x = -87.0f; x < 88.0f; x += 0.0137f) {
    const float want = std::exp(x), got = kernels::fast_exp(x);
    worst = std::max(worst, std::abs(double(got) - want) / (std::nextafter(want, INFINITY) - want));
  }
  CHECK(worst <= 2.0);
  CHECK(std::isnan(kernels::fast_exp(std::numeric_limits<float>::quiet_NaN())));
  CHECK(kernels::fast_exp(-1000.0f) >= 0.0f);
  CHECK(kernels::fast_exp(-1000.0f) < 1e-37f);
  CHECK(std::isfinite(kernels::fast_exp(1000.0f)));
}

TEST_CASE("fused cross-entropy rows equal log_softmax's loss and gradient in fp32", "[kernels][loss]") {
  const auto [logits, targets] = odd_logits(37, 1001);
  const auto [want_loss, want_grad] = reference_cross_entropy(logits, targets);
  const auto [loss, grad] = fused_cross_entropy(logits, targets, 4);
  CHECK(max_abs(loss, want_loss) <= 2e-6 * want_loss.abs().max().item<double>());
  CHECK(max_abs(grad, want_grad) <= 1e-6);
  CHECK(loss[1].item<float>() == 0.0f);
  CHECK(grad[1].abs().max().item<float>() == 0.0f);
  CHECK(grad.sum(1).abs().max().item<double>() < 1e-5);  // softmax - onehot sums to 0 in each row
}

TEST_CASE("fused cross-entropy rows in bf16 are the fp32 result rounded once", "[kernels][loss]") {
  const auto [logits32, targets] = odd_logits(37, 1001);
  const auto logits = logits32.to(at::kBFloat16);
  const auto [want_loss, want_grad] = reference_cross_entropy(logits, targets);  // fp32 math on the bf16 values
  const auto [loss, grad] = fused_cross_entropy(logits, targets, 4);
  CHECK(max_abs(loss, want_loss) <= 2e-6 * want_loss.abs().max().item<double>());  // the loss stays fp32
  // Each gradient entry is rounded to bf16 once: within half a bf16 ulp (2^-9 relative) of the fp32 value.
  CHECK(((grad - want_grad).abs() <= want_grad.abs() * (1.0 / 256) + 1e-30).all().item<bool>());
}

TEST_CASE("fused cross-entropy rows give the same bits for any task size and thread count", "[kernels][loss]") {
  const auto [logits, targets] = odd_logits(37, 1001);
  const int threads = at::get_num_threads();
  at::set_num_threads(1);
  const auto [loss1, grad1] = fused_cross_entropy(logits.to(at::kBFloat16), targets, 1);
  at::set_num_threads(2);
  const auto [loss2, grad2] = fused_cross_entropy(logits.to(at::kBFloat16), targets, 7);
  at::set_num_threads(threads);
  CHECK(at::equal(loss1, loss2));
  CHECK(at::equal(grad1, grad2));
}

TEST_CASE("a NaN logit makes its row's loss NaN and leaves the other rows alone", "[kernels][loss]") {
  auto [logits, targets] = odd_logits(8, 100);
  logits[3][50] = std::numeric_limits<float>::quiet_NaN();
  const auto [loss, grad] = fused_cross_entropy(logits, targets, 1);
  CHECK(std::isnan(loss[3].item<float>()));
  CHECK(std::isfinite(loss[4].item<float>()));
  const auto [want_loss, want_grad] = reference_cross_entropy(logits, targets);
  CHECK(max_abs(loss[4], want_loss[4]) < 1e-5);
}

namespace {

struct NormResult {
  at::Tensor y, dx, dw;
};

// y, dx, dw of an RMSNorm over x [rows x dim] with weight w, upstream gradient g; `fused` picks the node.
NormResult norm_with_grads(const at::Tensor& x0, const at::Tensor& w0, const at::Tensor& g, bool fused) {
  auto x = x0.detach().clone().requires_grad_();
  auto w = w0.detach().clone().requires_grad_();
  at::Tensor y = fused ? model::fused_rms_norm(x, w, 1e-6) : model::rms_norm_op_chain(x, w, 1e-6);
  y.backward(g);
  return {y.detach().to(at::kFloat), x.grad().to(at::kFloat), w.grad()};
}

struct NormInputs {
  at::Tensor x, w, g;
};

NormInputs norm_inputs(at::ScalarType dtype) {  // dim 75: a tail after the 16-lane body; 70 rows: 3 blocks
  auto gen = at::make_generator<at::CPUGeneratorImpl>(5);
  return {(at::randn({70, 75}, gen, at::kFloat) * 3).to(dtype), at::randn({75}, gen, at::kFloat) * 0.5 + 1,
          at::randn({70, 75}, gen, at::kFloat).to(dtype)};
}

} // namespace

TEST_CASE("fused RMSNorm equals the op chain in fp32: output and both gradients", "[kernels][norm]") {
  const auto in = norm_inputs(at::kFloat);
  const auto want = norm_with_grads(in.x, in.w, in.g, false), got = norm_with_grads(in.x, in.w, in.g, true);
  CHECK(max_abs(got.y, want.y) <= 2e-6 * want.y.abs().max().item<double>());
  CHECK(max_abs(got.dx, want.dx) <= 2e-6 * want.dx.abs().max().item<double>());
  CHECK(max_abs(got.dw, want.dw) <= 2e-6 * want.dw.abs().max().item<double>());
}

TEST_CASE("fused RMSNorm in bf16 is within one bf16 rounding of the op chain", "[kernels][norm]") {
  const auto in = norm_inputs(at::kBFloat16);
  const auto want = norm_with_grads(in.x, in.w, in.g, false), got = norm_with_grads(in.x, in.w, in.g, true);
  // Outputs and dx are rounded to bf16 once each way: they may differ by one bf16 ulp (2^-8 relative).
  CHECK(((got.y - want.y).abs() <= want.y.abs() * (1.0 / 128) + 1e-6).all().item<bool>());
  CHECK(max_abs(got.dx, want.dx) <= (1.0 / 64) * want.dx.abs().max().item<double>());
  CHECK(max_abs(got.dw, want.dw) <= 1e-4 * want.dw.abs().max().item<double>());  // dw stays fp32
}

TEST_CASE("fused RMSNorm gives the same bits for 1 and 2 threads and carries a NaN", "[kernels][norm]") {
  auto in = norm_inputs(at::kBFloat16);
  const int threads = at::get_num_threads();
  at::set_num_threads(1);
  const auto one = norm_with_grads(in.x, in.w, in.g, true);
  at::set_num_threads(2);
  const auto two = norm_with_grads(in.x, in.w, in.g, true);
  at::set_num_threads(threads);
  CHECK(at::equal(one.y, two.y));
  CHECK(at::equal(one.dx, two.dx));
  CHECK(at::equal(one.dw, two.dw));
  in.x[4][9] = std::numeric_limits<float>::quiet_NaN();
  const auto nan = norm_with_grads(in.x, in.w, in.g, true);
  CHECK(nan.y[4].isnan().all().item<bool>());
  CHECK(!nan.y[5].isnan().any().item<bool>());
}
