// The gradient noise scale (docs/batch-size.md): the engine's per-microbatch squared norms on every fold path, the
// estimator against a model whose tr(Sigma) and |G|^2 are known, splits of one global batch over K, microbatch size
// and processes, thread-count independence, and (through build/trainer) logging, K=1 and bitwise resume.
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <numeric>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/csrc/autograd/autograd.h>

#include "RankThreads.h"
#include "TinyConfig.h"
#include "TrainerProcess.h"
#include "accumulate/ShadowAccumulator.h"
#include "accumulate/StochasticRounding.h"
#include "accumulate/SquaredNorm.h"
#include "checkpoint/Crc32.h"
#include "checkpoint/Manifest.h"
#include "data/DataSource.h"
#include "distributed/Communicator.h"
#include "distributed/DataParallel.h"
#include "model/Decoder.h"
#include "train/NoiseScale.h"
#include "train/TrainStep.h"

using namespace shadowgrad;
namespace tp = trainer_process;

namespace {

struct ThreadCount {
  int before = at::get_num_threads();
  explicit ThreadCount(int n) { at::set_num_threads(n); }
  ~ThreadCount() { at::set_num_threads(before); }
};

// A model with known noise: example i's loss is 0.5 |w - x_i|^2 with x_i ~ N(mu, I_d), so its gradient w - x_i has
// mean G = w - mu and covariance I_d: tr(Sigma) = d, |G|^2 = |w - mu|^2. One example is one "token".
struct Gaussian {
  int64_t d = 64;
  double grad_sq = 4.0;  // |G|^2: B_simple = 16
  at::Tensor mu, w;
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(1234);
  Gaussian() {
    mu = at::zeros({d});
    w = at::full({d}, std::sqrt(grad_sq / double(d))).requires_grad_(true);
  }
  at::Tensor examples(int64_t n) { return mu + at::normal(0.0, 1.0, {n, d}, gen); }
};

struct Means {
  double grad_sq = 0, trace = 0, gns_ema = 0;
};

// `steps` windows of microbatches of `sizes` examples; each loss sum divided by the window's total, as the trainer
// does. The estimator with decay 0 holds the step's own estimates; `ema` is the trainer's.
Means estimate(Gaussian& g, c10::ScalarType grad_dtype, const std::vector<int64_t>& sizes, int steps,
               bool rescale = true) {
  accumulate::ShadowAccumulator acc({g.w}, grad_dtype);
  train::NoiseScale per_step(0.0), ema(0.95);
  const int64_t T = std::accumulate(sizes.begin(), sizes.end(), int64_t{0});
  Means sum;
  for (int s = 0; s < steps; ++s) {
    acc.begin();
    for (int64_t b : sizes) (0.5 * (g.w - g.examples(b)).pow(2).sum() / double(T)).backward();
    acc.end();
    std::vector<double> folded = acc.microbatch_sq_norms();
    REQUIRE(folded.size() == sizes.size());
    // The deliberately wrong variant: the folded norms taken as if they were per-example means already.
    if (!rescale)
      for (size_t m = 0; m < folded.size(); ++m) folded[m] *= double(sizes[m] * sizes[m]) / double(T * T);
    const double big = acc.squared_norm();
    REQUIRE(per_step.update(folded, sizes, big, T).has_value());
    ema.update(folded, sizes, big, T);
    sum.grad_sq += per_step.state().ema_grad_sq / steps;
    sum.trace += per_step.state().ema_trace / steps;
    acc.zero_();
  }
  sum.gns_ema = ema.gns_tokens();
  return sum;
}

std::vector<double> reference_sq_norms(const std::vector<at::Tensor>& params,
                                       const std::vector<std::function<at::Tensor()>>& losses) {
  std::vector<double> out;
  for (const auto& loss : losses) {
    auto grads = torch::autograd::grad({loss()}, params, {}, false, false, true);
    double sq = 0;
    for (const auto& gr : grads)
      if (gr.defined()) sq += gr.to(at::kDouble).pow(2).sum().item<double>();
    out.push_back(sq);
  }
  return out;
}

} // namespace

TEST_CASE("noise scale of a Gaussian model: the averaged estimate is within 15% of tr(Sigma) and |G|^2",
          "[gns][analytic]") {
  const double trace = 64, grad_sq = 4;
  for (auto dtype : {at::kFloat, at::kBFloat16}) {
    for (const auto& sizes : {std::vector<int64_t>{8, 8, 8, 8}, std::vector<int64_t>{4, 6, 10, 12}}) {
      Gaussian g;
      const Means m = estimate(g, dtype, sizes, 400);
      WARN("grad_dtype " << c10::toString(dtype) << ", microbatches of " << sizes[0] << ".." << sizes[3]
                         << ": tr " << m.trace << ", |G|^2 " << m.grad_sq << ", ema B_simple " << m.gns_ema);
      CHECK(std::abs(m.trace / trace - 1) < 0.15);
      CHECK(std::abs(m.grad_sq / grad_sq - 1) < 0.15);
      CHECK(std::abs((m.trace / m.grad_sq) / (trace / grad_sq) - 1) < 0.15);
      CHECK(std::abs(m.gns_ema / (trace / grad_sq) - 1) < 0.5);  // an EMA of ~20 steps: noisier
    }
  }
  // Without the rescaling to per-example means the same data miss the truth by far.
  Gaussian g;
  const Means wrong = estimate(g, at::kFloat, {8, 8, 8, 8}, 100, /*rescale=*/false);
  CHECK(std::abs(wrong.trace / trace - 1) > 0.5);
}

TEST_CASE("K=1 on one process has no small batch: no estimate", "[gns][unit]") {
  train::NoiseScale gns(0.9);
  CHECK_FALSE(gns.update({1.0}, {32}, 1.0, 32).has_value());
  CHECK_FALSE(gns.update({1.0, std::nan("")}, {16, 16}, 1.0, 32).has_value());  // a skipped step
  CHECK(gns.state().updates == 0);
  CHECK(std::isnan(gns.gns_tokens()));
}

TEST_CASE("microbatch_sq_norms: one value per backward, on every fold path, the same bits at 1 and 2 threads",
          "[gns][engine]") {
  // 300 x 300 = 90000 elements: two norm blocks, so the thread count could matter if the blocks were not fixed.
  at::manual_seed(7);
  auto W = at::randn({300, 300}).requires_grad_(true);
  auto E = at::randn({50, 8}).requires_grad_(true);
  auto b = at::randn({300}).requires_grad_(true);
  std::vector<at::Tensor> xs, idx;
  for (int m = 0; m < 3; ++m) {
    xs.push_back(at::randn({4, 300}));
    idx.push_back(at::randint(0, 50, {12}));  // duplicates: the gather's rows are summed first
  }
  struct Path {
    const char* name;
    c10::ScalarType grad_dtype;
    bool casts;  // FoldingCast/gather (compute in bf16) instead of AccumulateGrad hooks
    accumulate::Rounding rounding;
  };
  const Path paths[] = {{"hooks fp32", at::kFloat, false, accumulate::Rounding::kNearest},
                        {"hooks bf16 shadow", at::kBFloat16, false, accumulate::Rounding::kNearest},
                        {"hooks fp16 shadow", at::kHalf, false, accumulate::Rounding::kNearest},
                        {"hooks bf16 stochastic", at::kBFloat16, false, accumulate::Rounding::kStochastic},
                        {"casts bf16 -> fp32 shadow", at::kFloat, true, accumulate::Rounding::kNearest},
                        {"casts bf16 -> bf16 shadow", at::kBFloat16, true, accumulate::Rounding::kNearest}};
  for (const auto& path : paths) {
    INFO(path.name);
    accumulate::ShadowAccumulator acc({W, E, b}, path.grad_dtype);
    acc.set_rounding(path.rounding, 3);
    auto loss = [&](int m) {
      at::Tensor w = path.casts ? acc.cast(W, at::kBFloat16) : W;
      at::Tensor e = path.casts ? acc.gather_rows(E, idx[m], at::kBFloat16) : E.index_select(0, idx[m]);
      at::Tensor x = path.casts ? xs[m].to(at::kBFloat16) : xs[m];
      return (at::tanh(at::matmul(x, w) + b).sum() + e.to(at::kFloat).pow(3).sum() * 0.01).to(at::kFloat) * 0.25;
    };
    std::vector<std::function<at::Tensor()>> losses;
    for (int m = 0; m < 3; ++m) losses.push_back([&, m] { return loss(m); });
    const auto expected = reference_sq_norms({W, E, b}, losses);
    std::vector<std::vector<double>> got;
    for (int threads : {1, 2}) {
      ThreadCount t(threads);
      acc.begin();
      for (int m = 0; m < 3; ++m) loss(m).backward();
      acc.end();
      got.push_back(acc.microbatch_sq_norms());
      acc.zero_();
    }
    REQUIRE(got[0].size() == 3);
    CHECK(got[0] == got[1]);  // bitwise
    for (int m = 0; m < 3; ++m) CHECK(got[0][m] == Approx(expected[m]).epsilon(1e-5));
  }
  // Off: nothing is measured.
  accumulate::ShadowAccumulator off({W, E, b}, at::kFloat);
  off.set_measure_sq_norms(false);
  off.begin();
  (at::matmul(xs[0], W) + b).sum().backward();
  off.end();
  CHECK(off.microbatch_sq_norms().empty());
}

TEST_CASE("squared_norm: fixed blocks, so 1 and 2 threads give the same bits, and the fused fold agrees",
          "[gns][engine]") {
  auto t = at::randn({5 * accumulate::kNormBlock + 123});
  double one, two;
  {
    ThreadCount c(1);
    one = accumulate::squared_norm(t);
  }
  {
    ThreadCount c(2);
    two = accumulate::squared_norm(t);
  }
  CHECK(one == two);
  // fp32 lanes over 4096 adds each: ~1e-6 relative error against a double sum.
  CHECK(one == Approx(t.to(at::kDouble).pow(2).sum().item<double>()).epsilon(2e-5));
  CHECK(accumulate::squared_norm(t.to(at::kBFloat16)) ==
        Approx(t.to(at::kBFloat16).to(at::kDouble).pow(2).sum().item<double>()).epsilon(2e-5));
}

namespace {

config::Config split(int64_t k, int64_t batch) {
  auto c = tiny_config();
  c.synthetic_min_length_fraction = 0.2;  // uneven valid tokens per microbatch
  c.gradient_accumulation_steps = k;
  c.per_device_batch_size = batch;
  return c;
}

// The estimator's inputs for `steps` global batches at the initial weights (no update: a stationary target).
std::vector<train::NoiseScaleInputs> inputs_at_init(const config::Config& c, int steps,
                                                    std::shared_ptr<distributed::DataParallel> dp = nullptr) {
  auto source = data::make_source(data::DataOptions::from_config(c));
  train::TrainStep step(train::StepOptions::from_config(c), model::Decoder(model::DecoderOptions::from_config(c)),
                        *source, c10::Device(c10::kCPU), dp);
  std::vector<train::NoiseScaleInputs> out;
  for (int s = 0; s < steps; ++s) {
    out.push_back(step.accumulate_batch(s).noise);
    step.accumulator().zero_();
  }
  return out;
}

struct Spread {
  double mean = 0, stderr_ = 0;
};

// Per-step tr(Sigma) estimates (decay 0), their mean and standard error.
Spread trace_estimates(const std::vector<train::NoiseScaleInputs>& in) {
  std::vector<double> xs;
  for (const auto& s : in) {
    train::NoiseScale one(0.0);
    const int64_t T = std::accumulate(s.micro_tokens.begin(), s.micro_tokens.end(), int64_t{0});
    REQUIRE(one.update(s.folded_sq, s.micro_tokens, s.big_sq, T).has_value());
    xs.push_back(one.state().ema_trace);
  }
  Spread r;
  for (double x : xs) r.mean += x / double(xs.size());
  double var = 0;
  for (double x : xs) var += (x - r.mean) * (x - r.mean) / double(xs.size() - 1);
  r.stderr_ = std::sqrt(var / double(xs.size()));
  return r;
}

} // namespace

TEST_CASE("one global batch split as 4x2, 2x4 and 8x1 estimates the same tr(Sigma) within the spread",
          "[gns][split]") {
  const int steps = 30;
  const Spread a = trace_estimates(inputs_at_init(split(4, 2), steps));
  const Spread b = trace_estimates(inputs_at_init(split(2, 4), steps));
  const Spread c = trace_estimates(inputs_at_init(split(8, 1), steps));
  INFO("tr(Sigma) 4x2 " << a.mean << " +- " << a.stderr_ << ", 2x4 " << b.mean << " +- " << b.stderr_ << ", 8x1 "
                        << c.mean << " +- " << c.stderr_);
  CHECK(std::abs(a.mean - b.mean) < 3 * std::hypot(a.stderr_, b.stderr_));
  CHECK(std::abs(a.mean - c.mean) < 3 * std::hypot(a.stderr_, c.stderr_));
  CHECK(a.stderr_ < 0.2 * a.mean);  // the spread is informative, not a check that always passes
}

TEST_CASE("2 processes x K=2 give the estimator the inputs of 1 process x K=4, through the one reduction",
          "[gns][distributed]") {
  const int steps = 3;
  const auto single = inputs_at_init(split(4, 2), steps);
  std::vector<std::vector<train::NoiseScaleInputs>> ranks(2);
  auto errors = run_ranks(2, [&](distributed::Communicator& comm) {
    auto c = split(2, 2);
    auto dp = std::make_shared<distributed::DataParallel>(share(comm),
                                                          distributed::DataParallelOptions::from_config(c));
    ranks[comm.rank()] = inputs_at_init(c, steps, dp);
  });
  require_no_errors(errors);
  for (int s = 0; s < steps; ++s)
    for (int r = 0; r < 2; ++r) {
      const auto& got = ranks[r][s];
      CHECK(got.micro_tokens == single[s].micro_tokens);  // (rank, microbatch) order == the global batch's order
      REQUIRE(got.folded_sq.size() == 4);
      for (int m = 0; m < 4; ++m) CHECK(got.folded_sq[m] == Approx(single[s].folded_sq[m]).epsilon(1e-6));
      CHECK(got.big_sq == Approx(single[s].big_sq).epsilon(1e-5));
    }
}

TEST_CASE("the trainer's estimator inputs are the same bits at 1 and 2 threads", "[gns][threads]") {
  auto c = split(4, 2);
  std::vector<train::NoiseScaleInputs> at1, at2;
  {
    ThreadCount t(1);
    at1 = inputs_at_init(c, 2);
  }
  {
    ThreadCount t(2);
    at2 = inputs_at_init(c, 2);
  }
  for (size_t s = 0; s < at1.size(); ++s) {
    CHECK(at1[s].folded_sq == at2[s].folded_sq);
    CHECK(at1[s].micro_tokens == at2[s].micro_tokens);
    CHECK(at1[s].big_sq == at2[s].big_sq);
  }
}

TEST_CASE("a checkpoint carries the EMAs bit for bit, and one without them loads with zeros", "[gns][checkpoint]") {
  checkpoint::Manifest m;
  m.state.step = 3;
  m.state.gns_ema_grad_sq = 0.1 + 1e-17;
  m.state.gns_ema_trace = 1.0 / 3.0;
  m.state.gns_updates = 2;
  auto back = checkpoint::Manifest::parse(m.to_text(), "manifest.yml");
  CHECK(back.state.gns_ema_grad_sq == m.state.gns_ema_grad_sq);
  CHECK(back.state.gns_ema_trace == m.state.gns_ema_trace);
  CHECK(back.state.gns_updates == 2);
  // An older manifest (before the noise scale): the gns_ema line removed, the checksum line recomputed.
  std::string text = m.to_text();
  const size_t at = text.find("gns_ema:");
  REQUIRE(at != std::string::npos);
  text.erase(at, text.find('\n', at) - at + 1);
  text = text.substr(0, text.rfind("# crc32"));
  text += "# crc32 of the lines above: " + checkpoint::crc32_hex(checkpoint::crc32(text.data(), text.size())) + "\n";
  auto older = checkpoint::Manifest::parse(text, "manifest.yml");
  CHECK(older.state.step == 3);
  CHECK(older.state.gns_ema_grad_sq == 0);
  CHECK(older.state.gns_ema_trace == 0);
  CHECK(older.state.gns_updates == 0);
}

TEST_CASE("the trainer logs gns_tokens with K=4, nothing with K=1, and resumes its EMA bitwise", "[gns][trainer]") {
  const std::string base = tp::fresh_dir("gns_trainer");
  const std::string k4 = "gradient_accumulation_steps=4";  // fp32: tiny.yml
  auto full = tp::run(tp::tiny_run_args(base, "a", k4 + " steps=8"));
  INFO(full.output);
  REQUIRE(full.code == 0);
  CHECK_THAT(full.output, Catch::Contains("| gns "));
  const auto gns = tp::field(base + "/a/metrics.jsonl", "gns_tokens");
  REQUIRE(gns.size() == 8);
  for (const auto& v : {"grad_sq_norm_micro", "grad_sq_norm_global"})
    for (const auto& x : tp::field(base + "/a/metrics.jsonl", v)) CHECK(x != "<missing>");
  CHECK_THAT(tp::read_text(base + "/a/summary.json"), Catch::Contains("\"gns_tokens\": " + gns.back()));

  REQUIRE(tp::run(tp::tiny_run_args(base, "b", k4 + " steps=4")).code == 0);
  auto resumed = tp::run(tp::tiny_run_args(base, "b", k4 + " steps=8"));
  REQUIRE(resumed.code == 0);
  CHECK_THAT(resumed.output, Catch::Contains("resumed from"));
  CHECK(tp::field(base + "/b/metrics.jsonl", "gns_tokens") == gns);

  auto k1 = tp::run(tp::tiny_run_args(base, "c", "gradient_accumulation_steps=1 steps=3"));
  REQUIRE(k1.code == 0);
  CHECK_THAT(k1.output, Catch::Contains("no small batch"));
  CHECK(k1.output.find("no small batch") == k1.output.rfind("no small batch"));  // said once
  CHECK(tp::field(base + "/c/metrics.jsonl", "gns_tokens") == std::vector<std::string>(3, "<missing>"));
  CHECK(tp::read_text(base + "/c/summary.json").find("gns_tokens") == std::string::npos);

  // A tied embedding gets two gradients per backward: said once at the start, no guess about unreached parameters.
  auto tied = tp::run(tp::tiny_run_args(base, "d", k4 + " steps=3 logits_via_embedding=true"));
  INFO(tied.output);
  REQUIRE(tied.code == 0);
  CHECK_THAT(tied.output, Catch::Contains("not measured for a model whose output projection is its embedding"));
  CHECK_THAT(tied.output, !Catch::Contains("backward passes were measured"));
  CHECK(tp::field(base + "/d/metrics.jsonl", "gns_tokens") == std::vector<std::string>(3, "<missing>"));
  std::filesystem::remove_all(base);
}
