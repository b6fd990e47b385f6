// The GA engine: parity with one big batch, the wrong normalisation failing, bf16 shadows, no p.grad,
// and a module that is not ours.
#include <catch2/catch.hpp>

#include <ATen/ATen.h>
#include <torch/csrc/autograd/function.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include "TinyConfig.h"
#include "accumulate/ShadowAccumulator.h"
#include "data/DataSource.h"
#include "model/Decoder.h"
#include "train/TokenLoss.h"
#include "train/TrainStep.h"

using namespace shadowgrad;

namespace {

struct Gradients {
  double loss;
  std::vector<at::Tensor> grads;  // fp32 copies of the shadow tree
};

Gradients accumulate_step0(config::Config c) {
  auto source = data::make_source(data::DataOptions::from_config(c));
  train::TrainStep step(train::StepOptions::from_config(c), model::Decoder(model::DecoderOptions::from_config(c)),
                        *source, c10::Device(c10::kCPU));
  auto acc = step.accumulate_batch(0);
  Gradients g{acc.loss, {}};
  for (const auto& s : step.accumulator().shadows()) g.grads.push_back(s.to(at::kFloat).clone());
  return g;
}

// max |a - b| / max |b| over one tensor: a relative error that tiny entries cannot inflate.
double rel_diff(const at::Tensor& a, const at::Tensor& b) {
  return (a - b).abs().max().item<double>() / std::max(b.abs().max().item<double>(), 1e-30);
}

double max_rel_diff(const Gradients& a, const Gradients& b) {
  double worst = std::abs(a.loss - b.loss) / std::abs(b.loss);
  for (size_t i = 0; i < a.grads.size(); ++i) worst = std::max(worst, rel_diff(a.grads[i], b.grads[i]));
  return worst;
}

config::Config split(config::Config c, int64_t k, int64_t batch) {
  c.gradient_accumulation_steps = k;
  c.per_device_batch_size = batch;
  return c;
}

} // namespace

TEST_CASE("GA parity in fp32: K=4x1 and K=2x2 equal K=1x4 on padded data", "[accumulate][parity]") {
  auto c = tiny_config();
  c.synthetic_min_length_fraction = 0.2;  // very uneven valid-token counts per microbatch
  auto k1 = accumulate_step0(split(c, 1, 4));
  auto k2 = accumulate_step0(split(c, 2, 2));
  auto k4 = accumulate_step0(split(c, 4, 1));
  REQUIRE(k1.grads.size() == 2 + 9 * 2 + 1);
  CHECK(max_rel_diff(k2, k1) <= 1e-5);
  CHECK(max_rel_diff(k4, k1) <= 1e-5);
}

TEST_CASE("a mean of microbatch means fails the parity check", "[accumulate][parity]") {
  auto c = split(tiny_config(), 4, 1);
  c.synthetic_min_length_fraction = 0.2;
  auto reference = accumulate_step0(split(c, 1, 4));

  // HF Trainer's pre-2024 normalisation, implemented here on purpose.
  auto source = data::make_source(data::DataOptions::from_config(c));
  model::Decoder model(model::DecoderOptions::from_config(c));
  accumulate::ShadowAccumulator acc(model->parameters(), at::kFloat);
  auto batch = source->examples(0, 0, 4);
  double loss = 0;
  acc.begin();
  for (int64_t m = 0; m < 4; ++m) {
    auto micro = batch.slice(m, 1);
    auto l = train::token_loss_sum(model->forward(micro.tokens), micro.targets) / double(micro.valid_tokens()) / 4.0;
    l.backward();
    loss += l.item<double>();
  }
  acc.end();
  Gradients wrong{loss, {}};
  for (const auto& s : acc.shadows()) wrong.grads.push_back(s.clone());
  CHECK(max_rel_diff(wrong, reference) > 1e-3);
}

TEST_CASE("p.grad() stays undefined during accumulation and the fold count is one per parameter per microbatch",
          "[accumulate]") {
  auto c = tiny_config();
  auto source = data::make_source(data::DataOptions::from_config(c));
  model::Decoder model(model::DecoderOptions::from_config(c));
  accumulate::ShadowAccumulator acc(model->parameters(), at::kBFloat16);
  auto batch = source->examples(0, 0, 4);
  acc.begin();
  for (int64_t m = 0; m < 2; ++m) {
    auto micro = batch.slice(2 * m, 2);
    train::token_loss_sum(model->forward(micro.tokens), micro.targets).backward();
    for (const auto& p : model->parameters()) CHECK_FALSE(p.grad().defined());
  }
  acc.end();
  CHECK(acc.folds() == 2 * int64_t(model->parameters().size()));
  for (const auto& s : acc.shadows()) CHECK(s.scalar_type() == at::kBFloat16);
  CHECK(acc.global_norm() > 0);
}

TEST_CASE("a bf16 shadow tracks the fp32 shadow within 1e-2 over 8 steps of loss", "[accumulate][bf16]") {
  auto run = [](const std::string& grad_dtype) {
    auto c = split(tiny_config(), 4, 2);
    set_key(c, "grad_dtype", grad_dtype);
    auto source = data::make_source(data::DataOptions::from_config(c));
    train::TrainStep step(train::StepOptions::from_config(c), model::Decoder(model::DecoderOptions::from_config(c)),
                          *source, c10::Device(c10::kCPU));
    std::vector<double> losses;
    for (int64_t s = 0; s < 8; ++s) losses.push_back(step.run(s).loss);
    return losses;
  };
  auto fp32 = run("float32");
  auto bf16 = run("bfloat16");
  for (size_t i = 0; i < fp32.size(); ++i) {
    INFO("step " << i + 1 << ": fp32 " << fp32[i] << " bf16 " << bf16[i]);
    CHECK(std::abs(bf16[i] - fp32[i]) <= 1e-2 * std::abs(fp32[i]));
  }
  CHECK(fp32.back() < fp32.front());
}

TEST_CASE("the engine works on a module that is not ours (torch::nn::Linear)", "[accumulate][foreign]") {
  torch::nn::Linear lin(8, 3);
  auto x = at::randn({6, 8});
  auto y = at::randn({6, 3});
  // Reference: plain autograd on the whole batch.
  auto full = (lin->forward(x) - y).pow(2).sum();
  full.backward();
  std::vector<at::Tensor> reference;
  for (auto& p : lin->parameters()) {
    reference.push_back(p.grad().clone());
    p.mutable_grad() = at::Tensor();
  }
  // Three microbatches of two rows, folded into a bf16 shadow.
  accumulate::ShadowAccumulator acc(lin->parameters(), at::kBFloat16);
  acc.begin();
  for (int m = 0; m < 3; ++m)
    (lin->forward(x.slice(0, 2 * m, 2 * m + 2)) - y.slice(0, 2 * m, 2 * m + 2)).pow(2).sum().backward();
  acc.end();
  for (size_t i = 0; i < reference.size(); ++i) {
    CHECK_FALSE(lin->parameters()[i].grad().defined());
    CHECK(rel_diff(acc.shadows()[i].to(at::kFloat), reference[i]) < 1e-2);
  }
  // The optimizer reads the shadow as .grad; afterwards the shadow is zero and .grad is unset again.
  auto before = lin->weight.clone();
  torch::optim::AdamW opt(lin->parameters(), torch::optim::AdamWOptions(0.1));
  acc.step(opt);
  CHECK_FALSE(lin->weight.equal(before));
  CHECK_FALSE(lin->weight.grad().defined());
  CHECK(acc.global_norm() == 0);
}

TEST_CASE("clipping scales to the threshold and reports the norm before clipping", "[accumulate]") {
  torch::nn::Linear lin(4, 4);
  accumulate::ShadowAccumulator acc(lin->parameters(), at::kFloat);
  acc.begin();
  (lin->forward(at::ones({2, 4})) * 100).sum().backward();
  acc.end();
  double before = acc.global_norm();
  REQUIRE(before > 1);
  CHECK(acc.clip_global_norm_(1.0) == Approx(before));
  CHECK(acc.global_norm() == Approx(1.0).epsilon(1e-4));
}

namespace {

// One K=3 accumulation with bf16 compute on fp32 weights, through plain casts or the accumulator's folding
// casts; returns the shadow tree as fp32 copies.
std::vector<at::Tensor> bf16_compute_shadows(c10::ScalarType grad_dtype, bool folding, bool hoist,
                                             int64_t* folds = nullptr) {
  auto c = tiny_config();
  c.dtype = config::ComputeDtype::bfloat16;
  c.hoist_weight_cast = hoist;
  c.synthetic_min_length_fraction = 0.3;
  auto source = data::make_source(data::DataOptions::from_config(c));
  model::Decoder model(model::DecoderOptions::from_config(c));
  accumulate::ShadowAccumulator acc(model->parameters(), grad_dtype);
  if (folding)
    model->set_weight_casts({[&](const at::Tensor& p, c10::ScalarType d) { return acc.cast(p, d); },
                             [&](const at::Tensor& p, const at::Tensor& i, c10::ScalarType d) {
                               return acc.gather_rows(p, i, d);
                             }});
  auto batch = source->examples(0, 0, 6);  // small vocab: every microbatch repeats tokens
  acc.begin();
  for (int64_t m = 0; m < 3; ++m) {
    auto micro = batch.slice(2 * m, 2);
    (train::linear_token_loss_sum(model->hidden(micro.tokens), model->output_weight(), micro.targets, 8) / 50.0)
        .backward();
    for (const auto& p : model->parameters()) CHECK_FALSE(p.grad().defined());
  }
  acc.end();
  model->clear_weight_cache();
  if (folds) *folds = acc.folds();
  std::vector<at::Tensor> out;
  for (const auto& s : acc.shadows()) out.push_back(s.to(at::kFloat));
  model->set_weight_casts({});
  return out;
}

} // namespace

TEST_CASE("folding casts give the plain casts' shadow tree bit for bit (fp32 and bf16 shadows, hoisted or not)",
          "[accumulate][folding]") {
  for (auto grad_dtype : {at::kFloat, at::kBFloat16}) {
    for (bool hoist : {false, true}) {
      INFO("grad_dtype " << c10::toString(grad_dtype) << ", hoist_weight_cast " << hoist);
      int64_t plain_folds = 0, folding_folds = 0;
      auto plain = bf16_compute_shadows(grad_dtype, false, hoist, &plain_folds);
      auto folded = bf16_compute_shadows(grad_dtype, true, hoist, &folding_folds);
      REQUIRE(plain.size() == folded.size());
      for (size_t i = 0; i < plain.size(); ++i) {
        INFO("parameter " << i);
        CHECK(plain[i].abs().max().item<double>() > 0);
        CHECK(at::equal(plain[i], folded[i]));
      }
      CHECK(folding_folds == plain_folds);  // one fold per parameter per microbatch either way
    }
  }
}

TEST_CASE("outside an accumulation window a folding cast and gather set p.grad like the plain ops", "[accumulate][folding]") {
  auto w = at::randn({5, 3}).requires_grad_(true);
  accumulate::ShadowAccumulator acc({w}, at::kFloat);
  auto index = at::tensor(std::vector<int64_t>{4, 0, 4});
  (acc.cast(w, at::kBFloat16).to(at::kFloat).sum() * 2 + acc.gather_rows(w, index, at::kBFloat16).to(at::kFloat).sum())
      .backward();
  REQUIRE(w.grad().defined());
  auto expected = at::full({5, 3}, 2.0);
  expected[0] += 1;
  expected[4] += 2;
  CHECK(at::equal(w.grad(), expected));
  CHECK(acc.global_norm() == 0);
  CHECK(acc.cast(w, at::kBFloat16).grad_fn()->name() == "FoldingCastBackward");
  CHECK(acc.gather_rows(w, index, at::kBFloat16).grad_fn()->name() == "FoldingGatherBackward");
  CHECK_THROWS_AS(acc.cast(at::ones({2}, at::requires_grad()), at::kBFloat16), std::invalid_argument);
}

TEST_CASE("after a step the next window overwrites the shadow, adds from its second fold on, and unreached parameters read zero",
          "[accumulate]") {
  torch::nn::Linear used(3, 2), unused(3, 2);
  auto params = used->parameters();
  for (const auto& p : unused->parameters()) params.push_back(p);
  accumulate::ShadowAccumulator acc(params, at::kFloat);
  torch::optim::SGD sgd(params, torch::optim::SGDOptions(0.0));  // lr 0: the step only exercises the reset
  auto x = at::randn({4, 3});
  acc.begin();
  (used(x).sum() + unused(x).sum() * 3).backward();
  acc.end();
  acc.step(sgd);
  // d/dW sum(x W^T + b) = ones[2,4] x; d/db = 4 per output.
  const auto w_grad = at::ones({2, 4}).mm(x), b_grad = at::full({2}, 4.0);
  acc.begin();
  used(x).sum().backward();
  acc.end();
  CHECK(at::allclose(acc.shadows()[0], w_grad));
  CHECK(at::equal(acc.shadows()[1], b_grad));
  CHECK(acc.shadows()[2].abs().max().item<double>() == 0);  // held 3x its gradient before the step
  CHECK(acc.shadows()[3].abs().max().item<double>() == 0);
  acc.begin();
  used(x).sum().backward();
  acc.end();
  CHECK(at::allclose(acc.shadows()[0], 2 * w_grad));
  CHECK(at::equal(acc.shadows()[1], 2 * b_grad));
  acc.zero_();
  CHECK(acc.global_norm() == 0);
}
