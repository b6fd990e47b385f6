// Rounding into the shadow tree: the kernels against LibTorch's own rounding, stochastic rounding's
// determinism (runs, thread counts, fold paths) and unbiasedness where round-to-nearest stalls, fp16
// underflow counting, and the grad_fidelity_period reference error.
#include <catch2/catch.hpp>

#include <cstring>

#include <cmath>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include "TinyConfig.h"
#include "TrainerProcess.h"
#include "accumulate/ShadowAccumulator.h"
#include "accumulate/StochasticRounding.h"
#include "data/DataSource.h"
#include "model/Decoder.h"
#include "train/TrainStep.h"

using namespace shadowgrad;
using accumulate::Rounding;

namespace {

// Random values over many binades, plus the awkward ones.
at::Tensor awkward_values(int64_t n) {
  at::manual_seed(3);
  auto x = at::randn({n}) * at::exp(at::randn({n}) * 8);
  const float specials[] = {0.0f, -0.0f, 65504.0f, 65520.0f, -65536.0f, 6e-8f, 3e-8f, 2.98e-8f, 1e-30f,
                            3.4e38f, INFINITY, -INFINITY, 1.0f + 1.0f / 512, 1.0f + 3.0f / 512};
  for (size_t i = 0; i < sizeof specials / sizeof *specials; ++i) x[int64_t(i)] = specials[i];
  return x;
}

// Sums `count` copies of `addend` into a [elements] shadow of `dtype` through the engine: one microbatch per
// copy, each with loss = sum(w) * addend, so every element receives exactly `addend` per fold.
at::Tensor sum_through_engine(c10::ScalarType dtype, Rounding rounding, float addend, int64_t count, int64_t elements,
                              uint64_t seed) {
  auto w = at::zeros({elements}).requires_grad_();
  accumulate::ShadowAccumulator acc({w}, dtype);
  acc.set_rounding(rounding, seed);
  acc.begin();
  for (int64_t m = 0; m < count; ++m) (w.sum() * addend).backward();
  acc.end();
  return acc.shadows()[0].to(at::kDouble);
}

// What round-to-nearest gives for `count` sequential adds of `addend`, simulated with c10's scalar types.
template <class T>
double nearest_scalar_sum(float addend, int64_t count) {
  T s(0.0f);
  for (int64_t m = 0; m < count; ++m) s = T(float(s) + addend);
  return float(s);
}

} // namespace

TEST_CASE("round-to-nearest through the kernel is add_ bit for bit, and the fp16 helpers are c10's", "[rounding]") {
  const auto x = awkward_values(1 << 16), y = awkward_values(1 << 16).flip(0) * 0.01;
  for (auto dst_type : {at::kBFloat16, at::kHalf})
    for (auto src_type : {at::kFloat, at::kBFloat16}) {
      INFO(c10::toString(dst_type) << " <- " << c10::toString(src_type));
      auto dst = x.to(dst_type), expected = dst.clone();
      const auto src = y.to(src_type);
      expected.add_(src);
      accumulate::round_add_(dst, src, 0, Rounding::kNearest);
      // Bits, so -0 and 0 differ; NaN payloads may differ (LibTorch's vectorised bf16 conversion picks its own).
      const auto nan = expected.isnan();
      CHECK(at::equal(dst.isnan(), nan));
      CHECK(at::equal(dst.view(at::kShort).masked_select(~nan), expected.view(at::kShort).masked_select(~nan)));
    }
  for (uint32_t h = 0; h < 65536; ++h) {
    const float ours = accumulate::fp16_to_float(uint16_t(h)), c10s = c10::detail::fp16_ieee_to_fp32_value(uint16_t(h));
    REQUIRE(accumulate::float_bits(ours) == accumulate::float_bits(c10s));
  }
  const auto xs = x.contiguous();
  for (int64_t i = 0; i < xs.numel(); ++i) {
    const float v = xs.data_ptr<float>()[i];
    if (std::isnan(v)) continue;
    REQUIRE(accumulate::fp16_round_nearest(v) == c10::detail::fp16_ieee_from_fp32_value(v));
    REQUIRE(accumulate::bf16_round_nearest(v) == c10::detail::round_to_nearest_even(v));
  }
  // One NaN rule for bf16 (c10's, whatever the sign or payload), which MixedAdd's fold shares.
  auto from_bits = [](uint32_t b) { float f; std::memcpy(&f, &b, sizeof f); return f; };
  for (float nan : {NAN, -NAN, from_bits(0x7F800001u), from_bits(0xFFC00001u)})
    REQUIRE(accumulate::bf16_round_nearest(nan) == c10::detail::round_to_nearest_even(nan));
}

TEST_CASE("stochastic rounding lands on a neighbour, keeps exact values, NaN and Inf", "[rounding]") {
  const auto x = awkward_values(1 << 16);
  for (auto dtype : {at::kBFloat16, at::kHalf}) {
    INFO(c10::toString(dtype));
    auto sr = at::empty({x.numel()}, dtype);
    accumulate::round_copy_(sr, x, 77, Rounding::kStochastic);
    const auto down = x.to(dtype).to(at::kDouble), value = x.to(at::kDouble), got = sr.to(at::kDouble);
    // got is x rounded down or up: |got - x| < one spacing, and got == x whenever x is representable.
    const auto representable = x.to(dtype).to(at::kFloat).eq(x);
    CHECK(at::equal(got.masked_select(representable), value.masked_select(representable)));
    const auto finite = at::isfinite(x) & at::isfinite(down) & at::isfinite(got);
    const auto spacing = (at::maximum(down.abs(), value.abs()) * (dtype == at::kBFloat16 ? 1.0 / 128 : 1.0 / 1024))
                             .clamp_min(dtype == at::kHalf ? 5.97e-8 : 0.0);
    CHECK((got - value).abs().masked_select(finite).le(spacing.masked_select(finite) * 1.0001 + 1e-45).all().item<bool>());
    CHECK(got.isnan().eq(x.isnan()).all().item<bool>());
    CHECK(at::equal(got.masked_select(at::isinf(x)), value.masked_select(at::isinf(x))));
  }
}

TEST_CASE("stochastic rounding is bitwise the same across runs and thread counts, and differs by seed", "[rounding]") {
  const int64_t n = 3 << 18;  // many parallel_for chunks
  at::manual_seed(5);
  const auto base = at::randn({n}), addend = at::randn({n}) * 1e-3;
  const int threads = at::get_num_threads();
  auto once = [&](c10::ScalarType dtype, int nthreads, uint64_t key) {
    at::set_num_threads(nthreads);
    auto dst = base.to(dtype);
    accumulate::round_add_(dst, addend, key, Rounding::kStochastic);
    accumulate::round_add_(dst, addend.to(at::kBFloat16), key + 1, Rounding::kStochastic);
    return dst;
  };
  for (auto dtype : {at::kBFloat16, at::kHalf}) {
    INFO(c10::toString(dtype));
    const auto one = once(dtype, 1, 9), again = once(dtype, 1, 9), two = once(dtype, 2, 9), other = once(dtype, 2, 10);
    CHECK(at::equal(one, again));
    CHECK(at::equal(one, two));
    CHECK_FALSE(at::equal(one, other));
    auto nearest = base.to(dtype);
    nearest.add_(addend).add_(addend.to(at::kBFloat16));
    CHECK_FALSE(at::equal(one, nearest));
  }
  at::set_num_threads(threads);
}

TEST_CASE("stochastic rounding is unbiased where round-to-nearest stalls: 4096 folds of a small same-sign addend",
          "[rounding][stagnation]") {
  // bf16: adding 1e-3 stops moving at 0.5, where half a spacing (2^-9) exceeds the addend; fp16 (11 bits) stops
  // at 0.25 for 1e-4. The exact sums are 4.096 and 0.4096. Each of the 2048 elements is its own trial.
  struct Case {
    c10::ScalarType dtype;
    float addend;
    double stall;
  };
  const int64_t count = 4096, trials = 2048;
  for (const Case& c : {Case{at::kBFloat16, 1e-3f, 0.5}, Case{at::kHalf, 1e-4f, 0.25}}) {
    INFO(c10::toString(c.dtype));
    const double exact = double(c.addend) * count;
    const double stall = c.dtype == at::kBFloat16 ? nearest_scalar_sum<c10::BFloat16>(c.addend, count)
                                                  : nearest_scalar_sum<c10::Half>(c.addend, count);
    CHECK(stall == c.stall);
    const auto nearest = sum_through_engine(c.dtype, Rounding::kNearest, c.addend, count, trials, 0);
    CHECK(nearest.eq(stall).all().item<bool>());
    const auto sr = sum_through_engine(c.dtype, Rounding::kStochastic, c.addend, count, trials, 1);
    const double mean = sr.mean().item<double>(), sem = sr.std().item<double>() / std::sqrt(double(trials));
    INFO("exact " << exact << ", stochastic mean " << mean << " +- " << sem << ", nearest " << stall);
    CHECK(std::abs(mean - exact) <= 4 * sem);
    CHECK(sem < 0.01 * exact);  // the test has the power to see a 4 % bias
    CHECK(std::abs(stall - exact) > 0.3 * exact);  // nearest is off by 88 % (bf16) and 39 % (fp16)
  }
}

TEST_CASE("fp16 underflow: round-to-nearest loses values below 2^-25 and counts them, stochastic keeps them on average",
          "[rounding][fp16]") {
  const int64_t count = 64, elements = 4096;
  const float tiny = 1e-8f;  // below half of fp16's smallest subnormal (2^-24 = 6e-8)
  auto w = at::zeros({elements}).requires_grad_();
  accumulate::ShadowAccumulator acc({w}, at::kHalf);
  acc.begin();
  for (int64_t m = 0; m < count; ++m) (w.sum() * tiny).backward();
  acc.end();
  CHECK(acc.shadows()[0].abs().max().item<double>() == 0);
  CHECK(acc.rounding_loss().underflowed == count * elements);
  CHECK(acc.rounding_loss().elements == count * elements);
  CHECK(acc.rounding_loss().overflowed == 0);

  const auto sr = sum_through_engine(at::kHalf, Rounding::kStochastic, tiny, count, elements, 3);
  const double exact = double(tiny) * count, mean = sr.mean().item<double>();
  CHECK(std::abs(mean - exact) <= 4 * sr.std().item<double>() / std::sqrt(double(elements)));

  // bf16 has fp32's range: the same values survive round-to-nearest, and nothing is counted.
  const auto bf16 = sum_through_engine(at::kBFloat16, Rounding::kNearest, tiny, count, elements, 0);
  CHECK(std::abs(bf16.mean().item<double>() - exact) < 0.01 * exact);
}

namespace {

config::Config sr_config(const std::string& grad_dtype, const std::string& rounding) {
  auto c = tiny_config();
  c.dtype = config::ComputeDtype::bfloat16;  // compute-dtype folds (bf16 gradients) and the embedding-rows path
  c.gradient_accumulation_steps = 4;
  c.per_device_batch_size = 1;
  set_key(c, "grad_dtype", grad_dtype);
  set_key(c, "grad_accum_rounding", rounding);
  return c;
}

// The shadow tree after `steps` optimizer steps' accumulation (the last one not applied), as fp32 copies.
std::vector<at::Tensor> shadows_after(const config::Config& c, int64_t steps, int threads) {
  const int before = at::get_num_threads();
  at::set_num_threads(threads);
  auto source = data::make_source(data::DataOptions::from_config(c));
  train::TrainStep step(train::StepOptions::from_config(c), model::Decoder(model::DecoderOptions::from_config(c)),
                        *source, c10::Device(c10::kCPU));
  for (int64_t s = 0; s + 1 < steps; ++s) step.run(s);
  step.accumulate_batch(steps - 1);
  std::vector<at::Tensor> out;
  for (const auto& t : step.accumulator().shadows()) out.push_back(t.to(at::kFloat).clone());
  at::set_num_threads(before);
  return out;
}

bool same(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  for (size_t i = 0; i < a.size(); ++i)
    if (!at::equal(a[i], b[i])) return false;
  return a.size() == b.size();
}

} // namespace

TEST_CASE("the trainer's stochastic shadow is bitwise reproducible: two runs, 1 and 2 threads, both fold paths",
          "[rounding][determinism]") {
  for (const char* grad_dtype : {"bfloat16", "float16"}) {
    INFO(grad_dtype);
    auto c = sr_config(grad_dtype, "stochastic");
    const auto a = shadows_after(c, 3, 1), b = shadows_after(c, 3, 1), two = shadows_after(c, 3, 2);
    CHECK(same(a, b));
    CHECK(same(a, two));
    c.fold_in_compute_dtype = false;  // the .grad post-hook path draws the same bits for the same sums
    CHECK(same(a, shadows_after(c, 3, 1)));
    c.fold_in_compute_dtype = true;
    c.grad_accum_rounding_seed = 1;
    CHECK_FALSE(same(a, shadows_after(c, 3, 1)));
    CHECK_FALSE(same(a, shadows_after(sr_config(grad_dtype, "nearest"), 3, 1)));
  }
}

TEST_CASE("grad_rel_error is 0 for an fp32 shadow and in (0, 1e-2) for bf16 on the tiny model", "[rounding][fidelity]") {
  auto measure = [](const std::string& grad_dtype, const std::string& rounding) {
    auto c = sr_config(grad_dtype, rounding);
    auto run = [](const config::Config& c) {
      auto source = data::make_source(data::DataOptions::from_config(c));
      train::TrainStep step(train::StepOptions::from_config(c), model::Decoder(model::DecoderOptions::from_config(c)),
                            *source, c10::Device(c10::kCPU));
      std::vector<train::StepStats> out{step.run(0), step.run(1), step.run(2)};
      if (c.grad_fidelity_period > 0)
        CHECK(step.accumulator().reference_bytes() ==
              4 * step.accumulator().bytes() / int64_t(c10::elementSize(step.accumulator().grad_dtype())));
      return out;
    };
    const auto plain = run(c);
    c.grad_fidelity_period = 2;
    const auto measured = run(c);
    CHECK(std::isnan(measured[0].grad_rel_error));  // only every grad_fidelity_period-th step
    // Measuring must not change the step: the same gradient norm on the measured step, the same loss after it.
    // (A float32 shadow once was zeroed by the measurement, an in-place difference, and lost the step.)
    CHECK(measured[1].grad_norm == plain[1].grad_norm);
    CHECK(measured[1].grad_norm > 0);
    CHECK(measured[2].loss == plain[2].loss);
    return measured[1].grad_rel_error;
  };
  CHECK(measure("float32", "nearest") == 0.0);
  const double nearest = measure("bfloat16", "nearest"), stochastic = measure("bfloat16", "stochastic");
  INFO("bf16 nearest " << nearest << ", bf16 stochastic " << stochastic);
  CHECK(nearest > 0);
  CHECK(nearest < 1e-2);
  CHECK(stochastic > 0);
  CHECK(stochastic < 1e-2);
}

TEST_CASE("the trainer logs grad_rel_error every grad_fidelity_period steps, and fp16 underflow with a warning",
          "[rounding][cli]") {
  namespace tp = trainer_process;
  const std::string base = tp::fresh_dir("rounding_cli");
  auto args = [&](const std::string& name, const std::string& extra) {
    return "base.yml base_output_directory=" + base + " run_name=" + name + tp::kTiny +
           " steps=4 gradient_accumulation_steps=4 enable_checkpointing=false " + extra;
  };
  auto bf16 = tp::run(args("bf16", "grad_dtype=bfloat16 grad_accum_rounding=stochastic grad_fidelity_period=2"));
  INFO(bf16.output);
  REQUIRE(bf16.code == 0);
  const auto errors = tp::field(base + "/bf16/metrics.jsonl", "grad_rel_error");
  REQUIRE(errors.size() == 4);
  CHECK(errors[0] == "<missing>");
  CHECK(errors[2] == "<missing>");
  CHECK(std::stod(errors[1]) > 0);
  CHECK(std::stod(errors[3]) < 1e-2);
  CHECK_THAT(tp::read_text(base + "/bf16/memory_report.json"), Catch::Contains("\"grad_reference_bytes\": "));
  CHECK(tp::field(base + "/bf16/metrics.jsonl", "fp16_underflow_fraction")[0] == "<missing>");

  // Even the tiny model's token-normalised gradients have entries below fp16's subnormals (about 1 % of them).
  auto fp16 = tp::run(args("fp16", "grad_dtype=float16"));
  INFO(fp16.output);
  REQUIRE(fp16.code == 0);
  const auto fractions = tp::field(base + "/fp16/metrics.jsonl", "fp16_underflow_fraction");
  REQUIRE(fractions.size() == 4);
  CHECK(std::stod(fractions[0]) > 0);
  CHECK(std::stod(fractions[0]) < 0.1);
  CHECK_THAT(fp16.output, Catch::Contains("underflowed to zero (rounding=nearest)"));
  // Stochastic rounding's zeros are unbiased: the fraction is still logged, without the warning.
  auto fp16_sr = tp::run(args("fp16sr", "grad_dtype=float16 grad_accum_rounding=stochastic"));
  REQUIRE(fp16_sr.code == 0);
  CHECK(std::stod(tp::field(base + "/fp16sr/metrics.jsonl", "fp16_underflow_fraction")[0]) > 0);
  CHECK_THAT(fp16_sr.output, !Catch::Contains("underflowed to zero"));
}
