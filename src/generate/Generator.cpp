#include "generate/Generator.h"

#include <algorithm>
#include <chrono>

#include <ATen/ATen.h>
#include <fmt/format.h>

#include "util/Errors.h"

namespace shadowgrad::generate {

const char* finish_name(Generation::Finish f) {
  switch (f) {
    case Generation::Finish::stop: return "stop";
    case Generation::Finish::length: return "length";
    case Generation::Finish::context: return "context";
  }
  return "?";
}

Generator::Generator(model::Decoder model, int64_t capacity) : model_(std::move(model)) {
  model_->eval();  // no LoRA dropout
  cache_ = model_->new_cache(1, capacity > 0 ? capacity : model_->options().max_length);
}

Generation Generator::run(const std::vector<int64_t>& prompt, const GenerateOptions& options,
                          const std::function<bool(int64_t)>& on_token) {
  using clock = std::chrono::steady_clock;
  const auto t0 = clock::now();
  const int64_t vocab = model_->options().vocab_size, P = int64_t(prompt.size());
  if (prompt.empty()) throw InputError("the prompt is empty");
  if (P > capacity())
    throw InputError(fmt::format("the prompt has {} tokens; the context holds {} (max_target_length)", P, capacity()));
  for (int64_t id : prompt)
    if (id < 0 || id >= vocab)
      throw InputError(fmt::format("prompt token id {} is outside the vocabulary [0, {})", id, vocab));
  if (options.max_new < 1) throw InputError(fmt::format("max_new must be >= 1, got {}", options.max_new));
  Sampler sampler(options.sampling);

  // Keep what the cache holds of this prompt's prefix; at least the last prompt token is run again, for its logits.
  const auto shared = std::mismatch(cached_.begin(), cached_.end(), prompt.begin(), prompt.end());
  const int64_t reuse = options.reuse_cache ? std::min<int64_t>(shared.first - cached_.begin(), P - 1) : 0;
  cache_.truncate(reuse);
  cached_.assign(prompt.begin(), prompt.begin() + reuse);
  Generation g;
  g.prompt_tokens = P;
  g.reused_tokens = reuse;

  auto feed = [&](const std::vector<int64_t>& ids) {
    auto logits = model_->decode(at::tensor(ids, at::kLong).view({1, int64_t(ids.size())}), cache_);
    cached_.insert(cached_.end(), ids.begin(), ids.end());
    return logits[0];
  };
  auto logits = feed(std::vector<int64_t>(prompt.begin() + reuse, prompt.end()));
  clock::time_point first;
  while (true) {
    const int64_t next = sampler.next(logits);
    g.tokens.push_back(next);
    if (g.tokens.size() == 1) first = clock::now();
    const bool more = !on_token || on_token(next);
    if (std::find(options.stop_ids.begin(), options.stop_ids.end(), next) != options.stop_ids.end()) {
      g.finish = Generation::Finish::stop;
      break;
    }
    if (!more || int64_t(g.tokens.size()) == options.max_new) {
      g.finish = Generation::Finish::length;
      break;
    }
    // transformers' max_length: prompt and output together hold at most the context (and a prompt that fills it
    // still gets one token, as there). The token just sampled is not in the cache yet.
    if (cache_.length + 1 >= capacity()) {
      g.finish = Generation::Finish::context;
      break;
    }
    logits = feed({next});
  }
  const auto end = clock::now();
  g.first_token_s = std::chrono::duration<double>(first - t0).count();
  g.decode_s = std::chrono::duration<double>(end - first).count();
  return g;
}

} // namespace shadowgrad::generate
