// The attention kernels (attention=autoselected, LibTorch's scaled_dot_product_attention, against dot_product, the
// explicit matmul-mask-softmax): the same decoder weights give the same logits and every parameter's gradient within
// fp32 rounding, for grouped-query heads, plain causal rows and packed rows (block-causal mask, restarting
// positions), and with remat_policy=minimal. A kernel that ignored the packed mask would miss by far more: the test
// shows it does.
#include <catch2/catch.hpp>

#include <ATen/ATen.h>
#include <torch/csrc/autograd/autograd.h>

#include "TinyConfig.h"
#include "model/Decoder.h"
#include "RelativeError.h"

using namespace shadowgrad;

namespace {

struct AttentionPass {
  at::Tensor logits;
  std::vector<at::Tensor> grads;
};

// Two rows of 16 tokens: the first packs examples of 5, 7 and 4 tokens, the second is one example.
struct Batch {
  at::Tensor tokens = at::arange(32, at::kLong).remainder(61).view({2, 16});
  at::Tensor segments = at::cat({at::full({5}, 0, at::kLong), at::full({7}, 1, at::kLong), at::full({4}, 2, at::kLong),
                                 at::zeros({16}, at::kLong)})
                            .view({2, 16});
  at::Tensor positions = at::cat({at::arange(5, at::kLong), at::arange(7, at::kLong), at::arange(4, at::kLong),
                                  at::arange(16, at::kLong)})
                             .view({2, 16});
};

AttentionPass run(model::DecoderOptions o, const std::string& attention, bool packed) {
  o.attention = attention == "dot_product" ? model::DecoderOptions::Attention::dot_product
                                           : model::DecoderOptions::Attention::autoselected;
  model::Decoder m(o);
  Batch b;
  auto logits = packed ? m->forward(b.tokens, b.segments, b.positions) : m->forward(b.tokens);
  // A loss that weighs every logit differently, so no gradient cancels by symmetry.
  auto weights = at::linspace(-1, 1, logits.numel(), at::kFloat).view(logits.sizes());
  (logits * weights).sum().backward();
  AttentionPass r{logits.detach(), {}};
  for (const auto& p : m->parameters()) r.grads.push_back(p.grad().clone());
  return r;
}

using relative_error::rel_norm_diff;

double worst_gradient(const AttentionPass& got, const AttentionPass& want) {
  double worst = 0;
  for (size_t i = 0; i < want.grads.size(); ++i) worst = std::max(worst, rel_norm_diff(got.grads[i], want.grads[i]));
  return worst;
}

model::DecoderOptions tiny_gqa() {
  auto o = model::DecoderOptions::from_config(tiny_config());
  o.num_query_heads = 4;
  o.num_kv_heads = 2;  // two query heads per key/value head
  o.init_seed = 7;
  return o;
}

} // namespace

TEST_CASE("attention=autoselected gives dot_product's logits and gradients within fp32 rounding", "[attention]") {
  for (bool packed : {false, true})
    for (auto remat : {model::DecoderOptions::Remat::none, model::DecoderOptions::Remat::minimal}) {
      auto o = tiny_gqa();
      o.remat = remat;
      INFO("packed=" << packed << " remat_policy=" << (remat == model::DecoderOptions::Remat::none ? "none" : "minimal"));
      const auto want = run(o, "dot_product", packed);
      const auto got = run(o, "autoselected", packed);
      REQUIRE(want.grads.size() == got.grads.size());
      for (const auto& g : want.grads) CHECK(g.abs().max().item<double>() > 0);
      CHECK(rel_norm_diff(got.logits, want.logits) < 1e-6);
      CHECK(worst_gradient(got, want) < 1e-5);
    }
}

TEST_CASE("a packed row through attention=autoselected is cut at its example boundaries", "[attention]") {
  // Packed rows against the same rows with plain causal attention: the mask must change the logits of the examples
  // after the first by far more than the kernels' rounding (1e-6 above; 6e-3 here on 2026-12-03).
  const auto o = tiny_gqa();
  const auto packed = run(o, "autoselected", true);
  Batch b;
  model::Decoder m(o);
  auto causal_only = m->forward(b.tokens, {}, b.positions).detach();
  CHECK(rel_norm_diff(causal_only.slice(1, 5, 16)[0], packed.logits.slice(1, 5, 16)[0]) > 1e-3);
  // Its first example sees nothing before it either way.
  CHECK(rel_norm_diff(causal_only.slice(1, 0, 5)[0], packed.logits.slice(1, 0, 5)[0]) < 1e-6);
}
