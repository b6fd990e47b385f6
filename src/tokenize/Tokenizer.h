#pragma once
// A SentencePiece tokenizer (Debian's libsentencepiece 0.1.97): train one on a text file, or load a .model.
// Only for processes without LibTorch (build/tokenize, tokenize_tests): see data/TokenizerVocab.h for why.
//
//   Tokenizer::train("corpus.txt", "out/tokenizer", 4096);        // writes out/tokenizer.model and .vocab
//   Tokenizer tok = Tokenizer::load("out/tokenizer.model");        // throws DataError naming tokenizer_path
//   std::vector<uint32_t> ids = tok.encode("In the beginning");
//   tok.vocab_size(); tok.eos_id();
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace shadowgrad::tokenize {

class Tokenizer {
public:
  // `key` names the setting in messages ("tokenizer_path", "--model").
  static Tokenizer load(const std::string& path, const std::string& key = "tokenizer_path");
  // Trains a model on `input` (one sentence per line) into PREFIX.model and PREFIX.vocab. Throws
  // std::runtime_error with SentencePiece's message.
  static void train(const std::string& input, const std::string& prefix, int vocab_size,
                    const std::string& model_type = "unigram", int threads = 2);
  Tokenizer(Tokenizer&&) noexcept;
  ~Tokenizer();

  int vocab_size() const;
  int eos_id() const; // -1 when the model has none
  std::vector<uint32_t> encode(const std::string& text) const;
  std::string decode(const std::vector<uint32_t>& ids) const;

private:
  explicit Tokenizer(std::unique_ptr<sentencepiece::SentencePieceProcessor> sp);
  std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;
};

} // namespace shadowgrad::tokenize
