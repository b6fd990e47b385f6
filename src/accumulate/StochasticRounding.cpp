#include "accumulate/StochasticRounding.h"

#include <atomic>
#include <cmath>
#include <stdexcept>
#include <string>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

namespace shadowgrad::accumulate {

Rounding rounding_from_name(const std::string& name) {
  if (name == "nearest") return Rounding::kNearest;
  if (name == "stochastic") return Rounding::kStochastic;
  throw std::invalid_argument("unknown rounding '" + name + "' (nearest|stochastic)");
}

const char* rounding_name(Rounding r) { return r == Rounding::kNearest ? "nearest" : "stochastic"; }

namespace {

// The storage formats, as raw 16-bit patterns.
struct Bf16 {
  static float to_float(uint16_t h) { return bf16_to_float(h); }
  static constexpr bool kCounts = false;  // fp32's range: nothing underflows that fp32 kept
};
struct Fp16 {
  static float to_float(uint16_t h) { return fp16_to_float(h); }
  static constexpr bool kCounts = true;
};

struct Bf16Stochastic {
  uint16_t operator()(float x, uint64_t key, uint64_t e) const { return bf16_round_stochastic(x, random_bits(key, e)); }
};
struct Bf16Nearest {
  uint16_t operator()(float x, uint64_t, uint64_t) const { return bf16_round_nearest(x); }
};
struct Fp16Stochastic {
  uint16_t operator()(float x, uint64_t key, uint64_t e) const { return fp16_round_stochastic(x, random_bits(key, e)); }
};
struct Fp16Nearest {
  uint16_t operator()(float x, uint64_t, uint64_t) const { return fp16_round_nearest(x); }
};

inline float load(float v) { return v; }
inline float load(uint16_t bf16_bits) { return Bf16::to_float(bf16_bits); }

// The element loop. Inlined into each target_clones wrapper below, so it is compiled for AVX-512, AVX2 and
// baseline x86-64, and the loader picks one for this CPU. Element i's random bits depend only on (key, e0 + i):
// how the range is split over threads changes nothing.
// `kAdd` is a template argument: a run-time flag in the loop keeps GCC from vectorising it.
template <bool kAdd, class Format, class Src, class Round>
__attribute__((always_inline)) inline RoundingLoss round_loop(uint16_t* __restrict d, const Src* __restrict s,
                                                              int64_t n, uint64_t e0, uint64_t key, Round round) {
  int64_t under = 0, over = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float x = kAdd ? Format::to_float(d[i]) + load(s[i]) : load(s[i]);
    const uint16_t h = round(x, key, e0 + uint64_t(i));
    d[i] = h;
    if constexpr (Format::kCounts) {
      const uint32_t mag = h & 0x7FFFu;
      under += (mag == 0) & (x != 0.0f);
      over += (mag == 0x7C00u) & ((float_bits(x) & 0x7F800000u) != 0x7F800000u);  // finite in, Inf out
    }
  }
  RoundingLoss loss;
  loss.underflowed = under;
  loss.overflowed = over;
  loss.elements = n;
  return loss;
}

using Kernel = RoundingLoss (*)(uint16_t*, const void*, int64_t, uint64_t, uint64_t, bool);

#define SG_ROUND_KERNEL(NAME, FORMAT, SRC, ROUND)                                                                 \
  __attribute__((target_clones("avx512f", "avx2", "default"))) RoundingLoss NAME(                                 \
      uint16_t* d, const void* s, int64_t n, uint64_t e0, uint64_t key, bool add) {                               \
    const auto* src = static_cast<const SRC*>(s);                                                                 \
    return add ? round_loop<true, FORMAT>(d, src, n, e0, key, ROUND{})                                            \
               : round_loop<false, FORMAT>(d, src, n, e0, key, ROUND{});                                          \
  }

SG_ROUND_KERNEL(bf16_sr_from_f32, Bf16, float, Bf16Stochastic)
SG_ROUND_KERNEL(bf16_sr_from_bf16, Bf16, uint16_t, Bf16Stochastic)
SG_ROUND_KERNEL(bf16_rn_from_f32, Bf16, float, Bf16Nearest)
SG_ROUND_KERNEL(bf16_rn_from_bf16, Bf16, uint16_t, Bf16Nearest)
SG_ROUND_KERNEL(fp16_sr_from_f32, Fp16, float, Fp16Stochastic)
SG_ROUND_KERNEL(fp16_sr_from_bf16, Fp16, uint16_t, Fp16Stochastic)
SG_ROUND_KERNEL(fp16_rn_from_f32, Fp16, float, Fp16Nearest)
SG_ROUND_KERNEL(fp16_rn_from_bf16, Fp16, uint16_t, Fp16Nearest)

#undef SG_ROUND_KERNEL

Kernel pick(c10::ScalarType dst, c10::ScalarType src, Rounding rounding) {
  const bool sr = rounding == Rounding::kStochastic, f32 = src == at::kFloat;
  if (dst == at::kBFloat16) return sr ? (f32 ? bf16_sr_from_f32 : bf16_sr_from_bf16) : (f32 ? bf16_rn_from_f32 : bf16_rn_from_bf16);
  if (dst == at::kHalf) return sr ? (f32 ? fp16_sr_from_f32 : fp16_sr_from_bf16) : (f32 ? fp16_rn_from_f32 : fp16_rn_from_bf16);
  throw std::invalid_argument(std::string("rounding: the destination must be bfloat16 or float16, not ") +
                              c10::toString(dst));
}

void check_destination(const at::Tensor& dst) {
  if (!dst.device().is_cpu() || !dst.is_contiguous())
    throw std::invalid_argument("rounding: the destination must be a contiguous CPU tensor");
}

// float32 and bfloat16 sources are read in place; anything else (or a strided source) through a float32 copy.
at::Tensor readable(const at::Tensor& src) {
  const auto t = src.scalar_type();
  if ((t == at::kFloat || t == at::kBFloat16) && src.is_contiguous() && src.device().is_cpu()) return src;
  return src.to(at::kCPU, at::kFloat).contiguous();
}

constexpr int64_t kGrain = 1 << 15;

struct AtomicLoss {
  std::atomic<int64_t> under{0}, over{0}, elements{0};
  void add(const RoundingLoss& l) {
    under += l.underflowed;
    over += l.overflowed;
    elements += l.elements;
  }
  RoundingLoss get() const {
    RoundingLoss l;
    l.underflowed = under;
    l.overflowed = over;
    l.elements = elements;
    return l;
  }
};

RoundingLoss round_into(const at::Tensor& dst, const at::Tensor& src_in, uint64_t key, Rounding rounding, bool add) {
  check_destination(dst);
  if (src_in.numel() != dst.numel())
    throw std::invalid_argument("rounding: " + std::to_string(src_in.numel()) + " source elements for " +
                                std::to_string(dst.numel()) + " destination elements");
  const at::Tensor src = readable(src_in);
  const Kernel kernel = pick(dst.scalar_type(), src.scalar_type(), rounding);
  auto* d = static_cast<uint16_t*>(dst.data_ptr());
  const auto* s = static_cast<const char*>(src.data_ptr());
  const int64_t width = src.element_size();
  AtomicLoss loss;
  at::parallel_for(0, dst.numel(), kGrain, [&](int64_t begin, int64_t end) {
    loss.add(kernel(d + begin, s + begin * width, end - begin, uint64_t(begin), key, add));
  });
  return loss.get();
}

} // namespace

RoundingLoss round_add_(const at::Tensor& dst, const at::Tensor& src, uint64_t key, Rounding rounding) {
  return round_into(dst, src, key, rounding, true);
}

RoundingLoss round_copy_(const at::Tensor& dst, const at::Tensor& src, uint64_t key, Rounding rounding) {
  return round_into(dst, src, key, rounding, false);
}

RoundingLoss round_add_rows_(const at::Tensor& dst, const at::Tensor& rows, const at::Tensor& values_in, uint64_t key,
                             Rounding rounding) {
  check_destination(dst);
  if (dst.dim() != 2 || rows.scalar_type() != at::kLong || values_in.dim() != 2 ||
      values_in.size(0) != rows.numel() || values_in.size(1) != dst.size(1))
    throw std::invalid_argument("round_add_rows_: needs dst [R, D], rows int64 [U] and values [U, D]");
  const at::Tensor values = readable(values_in);
  const at::Tensor index = rows.contiguous();
  const Kernel kernel = pick(dst.scalar_type(), values.scalar_type(), rounding);
  const int64_t width = dst.size(1), count = index.numel(), row_count = dst.size(0);
  const int64_t* row = index.data_ptr<int64_t>();
  for (int64_t r = 0; r < count; ++r)
    if (row[r] < 0 || row[r] >= row_count)
      throw std::out_of_range("round_add_rows_: row " + std::to_string(row[r]) + " outside [0, " +
                              std::to_string(row_count) + ")");
  auto* d = static_cast<uint16_t*>(dst.data_ptr());
  const auto* s = static_cast<const char*>(values.data_ptr());
  const int64_t bytes = values.element_size();
  AtomicLoss loss;
  at::parallel_for(0, count, std::max<int64_t>(1, kGrain / std::max<int64_t>(1, width)), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const int64_t first = row[r] * width;
      loss.add(kernel(d + first, s + r * width * bytes, width, uint64_t(first), key, true));
    }
  });
  return loss.get();
}

} // namespace shadowgrad::accumulate
