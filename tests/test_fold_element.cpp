// The CUDA fold's element rule (accumulate/FoldElement.h), run on the host: it must give the bits the CPU fold gives
// (MixedAdd's loops and at::add_ for round-to-nearest, the rounding kernel for stochastic rounding and float16), for
// every shadow/gradient dtype pair, first folds and later ones, on values that include NaN, Inf, fp32 denormals and
// bf16 exponent carries. The GPU runs this same function (tests/test_cuda_fold.cpp checks it there), so this is the
// CPU twin of the GPU's bit-for-bit test.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <vector>

#include <ATen/ATen.h>

#include "FoldCases.h"
#include "accumulate/FoldElement.h"
#include "accumulate/MixedAdd.h"
#include "accumulate/StochasticRounding.h"

using namespace shadowgrad;
using namespace shadowgrad::accumulate;

namespace {

template <class Dst, class Src>
at::Tensor host_twin(const at::Tensor& dst, const at::Tensor& src, bool overwrite, uint64_t key, bool stochastic) {
  at::Tensor out = dst.clone();
  auto* d = static_cast<typename Dst::Storage*>(out.data_ptr());
  const auto* s = static_cast<const typename Src::Storage*>(src.data_ptr());
  for (int64_t e = 0; e < out.numel(); ++e)
    d[e] = fold_element<Dst, Src>(d[e], s[e], overwrite, stochastic ? random_bits(key, uint64_t(e)) : 0u, stochastic);
  return out;
}

template <class Dst>
at::Tensor host_twin_for(const at::Tensor& dst, const at::Tensor& src, bool overwrite, uint64_t key, bool sr) {
  switch (src.scalar_type()) {
    case at::kFloat: return host_twin<Dst, F32Bits>(dst, src, overwrite, key, sr);
    case at::kBFloat16: return host_twin<Dst, Bf16Bits>(dst, src, overwrite, key, sr);
    default: return host_twin<Dst, Fp16Bits>(dst, src, overwrite, key, sr);
  }
}

at::Tensor host_twin_any(const at::Tensor& dst, const at::Tensor& src, bool overwrite, uint64_t key, bool sr) {
  switch (dst.scalar_type()) {
    case at::kFloat: return host_twin_for<F32Bits>(dst, src, overwrite, key, sr);
    case at::kBFloat16: return host_twin_for<Bf16Bits>(dst, src, overwrite, key, sr);
    default: return host_twin_for<Fp16Bits>(dst, src, overwrite, key, sr);
  }
}

} // namespace

TEST_CASE("fold element rule: the CUDA kernel's per-element fold gives the CPU fold's bits", "[fold][rounding]") {
  const int64_t n = 5000;
  for (const auto& c : test_support::fold_cases()) {
    INFO(test_support::describe(c));
    const at::Tensor dst = test_support::fold_shadow(c, n), src = test_support::fold_gradient(c, n);
    const uint64_t key = rounding_key(42, {7, 1, 3});
    const at::Tensor want = test_support::cpu_fold(c, dst, src, key);
    const at::Tensor got = host_twin_any(dst, src, c.overwrite, key, c.stochastic);
    CHECK(test_support::differing_bits(got, want) == 0);
  }
}

TEST_CASE("fold element rule: the twin can fail (a bit flip in one element is seen)", "[fold][rounding]") {
  const test_support::FoldCase c{at::kBFloat16, at::kFloat, false, true};
  const at::Tensor dst = test_support::fold_shadow(c, 100), src = test_support::fold_gradient(c, 100);
  at::Tensor want = test_support::cpu_fold(c, dst, src, 9);
  reinterpret_cast<uint16_t*>(want.data_ptr())[17] ^= 1u;
  CHECK(test_support::differing_bits(host_twin_any(dst, src, false, 9, true), want) == 1);
}
