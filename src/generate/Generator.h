#pragma once
// The decoding loop over the decoder's KV cache (model/Decoder.h): a prefill of the prompt in one forward, then one
// token at a time, each picked by a Sampler, until a stop id, max_new tokens or the end of the context. The model
// knows nothing of stop ids or sampling; this room knows nothing of tokenizers (scripts/lib/generate.py has them).
//
//   generate::Generator gen(model);                    // the model in eval mode, its cache allocated once
//   GenerateOptions o;  o.max_new = 64;  o.stop_ids = {eos};
//   Generation g = gen.run(prompt_ids, o);             // g.tokens, g.finish, g.first_token_s, g.decode_s
//   gen.run(prompt_ids_plus_answer_plus_next_turn, o); // a chat: the prefix shared with the last call is not recomputed
#include <cstdint>
#include <functional>
#include <vector>

#include "generate/Sampler.h"
#include "model/Decoder.h"

namespace shadowgrad::generate {

struct GenerateOptions {
  int64_t max_new = 64;
  std::vector<int64_t> stop_ids;  // generation ends after one of these (it is part of the output)
  SamplingOptions sampling;
  bool reuse_cache = true;  // false: the prompt is computed whole even where it repeats the last call's (benchmarks)
};

struct Generation {
  enum class Finish { stop, length, context };  // a stop id; max_new tokens; the context (max_length) is full
  std::vector<int64_t> tokens;
  Finish finish = Finish::length;
  int64_t prompt_tokens = 0;
  int64_t reused_tokens = 0;  // prompt positions taken from the cache of the previous call
  double first_token_s = 0;   // from the call to the first token chosen (the prefill)
  double decode_s = 0;        // from the first token to the last
};

const char* finish_name(Generation::Finish f);

class Generator {
 public:
  // capacity: the most positions a prompt and its continuation may take; 0: the model's max_length.
  explicit Generator(model::Decoder model, int64_t capacity = 0);

  // Checks the prompt (InputError: empty, longer than the context, an id outside the vocabulary), then generates.
  // on_token(id), when given, is called as each token is chosen; returning false ends generation there.
  Generation run(const std::vector<int64_t>& prompt, const GenerateOptions& options,
                 const std::function<bool(int64_t)>& on_token = {});

  int64_t capacity() const { return cache_.capacity(); }
  const model::Decoder& model() const { return model_; }

 private:
  model::Decoder model_;
  model::KvCache cache_;
  std::vector<int64_t> cached_;  // the tokens whose keys and values the cache holds
};

} // namespace shadowgrad::generate
