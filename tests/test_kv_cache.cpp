// The decoder's KV cache (DecoderImpl::decode): a prefill and then one token at a time give the logits of the full
// forward at each new position within fp32 rounding, and greedy decoding through the cache picks the same tokens as
// greedy decoding that recomputes the whole prefix, for every option a Hugging Face family sets (GQA, q/k norms,
// q/k/v biases, RoPE scaling, a tied output), LoRA, both attention kernels and the ATen op chains. Every tensor is
// randomised first (norms off one, biases and LoRA's B off zero), so each one matters. A prefill in chunks (a chunk
// starting past position 0) is checked on both attention kernels. A cache that lost the prompt's first position must
// miss: the comparison can fail.
#include <catch2/catch.hpp>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include "TinyConfig.h"
#include "model/Decoder.h"
#include "util/Errors.h"
#include "RelativeError.h"

using namespace shadowgrad;

namespace {

constexpr double kTol = 1e-5;

using relative_error::rel_norm_diff;

// GQA (4 query heads over 2 KV heads), emb 32, 2 layers, vocab 64, max_length 16, fp32.
model::DecoderOptions tiny() {
  auto o = model::DecoderOptions::from_config(tiny_config());
  o.num_query_heads = 4;
  o.num_kv_heads = 2;
  o.head_dim = 8;
  return o;
}

model::Decoder randomised(const model::DecoderOptions& o) {
  model::Decoder m(o);
  auto gen = at::make_generator<at::CPUGeneratorImpl>(7);
  at::NoGradGuard no_grad;
  auto jitter = [&](const std::string& name, at::Tensor& t) {
    if (name.find("norm") != std::string::npos)
      t.copy_(1 + 0.1 * at::empty(t.sizes(), at::kFloat).normal_(0, 1, gen));
    else
      t.copy_(0.3 * at::empty(t.sizes(), at::kFloat).normal_(0, 1, gen));
  };
  for (auto& p : m->named_parameters()) jitter(p.key(), p.value());
  for (auto& b : m->named_buffers())
    if (b.key() != "rope_cos" && b.key() != "rope_sin" && b.key() != "causal_mask") jitter(b.key(), b.value());
  m->eval();
  return m;
}

at::Tensor row(const std::vector<int64_t>& ids) {
  return at::tensor(ids, at::kLong).view({1, int64_t(ids.size())});
}

struct Decoded {
  std::vector<int64_t> tokens;
  double worst = 0;  // the largest relative miss of a cached logits row against the full forward's
};

// Greedy from `prompt` to max_length tokens, through the cache; each step's logits checked against forward().
Decoded cached_greedy(model::Decoder& m, std::vector<int64_t> prompt) {
  const int64_t L = m->options().max_length;
  auto cache = m->new_cache(1, L);
  Decoded d;
  auto logits = m->decode(row(prompt), cache);
  std::vector<int64_t> seq = prompt;
  while (true) {
    at::NoGradGuard no_grad;
    auto full = m->forward(row(seq)).select(1, int64_t(seq.size()) - 1);
    d.worst = std::max(d.worst, rel_norm_diff(logits, full));
    const int64_t next = logits.argmax(-1).item<int64_t>();
    d.tokens.push_back(next);
    seq.push_back(next);
    if (int64_t(seq.size()) == L) break;
    logits = m->decode(row({next}), cache);
  }
  CHECK(cache.length == L - 1);  // the last token picked is never fed back
  return d;
}

// Greedy that recomputes the whole prefix for every token (what build/generate did before the cache).
std::vector<int64_t> uncached_greedy(model::Decoder& m, std::vector<int64_t> seq) {
  at::NoGradGuard no_grad;
  std::vector<int64_t> out;
  while (int64_t(seq.size()) < m->options().max_length) {
    const int64_t next = m->forward(row(seq)).select(1, int64_t(seq.size()) - 1).argmax(-1).item<int64_t>();
    out.push_back(next);
    seq.push_back(next);
  }
  return out;
}

void check_family(const model::DecoderOptions& o) {
  auto m = randomised(o);
  const std::vector<int64_t> prompt = {3, 17, 42, 5, 60};
  const auto cached = cached_greedy(m, prompt);
  INFO("worst relative miss of the cached logits " << cached.worst);
  CHECK(cached.worst < kTol);
  CHECK(cached.tokens == uncached_greedy(m, prompt));
  CHECK(cached.tokens.size() == 11);
}

} // namespace

TEST_CASE("KV cache: cached logits equal the full forward at each position, and greedy tokens match uncached",
          "[kv_cache]") {
  auto o = tiny();
  SECTION("GQA, untied") { check_family(o); }
  SECTION("multi-head (one query per KV head)") {
    o.num_kv_heads = 4;
    check_family(o);
  }
  SECTION("Qwen2: q/k/v biases") {
    o.attention_bias = true;
    check_family(o);
  }
  SECTION("Qwen3: q/k norms and a tied output") {
    o.qk_norm = true;
    o.tied_output = true;
    check_family(o);
  }
  SECTION("llama3 RoPE scaling") {
    o.rope_scaling = {config::RopeType::llama3, 8.0, 1.0, 4.0, 8};
    o.rope_max_timescale = 500000;
    check_family(o);
  }
  SECTION("LoRA on every projection, with dropout set (off in eval)") {
    o.lora.rank = 4;
    o.lora.scale = 2.0;
    o.lora.dropout = 0.1;
    o.lora.targeted.fill(true);
    o.attention_bias = true;
    check_family(o);
  }
  SECTION("dot_product attention and the ATen op chains") {
    o.attention = model::DecoderOptions::Attention::dot_product;
    o.fused_kernels = false;
    o.qk_norm = true;
    check_family(o);
  }
}

TEST_CASE("KV cache: a prefill in chunks and a truncated cache reused give the full forward's logits", "[kv_cache]") {
  auto o = tiny();
  o.qk_norm = true;
  // Both kernels: each masks a chunk that starts past 0 its own way (SDPA's mask argument, dot_product's added rows).
  o.attention = GENERATE(model::DecoderOptions::Attention::autoselected, model::DecoderOptions::Attention::dot_product);
  INFO("attention kernel " << (o.attention == model::DecoderOptions::Attention::dot_product ? "dot_product" : "sdpa"));
  auto m = randomised(o);
  const std::vector<int64_t> seq = {1, 9, 33, 7, 50, 2, 11, 63, 20, 4};
  at::Tensor full;
  {
    at::NoGradGuard no_grad;
    full = m->forward(row(seq)).squeeze(0);  // [T,V]
  }
  auto cache = m->new_cache(1, 12);
  m->decode(row({1, 9, 33}), cache);
  // Positions 3..6 at once: causal among themselves, after the 3 cached ones.
  CHECK(rel_norm_diff(m->decode(row({7, 50, 2, 11}), cache), full[6]) < kTol);
  CHECK(cache.length == 7);
  // A chat turn that shares the first 5 tokens: keep them, feed the rest.
  cache.truncate(5);
  CHECK(rel_norm_diff(m->decode(row({2, 11, 63}), cache), full[7]) < kTol);
  CHECK(rel_norm_diff(m->decode(row({20}), cache), full[8]) < kTol);

  SECTION("control: a cache that lost the first position misses") {
    auto short_cache = m->new_cache(1, 12);
    const auto missed = rel_norm_diff(m->decode(row({9, 33, 7, 50, 2, 11, 63, 20}), short_cache), full[8]);
    INFO("relative miss " << missed);
    CHECK(missed > 1e-3);
  }
}

TEST_CASE("KV cache: a batch of two sequences decodes each as alone", "[kv_cache]") {
  auto m = randomised(tiny());
  auto both = m->new_cache(2, 8);
  auto prompts = at::tensor(std::vector<int64_t>{5, 6, 7, 40, 41, 42}, at::kLong).view({2, 3});
  auto logits = m->decode(prompts, both);
  logits = m->decode(at::tensor(std::vector<int64_t>{8, 43}, at::kLong).view({2, 1}), both);
  for (int64_t r = 0; r < 2; ++r) {
    auto alone = m->new_cache(1, 8);
    m->decode(prompts.slice(0, r, r + 1), alone);
    auto want = m->decode(row({r == 0 ? 8 : 43}), alone);
    CHECK(rel_norm_diff(logits[r], want[0]) < kTol);
  }
}

TEST_CASE("KV cache: tokens past the capacity, or a capacity past max_length, are refused", "[kv_cache]") {
  auto m = randomised(tiny());
  CHECK_THROWS_AS(m->new_cache(1, m->options().max_length + 1), InputError);
  CHECK_THROWS_AS(m->new_cache(0, 4), InputError);
  auto cache = m->new_cache(1, 4);
  m->decode(row({1, 2, 3}), cache);
  CHECK_THROWS_AS(m->decode(row({4, 5}), cache), InputError);
  CHECK(cache.length == 3);  // a refused call leaves the cache as it was
  CHECK_NOTHROW(m->decode(row({4}), cache));
  CHECK_THROWS_AS(m->decode(row({5}), cache), InputError);
}
