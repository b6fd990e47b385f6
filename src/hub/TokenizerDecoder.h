#pragma once
// Token ids back to text from a Hugging Face tokenizer.json, as `tokenizer.decode(ids, skip_special_tokens=True)`
// does, for what the trainer writes to samples.jsonl (eval_prompts_path). Decoding needs only the vocabulary and the
// decoder section; encoding (merges, pre-tokenizer regexes, chat templates) stays in Python, where
// scripts/prepare_prompts.sh does it once before the run.
//
//   auto dec = TokenizerDecoder::from_directory("models/SmolLM2-135M-Instruct");  // std::nullopt: no tokenizer.json
//   if (dec) text = dec->decode({504, 3575, 282});
//
// Decoders understood: ByteLevel (GPT-2, Llama 3, Qwen, SmolLM2), Metaspace, a Sequence of Replace, ByteFallback,
// Fuse, Strip and ByteLevel (Llama 2, Mistral), and none (the tokens joined by spaces, as tokenizers does).
// Anything else is refused with DataError at construction. tokenizer_config.json's clean_up_tokenization_spaces is not
// applied: transformers 5 ignores it for BPE tokenizers, the kind these decoders serve.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace shadowgrad::hub {

class TokenizerDecoder {
 public:
  // Reads path (a tokenizer.json); throws DataError naming it if it is unreadable or its decoder is not understood.
  explicit TokenizerDecoder(const std::string& path);
  // dir/tokenizer.json, or nullopt when dir is empty or has none.
  static std::optional<TokenizerDecoder> from_directory(const std::string& dir);

  // Special tokens (added tokens marked special) are left out; invalid UTF-8 becomes U+FFFD, as tokenizers does.
  // An id with no token is skipped.
  std::string decode(const std::vector<int64_t>& ids) const;

 private:
  struct Step {  // one decoder of the chain
    enum class Kind { byte_level, byte_fallback, fuse, replace, strip, metaspace } kind;
    std::string from{}, to{};  // replace: pattern and content; metaspace: the replacement character
    int64_t start = 0, stop = 0;  // strip: characters off each token's start and end; metaspace: 1 strips the first space
  };
  void add_steps(const nlohmann::json& decoder, const std::string& path);
  std::vector<std::string> apply(std::vector<std::string> tokens) const;

  std::vector<std::string> pieces_;  // by id; "" where the id has no token
  std::vector<bool> special_;
  std::vector<Step> steps_;
  bool join_with_spaces_ = false;  // no decoder at all
};

} // namespace shadowgrad::hub
