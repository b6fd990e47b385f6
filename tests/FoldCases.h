#pragma once
// The fold's test cases, shared by the host twin of the CUDA fold (test_fold_element.cpp) and the GPU test
// (test_cuda_fold.cpp): every shadow/gradient dtype pair the trainer makes, rounded to nearest and stochastically,
// first folds and later ones, on values that hold NaN, +-Inf, fp32 denormals, fp16's edges and bf16 exponent carries.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "accumulate/MixedAdd.h"
#include "accumulate/StochasticRounding.h"

namespace shadowgrad::test_support {

struct FoldCase {
  c10::ScalarType shadow;
  c10::ScalarType gradient;
  bool overwrite;   // the first fold of a window
  bool stochastic;  // bf16/fp16 shadows only
};

inline std::vector<FoldCase> fold_cases() {
  std::vector<FoldCase> cases;
  for (auto shadow : {at::kFloat, at::kBFloat16, at::kHalf})
    for (auto gradient : {at::kFloat, at::kBFloat16})
      for (bool overwrite : {false, true})
        for (bool stochastic : {false, true})
          if (!(stochastic && shadow == at::kFloat)) cases.push_back({shadow, gradient, overwrite, stochastic});
  return cases;
}

inline std::string describe(const FoldCase& c) {
  return std::string("shadow ") + c10::toString(c.shadow) + ", gradient " + c10::toString(c.gradient) +
         (c.overwrite ? ", first fold" : ", later fold") + (c.stochastic ? ", stochastic" : ", nearest");
}

inline float from_bits(uint32_t b) {
  float x;
  std::memcpy(&x, &b, sizeof x);
  return x;
}

// Values over many binades, and the awkward ones at the front.
inline at::Tensor awkward(int64_t n, uint64_t seed) {
  at::manual_seed(seed);
  at::Tensor x = at::randn({n}) * at::exp(at::randn({n}) * 6);
  const float specials[] = {0.0f, -0.0f, NAN, -NAN, INFINITY, -INFINITY, 3.4e38f, -3.4e38f,
                            from_bits(0x00000001u), from_bits(0x807FFFFFu), from_bits(0x00400000u),  // denormals
                            from_bits(0x3F7FFFFFu), from_bits(0x3F7F8000u), from_bits(0x3F7F7FFFu),  // bf16 carries
                            from_bits(0x7F7FFFFFu), 65504.0f, 65520.0f, -65536.0f, 6e-8f, 2.98e-8f, 1e-30f,
                            1.0f + 1.0f / 256, 1.0f + 3.0f / 512};
  const int64_t count = std::min<int64_t>(n, sizeof specials / sizeof *specials);
  for (int64_t i = 0; i < count; ++i) x[i] = specials[i];
  return x;
}

inline at::Tensor fold_shadow(const FoldCase& c, int64_t n) { return awkward(n, 11).to(c.shadow); }
// Reversed specials, so each special meets others in the add (NaN + Inf, Inf + -Inf, denormal + denormal, ...).
inline at::Tensor fold_gradient(const FoldCase& c, int64_t n) { return awkward(n, 12).flip(0).contiguous().to(c.gradient); }

// The CPU fold, as ShadowState::fold does it for this case.
inline at::Tensor cpu_fold(const FoldCase& c, const at::Tensor& dst_in, const at::Tensor& src, uint64_t key) {
  at::Tensor dst = dst_in.clone();
  const auto rounding = c.stochastic ? accumulate::Rounding::kStochastic : accumulate::Rounding::kNearest;
  if (c.shadow == at::kHalf || (c.shadow == at::kBFloat16 && c.stochastic)) {
    c.overwrite ? accumulate::round_copy_(dst, src, key, rounding) : accumulate::round_add_(dst, src, key, rounding);
  } else if (c.overwrite) {
    accumulate::mixed_copy_(dst, src);
  } else {
    accumulate::mixed_add_(dst, src);
  }
  return dst;
}

// Elements whose bits differ, two NaNs counting as equal: a NaN's payload and sign are a code path's choice, not a
// value (LibTorch's own CPU conversions write 0x7FC0 on one path and 0xFFFF on its vectorised one; x86 keeps an
// operand's payload in an fp32 add, CUDA gives its canonical NaN). Where one side has a NaN the other must too.
inline int64_t differing_bits(const at::Tensor& a_in, const at::Tensor& b_in) {
  const at::Tensor a = a_in.cpu().contiguous(), b = b_in.cpu().contiguous();
  const int64_t n = a.numel(), width = a.element_size();
  const auto* pa = static_cast<const unsigned char*>(a.data_ptr());
  const auto* pb = static_cast<const unsigned char*>(b.data_ptr());
  const at::Tensor both_nan = at::logical_and(at::isnan(a), at::isnan(b)).contiguous();
  const bool* nan = both_nan.data_ptr<bool>();
  int64_t differ = 0;
  for (int64_t i = 0; i < n; ++i)
    if (!nan[i]) differ += std::memcmp(pa + i * width, pb + i * width, width) != 0;
  return differ;
}

} // namespace shadowgrad::test_support
