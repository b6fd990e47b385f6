// The chunked cross-entropy (linear_token_loss_sum) against the plain one on full logits: loss and both
// gradients, with padding, for several chunk sizes; and the trainer's two loss paths giving the same shadows.
#include <catch2/catch.hpp>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include "TinyConfig.h"
#include "data/Batch.h"
#include "data/DataSource.h"
#include "model/Decoder.h"
#include "train/TokenLoss.h"
#include "train/TrainStep.h"
#include "RelativeError.h"

using namespace shadowgrad;

namespace {

using relative_error::rel_diff;

struct LossAndGrads {
  at::Tensor loss, grad_hidden, grad_weight;
};

template <typename LossFn>
LossAndGrads run(const at::Tensor& hidden0, const at::Tensor& weight0, LossFn loss_fn) {
  auto hidden = hidden0.detach().clone().requires_grad_();
  auto weight = weight0.detach().clone().requires_grad_();
  auto loss = loss_fn(hidden, weight);
  (loss * 0.37).backward();  // a non-unit upstream gradient, as the trainer's 1 / global tokens
  return {loss.detach(), hidden.grad(), weight.grad()};
}

} // namespace

TEST_CASE("chunked cross-entropy equals the full-logits one, padding included", "[loss]") {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(7);
  const int64_t N = 3, T = 5, E = 8, V = 40;
  auto hidden = at::randn({N, T, E}, gen);
  auto weight = at::randn({V, E}, gen);
  auto targets = at::randint(V, {N, T}, gen);
  targets[0].slice(0, 3).fill_(data::kIgnoreIndex);
  targets[2][4].fill_(data::kIgnoreIndex);

  auto full = run(hidden, weight, [&](const at::Tensor& h, const at::Tensor& w) {
    return train::token_loss_sum(at::linear(h, w), targets);
  });
  for (bool fused : {true, false})
    for (int64_t rows : {1, 4, 64}) {
      INFO("rows " << rows << " fused " << fused);
      auto chunked = run(hidden, weight, [&](const at::Tensor& h, const at::Tensor& w) {
        return train::linear_token_loss_sum(h, w, targets, rows, fused);
      });
      CHECK(chunked.loss.scalar_type() == at::kFloat);
      CHECK(rel_diff(chunked.loss, full.loss) <= 1e-6);
      CHECK(rel_diff(chunked.grad_hidden, full.grad_hidden) <= 1e-5);
      CHECK(rel_diff(chunked.grad_weight, full.grad_weight) <= 1e-5);
    }
  // Padding carries neither loss nor gradient: the rows of ignored targets get a zero hidden gradient.
  auto chunked = run(hidden, weight, [&](const at::Tensor& h, const at::Tensor& w) {
    return train::linear_token_loss_sum(h, w, targets, 2);
  });
  CHECK(chunked.grad_hidden[0][4].abs().max().item<double>() == 0.0);
  CHECK(chunked.grad_hidden[2][4].abs().max().item<double>() == 0.0);
  CHECK(chunked.grad_hidden[1][4].abs().max().item<double>() > 0.0);
}

TEST_CASE("chunked cross-entropy in bf16 matches the full-logits path in bf16", "[loss][bf16]") {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(3);
  auto hidden = at::randn({2, 16, 32}, gen).to(at::kBFloat16);
  auto weight = (at::randn({64, 32}, gen) * 0.1).to(at::kBFloat16);
  auto targets = at::randint(64, {2, 16}, gen);
  auto full = run(hidden, weight, [&](const at::Tensor& h, const at::Tensor& w) {
    return train::token_loss_sum(at::linear(h, w), targets);
  });
  for (bool fused : {true, false}) {
    INFO("fused " << fused);
    auto chunked = run(hidden, weight, [&](const at::Tensor& h, const at::Tensor& w) {
      return train::linear_token_loss_sum(h, w, targets, 8, fused);
    });
    CHECK(chunked.grad_hidden.scalar_type() == at::kBFloat16);
    CHECK(rel_diff(chunked.loss, full.loss) <= 1e-5);
    CHECK(rel_diff(chunked.grad_hidden, full.grad_hidden) <= 1e-2);
    CHECK(rel_diff(chunked.grad_weight, full.grad_weight) <= 1e-2);
  }
}

TEST_CASE("the decoder's logits are the output projection of its hidden states", "[loss][model]") {
  auto c = tiny_config();
  model::Decoder model(model::DecoderOptions::from_config(c));
  auto tokens = data::make_source(data::DataOptions::from_config(c))->examples(0, 0, 2).tokens;
  CHECK(rel_diff(model->forward(tokens), at::linear(model->hidden(tokens), model->output_weight())) <= 1e-6);
}

TEST_CASE("the trainer's chunked and full-logits loss paths accumulate the same gradient", "[loss][accumulate]") {
  auto shadows = [](int64_t chunk) {
    auto c = tiny_config();
    c.gradient_accumulation_steps = 2;
    c.per_device_batch_size = 2;
    c.synthetic_min_length_fraction = 0.3;
    c.loss_chunk_tokens = chunk;
    auto source = data::make_source(data::DataOptions::from_config(c));
    train::TrainStep step(train::StepOptions::from_config(c), model::Decoder(model::DecoderOptions::from_config(c)),
                          *source, c10::Device(c10::kCPU));
    auto acc = step.accumulate_batch(0);
    std::vector<at::Tensor> out{at::scalar_tensor(acc.loss, at::kDouble)};
    for (const auto& s : step.accumulator().shadows()) out.push_back(s.clone());
    return out;
  };
  auto full = shadows(0), chunked = shadows(5);
  REQUIRE(full.size() == chunked.size());
  for (size_t i = 0; i < full.size(); ++i) {
    INFO("tensor " << i);
    CHECK(rel_diff(chunked[i], full[i]) <= 1e-5);
  }
}

TEST_CASE("step statistics split the step's time into its phases", "[train]") {
  auto c = tiny_config();
  c.gradient_accumulation_steps = 2;
  auto source = data::make_source(data::DataOptions::from_config(c));
  train::TrainStep step(train::StepOptions::from_config(c), model::Decoder(model::DecoderOptions::from_config(c)),
                        *source, c10::Device(c10::kCPU));
  auto s = step.run(0);
  CHECK(s.forward_s > 0);
  CHECK(s.backward_s > 0);
  CHECK(s.optimizer_s > 0);
  CHECK(s.data_s >= 0);
  CHECK(s.fold_s > 0);
  CHECK(s.fold_s <= s.backward_s);
  CHECK(s.data_s + s.forward_s + s.backward_s + s.optimizer_s <= s.seconds);
}
