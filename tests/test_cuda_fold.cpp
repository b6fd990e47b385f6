// The one-pass CUDA fold on a GPU (ctest label cuda; skipped without one): bit for bit the CPU fold for every case of
// FoldCases.h, over several kernel blocks and a ragged tail; the embedding's rows mode; the fused squared norm; and
// ShadowAccumulator on CUDA giving the CPU accumulator's bits with stochastic rounding and the same seed.
#include <catch2/catch.hpp>

#include <cmath>

#include <ATen/ATen.h>
#include <torch/cuda.h>

#include "FoldCases.h"
#include "Skip.h"
#include "accumulate/CudaFold.h"
#include "accumulate/ShadowAccumulator.h"
#include "accumulate/SquaredNorm.h"
#include "accumulate/StochasticRounding.h"

using namespace shadowgrad;
using namespace shadowgrad::accumulate;

namespace {

#define SG_NEED_CUDA_FOLD()                                                                       \
  do {                                                                                            \
    /* First: it loads the CUDA library, and with it libtorch_cuda, which registers CUDA with ATen */ \
    if (!cuda_fold_built()) SG_SKIP("no CUDA fold kernel (no libshadowgrad_cuda.so, or no nvcc at build time)"); \
    if (!torch::cuda::is_available()) SG_SKIP("no CUDA device is visible");                       \
  } while (0)

constexpr int64_t kElements = 3 * kNormBlock + 1234;  // three full kernel blocks and a ragged one

} // namespace

TEST_CASE("cuda fold: bit for bit the CPU fold, every dtype pair and rounding", "[cuda][fold]") {
  SG_NEED_CUDA_FOLD();
  for (const auto& c : test_support::fold_cases()) {
    INFO(test_support::describe(c));
    const at::Tensor dst = test_support::fold_shadow(c, kElements), src = test_support::fold_gradient(c, kElements);
    const uint64_t key = rounding_key(42, {7, 1, 3});
    const at::Tensor want = test_support::cpu_fold(c, dst, src, key);
    at::Tensor got = dst.cuda();
    CudaTally tally;
    CudaFoldOptions o;
    o.overwrite = c.overwrite;
    o.stochastic = c.stochastic;
    o.key = key;
    cuda_fold_(got, src.cuda(), o, tally);
    CHECK(test_support::differing_bits(got, want) == 0);
  }
}

TEST_CASE("cuda fold: the squared norm fused into the fold matches the CPU's blocked norm", "[cuda][fold]") {
  SG_NEED_CUDA_FOLD();
  at::manual_seed(5);
  const at::Tensor grad = at::randn({kElements}), shadow = at::zeros({kElements}, at::kBFloat16);
  at::Tensor dst = shadow.cuda();
  CudaTally tally;
  CudaFoldOptions o;
  o.micro = 1;
  cuda_fold_(dst, grad.cuda(), o, tally);
  cuda_fold_(dst, grad.cuda(), o, tally);  // slot 1 sums both
  const double want = 2 * squared_norm(grad);
  const double got = tally.micro_sq[1].item<double>();
  CHECK(tally.micro_sq[0].item<double>() == 0.0);
  CHECK(std::abs(got - want) <= 1e-5 * want);
}

TEST_CASE("cuda fold: rows mode gives round_add_rows_'s bits", "[cuda][fold]") {
  SG_NEED_CUDA_FOLD();
  at::manual_seed(6);
  const at::Tensor shadow = at::randn({300, 64}).to(at::kBFloat16);
  const at::Tensor rows = at::tensor(std::vector<int64_t>{299, 0, 17, 150, 3});
  const at::Tensor values = at::randn({5, 64}) * 1e-3;
  const uint64_t key = rounding_key(1, {2, 3});
  at::Tensor want = shadow.clone();
  round_add_rows_(want, rows, values, key, Rounding::kStochastic);
  at::Tensor got = shadow.cuda();
  CudaTally tally;
  CudaFoldOptions o;
  o.stochastic = true;
  o.key = key;
  cuda_fold_rows_(got, rows.cuda(), values.cuda(), o, tally);
  CHECK(test_support::differing_bits(got, want) == 0);
}

TEST_CASE("cuda fold: ShadowAccumulator on CUDA gives the CPU accumulator's bits (stochastic, same seed)",
          "[cuda][fold]") {
  SG_NEED_CUDA_FOLD();
  for (auto dtype : {at::kBFloat16, at::kHalf, at::kFloat}) {
    INFO(c10::toString(dtype));
    at::manual_seed(8);
    // loss = sum(w * c): the gradient is c exactly on either device, so only the fold can differ.
    const at::Tensor c = at::randn({kElements}) * 1e-2;
    at::Tensor shadows[2];
    std::vector<double> norms[2];
    RoundingLoss losses[2];
    int side = 0;
    for (const auto device : {at::Device(at::kCPU), at::Device(at::kCUDA)}) {
      at::Tensor w = at::zeros({kElements}, at::TensorOptions(device)).requires_grad_();
      const at::Tensor cd = c.to(device);
      ShadowAccumulator acc({w}, dtype);
      if (dtype != at::kFloat) acc.set_rounding(Rounding::kStochastic, 1234);
      for (int64_t window = 0; window < 2; ++window) {  // the second window's first fold overwrites
        acc.begin(window);
        for (int m = 0; m < 3; ++m) ((w * cd).sum() * float(m + 1)).backward();
        acc.end();
      }
      shadows[side] = acc.shadows()[0].cpu();
      norms[side] = acc.microbatch_sq_norms();
      losses[side] = acc.rounding_loss();
      ++side;
    }
    CHECK(test_support::differing_bits(shadows[1], shadows[0]) == 0);
    REQUIRE(norms[1].size() == norms[0].size());
    for (size_t m = 0; m < norms[0].size(); ++m) CHECK(std::abs(norms[1][m] - norms[0][m]) <= 1e-5 * norms[0][m]);
    CHECK(losses[1].underflowed == losses[0].underflowed);
    CHECK(losses[1].overflowed == losses[0].overflowed);
    CHECK(losses[1].elements == losses[0].elements);
  }
}
