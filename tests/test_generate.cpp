// The decoding loop (src/generate): the sampler's greedy, temperature, top-k and top-p against distributions worked
// by hand, reproducible for a seed; the Generator's stop ids, max_new, the end of the context, its refusals, and a
// chat turn that reuses the cache of the last one and still gives what a fresh generator gives; --serve's JSON lines.
#include <catch2/catch.hpp>

#include <cmath>
#include <sstream>

#include <ATen/ATen.h>

#include "TinyConfig.h"
#include "generate/Generator.h"
#include "generate/Sampler.h"
#include "generate/Serve.h"
#include "model/Decoder.h"
#include "util/Errors.h"

using namespace shadowgrad;
using generate::Generation;

namespace {

at::Tensor log_probs(std::vector<float> p) { return at::tensor(p).log(); }

generate::SamplingOptions sampling(double temperature, int64_t top_k, double top_p, uint64_t seed = 0) {
  generate::SamplingOptions s;
  s.temperature = temperature;
  s.top_k = top_k;
  s.top_p = top_p;
  s.seed = seed;
  return s;
}

std::vector<int64_t> draws(const generate::SamplingOptions& s, const at::Tensor& logits, int n) {
  generate::Sampler sampler(s);
  std::vector<int64_t> out;
  for (int i = 0; i < n; ++i) out.push_back(sampler.next(logits));
  return out;
}

model::Decoder tiny_model() {
  auto o = model::DecoderOptions::from_config(tiny_config());  // vocab 64, max_length 16
  o.init_seed = 3;
  model::Decoder m(o);
  at::NoGradGuard no_grad;
  // A larger output scale, so that greedy picks differ from token to token.
  for (auto& p : m->named_parameters())
    if (p.key() == "output") p.value().mul_(50);
  return m;
}

} // namespace

TEST_CASE("Sampler: greedy is the argmax, and top-k and top-p keep what transformers keeps", "[generate]") {
  const auto logits = log_probs({0.5f, 0.3f, 0.15f, 0.05f});
  CHECK(draws(sampling(0, 0, 1), logits, 3) == std::vector<int64_t>(3, 0));
  // top_p 0.7: sorted ascending the masses are 0.05, 0.2, 0.5, 1; those <= 0.3 go (tokens 3 and 2).
  auto p = generate::Sampler(sampling(1, 0, 0.7)).probabilities(logits);
  CHECK(p[0].item<float>() == Approx(0.625));
  CHECK(p[1].item<float>() == Approx(0.375));
  CHECK(p[2].item<float>() == 0);
  CHECK(p[3].item<float>() == 0);
  // top_k 3 at temperature 2: the three largest of softmax(log p / 2) = sqrt(p), renormalised.
  p = generate::Sampler(sampling(2, 3, 1)).probabilities(logits);
  const double z = std::sqrt(0.5) + std::sqrt(0.3) + std::sqrt(0.15);
  CHECK(p[0].item<float>() == Approx(std::sqrt(0.5) / z));
  CHECK(p[2].item<float>() == Approx(std::sqrt(0.15) / z));
  CHECK(p[3].item<float>() == 0);
  // top_k 1 and a tiny top_p are greedy at any temperature.
  CHECK(draws(sampling(5, 1, 1, 9), logits, 20) == std::vector<int64_t>(20, 0));
  CHECK(draws(sampling(5, 0, 1e-6, 9), logits, 20) == std::vector<int64_t>(20, 0));
}

TEST_CASE("Sampler: a seed gives the same draws, another seed others, and bad options are refused", "[generate]") {
  const auto flat = at::zeros({64});
  const auto a = draws(sampling(1, 0, 1, 42), flat, 32);
  CHECK(a == draws(sampling(1, 0, 1, 42), flat, 32));
  CHECK(a != draws(sampling(1, 0, 1, 43), flat, 32));
  // The draws follow the distribution: over 20000 draws from (0.5, 0.3, 0.15, 0.05), each frequency within 0.015.
  const auto many = draws(sampling(1, 0, 1, 1), log_probs({0.5f, 0.3f, 0.15f, 0.05f}), 20000);
  const double want[] = {0.5, 0.3, 0.15, 0.05};
  for (int64_t t = 0; t < 4; ++t)
    CHECK(std::abs(std::count(many.begin(), many.end(), t) / 20000.0 - want[t]) < 0.015);
  CHECK_THROWS_AS(generate::Sampler(sampling(-1, 0, 1)), InputError);
  CHECK_THROWS_AS(generate::Sampler(sampling(NAN, 0, 1)), InputError);
  CHECK_THROWS_AS(generate::Sampler(sampling(1, -2, 1)), InputError);
  CHECK_THROWS_AS(generate::Sampler(sampling(1, 0, 0)), InputError);
  CHECK_THROWS_AS(generate::Sampler(sampling(1, 0, 1.5)), InputError);
}

TEST_CASE("Generator: stop ids, max_new, the end of the context, and refused prompts", "[generate]") {
  generate::Generator gen(tiny_model());
  generate::GenerateOptions o;
  o.max_new = 6;
  const std::vector<int64_t> prompt = {1, 2, 3, 4};
  const auto free_run = gen.run(prompt, o);
  CHECK(free_run.tokens.size() == 6);
  CHECK(free_run.finish == Generation::Finish::length);
  CHECK(free_run.prompt_tokens == 4);

  o.stop_ids = {free_run.tokens[2]};
  const auto stopped = gen.run(prompt, o);
  const auto first = std::find(free_run.tokens.begin(), free_run.tokens.end(), free_run.tokens[2]);
  CHECK(stopped.tokens == std::vector<int64_t>(free_run.tokens.begin(), first + 1));
  CHECK(stopped.finish == Generation::Finish::stop);

  // 16 positions, as transformers' max_length=16: a 14-token prompt leaves room for 2 tokens, and a prompt that fills
  // the context still gets 1 (transformers generates one past an input of max_length, with a warning).
  o.stop_ids.clear();
  o.max_new = 100;
  const auto full = gen.run(std::vector<int64_t>(14, 5), o);
  CHECK(full.tokens.size() == 2);
  CHECK(full.finish == Generation::Finish::context);
  const auto filled = gen.run(std::vector<int64_t>(16, 5), o);
  CHECK(filled.tokens.size() == 1);
  CHECK(filled.finish == Generation::Finish::context);

  int calls = 0;
  const auto cut = gen.run(prompt, o, [&](int64_t) { return ++calls < 2; });
  CHECK(cut.tokens.size() == 2);

  CHECK_THROWS_AS(gen.run({}, o), InputError);
  CHECK_THROWS_AS(gen.run(std::vector<int64_t>(17, 1), o), InputError);
  CHECK_THROWS_AS(gen.run({1, 64}, o), InputError);
  CHECK_THROWS_AS(gen.run({-1}, o), InputError);
  o.max_new = 0;
  CHECK_THROWS_AS(gen.run({1}, o), InputError);
}

TEST_CASE("Generator: a chat turn reuses the conversation's cached prefix and answers as a fresh generator does",
          "[generate]") {
  generate::GenerateOptions o;
  o.max_new = 3;
  generate::Generator chat(tiny_model());
  const std::vector<int64_t> turn1 = {7, 8, 9};
  const auto answer = chat.run(turn1, o);
  auto turn2 = turn1;
  turn2.insert(turn2.end(), answer.tokens.begin(), answer.tokens.end());
  turn2.insert(turn2.end(), {10, 11});
  const auto reply = chat.run(turn2, o);
  CHECK(reply.reused_tokens == 5);  // the prompt and the answer but its last token, which was never fed back
  generate::Generator fresh(tiny_model());
  const auto want = fresh.run(turn2, o);
  CHECK(want.reused_tokens == 0);
  CHECK(reply.tokens == want.tokens);
  // An edited history keeps only the shared prefix.
  const auto edited = chat.run({7, 8, 12, 13}, o);
  CHECK(edited.reused_tokens == 2);
  CHECK(edited.tokens == generate::Generator(tiny_model()).run({7, 8, 12, 13}, o).tokens);
}

TEST_CASE("serve: JSON-line requests, streamed tokens, and a bad request answered with code 2 without ending",
          "[generate]") {
  generate::Generator gen(tiny_model());
  generate::GenerateOptions o;
  o.max_new = 4;
  const auto want = generate::Generator(tiny_model()).run({1, 2, 3}, o).tokens;
  std::istringstream in(R"({"ids": [1, 2, 3], "max_new": 4, "stream": true}
{"ids": []}
not json

{"ids": [1], "top_p": 2}
{"ids": [1], "colour": "red"}
{"ids": [1, 99]}
{"ids": [1, 2, 3], "max_new": 4, "stop": [)" + std::to_string(want[1]) + R"(]}
)");
  std::ostringstream out;
  generate::serve(gen, in, out);
  std::vector<nlohmann::json> lines;
  std::istringstream replies(out.str());
  for (std::string line; std::getline(replies, line);) lines.push_back(nlohmann::json::parse(line));
  REQUIRE(lines.size() == 4 + 1 + 5 + 1);
  for (int i = 0; i < 4; ++i) CHECK(lines[i]["token"] == want[i]);
  CHECK(lines[4]["ids"].get<std::vector<int64_t>>() == want);
  CHECK(lines[4]["finish"] == "length");
  CHECK(lines[4]["prompt_tokens"] == 3);
  for (int i = 5; i < 10; ++i) {
    INFO(lines[i].dump());
    CHECK(lines[i]["code"] == 2);
  }
  CHECK(lines[9]["error"].get<std::string>().find("vocabulary") != std::string::npos);
  CHECK(lines[10]["finish"] == "stop");
  CHECK(lines[10]["reused_tokens"] == 2);
}
