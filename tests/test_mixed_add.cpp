// mixed_add_: folding an fp32 gradient into a bf16/fp16 shadow, or a bf16 one into an fp32 shadow, by direct loops
// or slice by slice, gives exactly the whole add_.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>

#include <ATen/ATen.h>

#include "accumulate/MixedAdd.h"
#include "accumulate/SquaredNorm.h"

using shadowgrad::accumulate::mixed_add_;
using shadowgrad::accumulate::mixed_copy_;

TEST_CASE("mixed_copy_ of fp32 into bf16 equals copy_ bit for bit, specials included", "[accumulate][mixed_add]") {
  // NaN is the exception: 1.13's vectorised copy_ writes 0xFFFF, c10::BFloat16 (and mixed_add_) 0x7FC0.
  at::manual_seed(5);
  at::Tensor src = at::randn({(int64_t{1} << 17) + 9}).mul_(10);
  const float specials[] = {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(), NAN,
                            -NAN, 3.4e38f, -3.4e38f, 1e-40f, -0.0f, 1.00390625f, 1.01171875f};
  for (size_t i = 0; i < sizeof specials / sizeof *specials; ++i) src[int64_t(i)].fill_(specials[i]);
  at::Tensor want = at::empty_like(src, src.options().dtype(at::kBFloat16)).copy_(src);
  at::Tensor got = at::empty_like(want);
  mixed_copy_(got, src);
  const at::Tensor nan = want.isnan();
  CHECK(at::equal(got.isnan(), nan));
  CHECK(at::equal(got.view(at::kShort).masked_fill(nan, 0), want.view(at::kShort).masked_fill(nan, 0)));  // -0 too
  CHECK(got[2].view(at::kShort).item<int16_t>() == int16_t(0x7FC0));
}

TEST_CASE("mixed_copy_'s fused squared norm equals squared_norm's, and the copy is the same", "[accumulate][mixed_add]") {
  // The first fold of a window measures the gradient in the copy's own pass; the noise scale reads the same bits.
  at::manual_seed(6);
  for (int64_t n : {int64_t{1000}, (int64_t{1} << 17) * 3 + 7}) {  // one norm block; several and a ragged tail
    at::Tensor src = at::randn({n}).mul_(3);
    for (auto dtype : {at::kBFloat16, at::kFloat}) {  // the direct loop, and copy_ with the norm apart
      at::Tensor plain = at::empty_like(src, src.options().dtype(dtype)), fused = at::empty_like(plain);
      mixed_copy_(plain, src);
      double sq = -1;
      mixed_copy_(fused, src, &sq);
      CHECK(at::equal(fused, plain));
      CHECK(sq == shadowgrad::accumulate::squared_norm(src));
      CHECK(sq != shadowgrad::accumulate::squared_norm(src.narrow(0, 1, n - 1)));  // the comparison can fail
    }
  }
}

TEST_CASE("mixed_add_ equals add_ bit for bit across slice boundaries", "[accumulate][mixed_add]") {
  at::manual_seed(3);
  for (auto dtype : {at::kBFloat16, at::kHalf}) {
    for (int64_t n : {int64_t{1000}, (int64_t{1} << 20) * 3 + 5}) {  // one slice; several and a ragged tail
      at::Tensor src = at::randn({n / 5, 5}).mul_(1e-2);
      at::Tensor expected = at::randn({n / 5, 5}).to(dtype);
      at::Tensor dst = expected.clone();
      expected.add_(src);
      mixed_add_(dst, src);
      CHECK(at::equal(dst, expected));
    }
  }
  // A bf16 gradient into an fp32 shadow (bf16 compute's fold), across the threads' 64 Ki-element blocks.
  at::Tensor grad = at::randn({(int64_t{1} << 17) + 7}).to(at::kBFloat16);
  at::Tensor shadow = at::randn({grad.numel()});
  at::Tensor want_shadow = shadow.clone().add_(grad);
  mixed_add_(shadow, grad);
  CHECK(at::equal(shadow, want_shadow));
  // The sliced path (a pair without a direct loop): fp64 into bf16.
  at::Tensor src = at::randn({(int64_t{1} << 20) * 2 + 3}, at::kDouble);
  at::Tensor expected = at::randn({src.numel()}).to(at::kBFloat16);
  at::Tensor dst = expected.clone();
  expected.add_(src);
  mixed_add_(dst, src);
  CHECK(at::equal(dst, expected));
  // Specials: inf, nan and the largest finite value round like add_.
  at::Tensor special = at::tensor({1.0f, -2.0f, 3.0e38f, std::numeric_limits<float>::infinity(), NAN, 1e-40f});
  at::Tensor base = at::tensor({0.5f, 1.0f, 3.0e38f, -1.0f, 0.0f, 0.0f}).to(at::kBFloat16);
  at::Tensor want = base.clone().add_(special);
  mixed_add_(base, special);
  CHECK(at::equal(base.isnan(), want.isnan()));
  CHECK(at::equal(base.nan_to_num(0), want.nan_to_num(0)));
}

TEST_CASE("mixed_add_ falls back to add_ for one dtype and for non-contiguous shadows", "[accumulate][mixed_add]") {
  at::Tensor src = at::randn({2048, 1024});
  at::Tensor dst = at::zeros({1024, 2048}, at::kBFloat16).t();  // non-contiguous view
  mixed_add_(dst, src);
  CHECK(at::equal(dst, src.to(at::kBFloat16)));
  at::Tensor same = at::ones({4});
  mixed_add_(same, at::ones({4}));
  CHECK(at::equal(same, at::full({4}, 2.0)));
}
