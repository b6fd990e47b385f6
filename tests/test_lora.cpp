// The LoRA branch in the decoder (model/LoraOptions.h): which tensors train (no base tensor in parameters() or the
// step's optimizer), peft's initialisation, the math against the merged weight W + s B A at alpha/r and rsLoRA's
// alpha/sqrt(r) as a run's config sets them, the frozen linear's input gradient, dropout's masks, the targets' one
// spelling, and the noise scale of a tied LoRA run. Parity with peft itself is tests/lora_peft_parity_test.py.
#include <catch2/catch.hpp>

#include <ATen/ATen.h>
#include <torch/csrc/autograd/autograd.h>

#include "TinyConfig.h"
#include "data/DataSource.h"
#include "model/Decoder.h"
#include "model/FrozenLinear.h"
#include "train/NoiseScale.h"
#include "train/StepOptions.h"
#include "train/TrainStep.h"
#include "util/Errors.h"

using namespace shadowgrad;

namespace {

model::DecoderOptions lora_options(int64_t rank, double alpha, const std::string& targets = "all-linear") {
  auto c = tiny_config();
  c.lora_rank = rank;
  c.lora_alpha = alpha;
  c.lora_target_modules = targets;
  return model::DecoderOptions::from_config(c);
}

at::Tensor tokens() { return at::arange(32, at::kLong).remainder(61).view({2, 16}); }

// Gives every B a random value, so the branch is not zero.
void randomise_b(model::Decoder& m) {
  at::NoGradGuard no_grad;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(7);
  for (auto& p : m->named_parameters())
    if (p.key().size() > 7 && p.key().substr(p.key().size() - 7) == "_lora_b") p.value().normal_(0, 0.1, gen);
}

} // namespace

TEST_CASE("LoRA: only the adapters are parameters, and the base is frozen buffers with the same names", "[lora]") {
  model::Decoder m(lora_options(4, 8, "q_proj,v_proj,down_proj"));
  auto params = m->named_parameters();
  CHECK(params.size() == 2 * 3 * 2);  // 2 layers x 3 targets x (A, B)
  for (const auto& p : params) {
    INFO(p.key());
    CHECK(p.value().scalar_type() == at::kFloat);
    CHECK(p.key().find("_lora_") != std::string::npos);
  }
  REQUIRE(params.find("layer1_wq_lora_a"));
  CHECK(params.find("layer1_wq_lora_a")->sizes() == at::IntArrayRef({4, 32}));
  CHECK(params.find("layer1_w_down_lora_a")->sizes() == at::IntArrayRef({4, 64}));
  CHECK(params.find("layer1_w_down_lora_b")->sizes() == at::IntArrayRef({32, 4}));
  CHECK_FALSE(params.find("layer0_wk_lora_a"));
  REQUIRE(m->find_weight("layer0_wq"));
  CHECK_FALSE(m->find_weight("layer0_wq")->requires_grad());
  CHECK(m->find_weight("embedding"));
}

TEST_CASE("LoRA: peft's initialisation (B zero) leaves the base model's logits exactly, and A is U(-1/sqrt(in), ..)",
          "[lora]") {
  model::Decoder base(lora_options(0, 0)), lora(lora_options(8, 16));
  CHECK(at::equal(base->forward(tokens()), lora->forward(tokens())));
  const auto a = *lora->named_parameters().find("layer0_w_down_lora_a");  // in = mlp_dim = 64
  CHECK(a.abs().max().item<double>() <= 1.0 / 8.0);
  CHECK(a.abs().max().item<double>() > 0.9 / 8.0);
  CHECK(a.std().item<double>() > 0.0);
}

TEST_CASE("LoRA: logits equal the base model with W + s B A merged in, at alpha/r and at rsLoRA's alpha/sqrt(r)",
          "[lora]") {
  for (bool rslora : {false, true}) {
    auto c = tiny_config();
    c.lora_rank = 4;
    c.lora_alpha = 8;
    c.lora_use_rslora = rslora;
    const auto o = model::DecoderOptions::from_config(c);  // the scale as a run sets it
    CHECK(o.lora.scale == (rslora ? 8 / std::sqrt(4.0) : 8 / 4.0));
    model::Decoder lora(o), merged(lora_options(0, 0));
    randomise_b(lora);
    {
      at::NoGradGuard no_grad;
      for (auto& p : merged->named_parameters()) {
        auto* a = lora->named_parameters().find(p.key() + "_lora_a");
        auto* b = lora->named_parameters().find(p.key() + "_lora_b");
        if (a) p.value().add_(at::matmul(*b, *a), o.lora.scale);
      }
    }
    const auto want = merged->forward(tokens()), got = lora->forward(tokens());
    INFO("rslora " << rslora);
    CHECK(at::allclose(got, want, 1e-5, 1e-5));
    // The control: a scale of alpha instead of alpha / r is far off.
    auto wrong = o;
    wrong.lora.scale = 8;
    model::Decoder lora_wrong(wrong);
    randomise_b(lora_wrong);
    CHECK_FALSE(at::allclose(lora_wrong->forward(tokens()), want, 1e-3, 1e-3));
  }
}

TEST_CASE("LoRA: backward reaches every adapter, and no base tensor is trained by the step", "[lora]") {
  model::Decoder m(lora_options(4, 8));
  randomise_b(m);
  m->forward(tokens()).square().mean().backward();
  for (const auto& p : m->named_parameters()) {
    INFO(p.key());
    REQUIRE(p.value().grad().defined());
    CHECK(p.value().grad().abs().sum().item<double>() > 0);
  }
  // What could go wrong is a base tensor in the trained set: in parameters(), so in the shadow tree, the optimizer
  // and the checkpoint (model.pt is named_parameters(); tests/lora_test.sh reads one). Each base weight is a buffer.
  auto cfg = tiny_config();
  cfg.lora_rank = 4;
  cfg.gradient_accumulation_steps = 2;
  model::Decoder trained(model::DecoderOptions::from_config(cfg));
  auto source = data::make_source(data::DataOptions::from_config(cfg));
  train::TrainStep step(train::StepOptions::from_config(cfg), trained, *source, c10::Device(c10::kCPU));
  int64_t in_optimizer = 0;
  for (const auto& group : step.optimizer().param_groups())
    for (const auto& p : group.params()) {
      ++in_optimizer;
      bool adapter = false;
      for (const auto& q : trained->named_parameters())
        if (q.value().is_same(p)) adapter = q.key().find("_lora_") != std::string::npos;
      CHECK(adapter);
    }
  CHECK(in_optimizer == int64_t(trained->parameters().size()));
  const auto params = trained->named_parameters();
  for (const char* base : {"embedding", "output", "final_norm", "layer0_wq", "layer1_w_down", "layer0_attn_norm"}) {
    INFO(base);
    CHECK_FALSE(params.find(base));
  }
  REQUIRE(trained->find_weight("layer1_w_down"));  // the control: the names are the base's, held as buffers
  CHECK(trained->named_buffers().find("layer1_w_down"));
  // A full fine-tune, the same way: the base is what trains (the check above can see a base tensor).
  cfg.lora_rank = 0;
  model::Decoder full(model::DecoderOptions::from_config(cfg));
  CHECK(full->named_parameters().find("layer1_w_down"));
}

TEST_CASE("LoRA on a tied model: the noise scale is measured (the tied embedding is frozen), a tied full fine-tune's "
          "is not",
          "[lora][gns]") {
  auto cfg = tiny_config();
  cfg.logits_via_embedding = true;  // tied, as SmolLM2 is
  cfg.gradient_accumulation_steps = 2;
  cfg.lora_rank = 4;
  auto source = data::make_source(data::DataOptions::from_config(cfg));
  model::Decoder lora(model::DecoderOptions::from_config(cfg));
  train::TrainStep step(train::StepOptions::from_config(cfg), lora, *source, c10::Device(c10::kCPU));
  REQUIRE(step.noise_scale() != nullptr);
  bool estimated = false;
  for (int64_t s = 0; s < 4; ++s) {
    const train::StepStats st = step.run(s);
    estimated = estimated || (st.noise && std::isfinite(st.noise->gns_tokens));
  }
  CHECK(estimated);
  // The control: a tied full fine-tune trains the embedding, which gets two gradients per backward; not measured.
  cfg.lora_rank = 0;
  model::Decoder full(model::DecoderOptions::from_config(cfg));
  train::TrainStep full_step(train::StepOptions::from_config(cfg), full, *source, c10::Device(c10::kCPU));
  CHECK(full_step.noise_scale() == nullptr);
}

TEST_CASE("frozen_linear: the input gradient equals at::linear's, from a bf16 weight too", "[lora]") {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(3);
  auto w = at::empty({5, 7}, at::kFloat).normal_(0, 1, gen).to(at::kBFloat16);
  auto bias = at::empty({5}, at::kFloat).normal_(0, 1, gen);
  auto x = at::empty({3, 7}, at::kFloat).normal_(0, 1, gen).requires_grad_();
  auto y = model::frozen_linear(x, w, bias);
  auto want = at::linear(x.detach(), w.to(at::kFloat), bias);
  CHECK(at::allclose(y, want));
  auto g = at::arange(15, at::kFloat).view({3, 5});
  y.backward(g);
  CHECK(at::allclose(x.grad(), at::matmul(g, w.to(at::kFloat))));
}

TEST_CASE("adapted_linear: q, k, v in one node equal the op chain x W^T + b + s (x A^T) B^T, values and gradients",
          "[lora]") {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(5);
  auto normal = [&](std::vector<int64_t> shape) { return at::empty(shape, at::kFloat).normal_(0, 1, gen); };
  const int64_t in = 12, r = 3;
  const double scale = 2.5;
  for (bool biased : {false, true})
    for (int64_t n : {1, 3}) {
      INFO("biased " << biased << ", n " << n);
      auto x = normal({2, 5, in}).requires_grad_();
      std::vector<model::AdaptedProjection> ps;
      for (int64_t i = 0; i < n; ++i) {
        const int64_t out = 4 + 3 * i;  // q, k and v differ in width under GQA
        ps.push_back({normal({out, in}).to(at::kBFloat16), biased ? normal({out}) : at::Tensor(),
                      normal({r, in}).requires_grad_(), normal({out, r}).requires_grad_()});
      }
      const auto ys = model::adapted_linear(x, ps, scale);
      REQUIRE(int64_t(ys.size()) == n);
      at::Tensor loss = at::zeros({}), want_loss = at::zeros({});
      auto x2 = x.detach().clone().requires_grad_();
      std::vector<at::Tensor> a2, b2, grads;
      for (int64_t i = 0; i < n; ++i) {
        const auto& p = ps[i];
        a2.push_back(p.a.detach().clone().requires_grad_());
        b2.push_back(p.b.detach().clone().requires_grad_());
        auto want = at::linear(x2, p.weight.to(at::kFloat), biased ? p.bias : at::Tensor()) +
                    at::linear(at::linear(x2, a2[i]), b2[i]) * scale;
        CHECK(ys[i].sizes() == want.sizes());
        CHECK(at::allclose(ys[i], want, 1e-5, 1e-5));
        const auto g = normal(want.sizes().vec());
        grads.push_back(g);
        loss = loss + (ys[i] * g).sum();
        want_loss = want_loss + (want * g).sum();
      }
      loss.backward();
      want_loss.backward();
      CHECK(at::allclose(x.grad(), x2.grad(), 1e-5, 1e-5));
      for (int64_t i = 0; i < n; ++i) {
        CHECK(at::allclose(ps[i].a.grad(), a2[i].grad(), 1e-5, 1e-5));
        CHECK(at::allclose(ps[i].b.grad(), b2[i].grad(), 1e-5, 1e-5));
        CHECK_FALSE(ps[i].weight.grad().defined());  // the frozen base gets no gradient
      }
      // The control: x's gradient without the adapters' share (the base's alone) is visibly off.
      auto base_only = at::zeros_like(x2);
      for (int64_t i = 0; i < n; ++i) base_only += at::matmul(grads[i], ps[i].weight.to(at::kFloat));
      CHECK_FALSE(at::allclose(base_only, x.grad(), 1e-3, 1e-3));
    }
}

TEST_CASE("LoRA dropout: a mask per row from its global sequence number, off in eval", "[lora]") {
  auto o = lora_options(4, 8);
  o.lora.dropout = 0.5;
  model::Decoder m(o);
  randomise_b(m);
  auto t = tokens();
  m->set_lora_dropout_rows(10);
  const auto first = m->forward(t);
  CHECK(at::equal(first, m->forward(t)));  // the same rows draw the same masks
  // Row 11 alone, numbered 11, sees the mask it had as the second row of the pair.
  m->set_lora_dropout_rows(11);
  CHECK(at::allclose(m->forward(t.slice(0, 1, 2)), first.slice(0, 1, 2), 1e-6, 1e-6));
  m->set_lora_dropout_rows(12);
  CHECK_FALSE(at::allclose(m->forward(t), first, 1e-4, 1e-4));
  m->eval();
  model::Decoder no_drop(lora_options(4, 8));
  randomise_b(no_drop);
  CHECK(at::equal(m->forward(t), no_drop->forward(t)));
}

TEST_CASE("lora_target_modules: names, all-linear, and an unknown name refused", "[lora]") {
  CHECK(model::lora_targets_string(model::parse_lora_targets("all-linear")) ==
        "q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj");
  CHECK(model::lora_targets_string(model::parse_lora_targets("v_proj, q_proj")) == "q_proj,v_proj");
  // The spelling a checkpoint pins: a set, one name for it.
  CHECK(model::canonical_lora_targets("v_proj, q_proj") == "q_proj,v_proj");
  CHECK(model::canonical_lora_targets("down_proj,up_proj,gate_proj,o_proj,v_proj,k_proj,q_proj") == "all-linear");
  CHECK(model::canonical_lora_targets("all-linear") == "all-linear");
  CHECK_THROWS_AS(model::parse_lora_targets("q_proj,qkv"), ConfigError);
  CHECK_THROWS_WITH(model::parse_lora_targets("q_proj,qkv"), Catch::Contains("'qkv'"));
}
