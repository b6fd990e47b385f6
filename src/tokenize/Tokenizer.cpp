#include "tokenize/Tokenizer.h"

#include <filesystem>
#include <stdexcept>

#include <fmt/format.h>
#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include "util/Errors.h"

namespace shadowgrad::tokenize {

Tokenizer::Tokenizer(std::unique_ptr<sentencepiece::SentencePieceProcessor> sp) : sp_(std::move(sp)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Tokenizer Tokenizer::load(const std::string& path, const std::string& key) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec))
    throw DataError(fmt::format("{} '{}' does not exist or is not a regular file", key, path));
  auto sp = std::make_unique<sentencepiece::SentencePieceProcessor>();
  const auto status = sp->Load(path);
  if (!status.ok())
    throw DataError(fmt::format("{} '{}' is not a readable SentencePiece model: {}", key, path, status.ToString()));
  return Tokenizer(std::move(sp));
}

void Tokenizer::train(const std::string& input, const std::string& prefix, int vocab_size,
                      const std::string& model_type, int threads) {
  // Every character is kept (character_coverage=1): a small English corpus has few, and an unknown piece in the
  // validation split would be a loss no model can reduce. Quiet unless something fails.
  const std::string args =
      fmt::format("--input={} --model_prefix={} --vocab_size={} --model_type={} --character_coverage=1.0 "
                  "--num_threads={} --minloglevel=1 --max_sentence_length=16384",
                  input, prefix, vocab_size, model_type, threads);
  const auto status = sentencepiece::SentencePieceTrainer::Train(args);
  if (!status.ok()) throw std::runtime_error(fmt::format("SentencePiece training failed: {}", status.ToString()));
}

int Tokenizer::vocab_size() const {
  return sp_->GetPieceSize();
}
int Tokenizer::eos_id() const {
  return sp_->eos_id();
}

std::vector<uint32_t> Tokenizer::encode(const std::string& text) const {
  std::vector<int> ids;
  const auto status = sp_->Encode(text, &ids);
  if (!status.ok()) throw std::runtime_error(fmt::format("SentencePiece encode failed: {}", status.ToString()));
  return {ids.begin(), ids.end()};
}

std::string Tokenizer::decode(const std::vector<uint32_t>& ids) const {
  std::string text;
  const auto status = sp_->Decode(std::vector<int>(ids.begin(), ids.end()), &text);
  if (!status.ok()) throw std::runtime_error(fmt::format("SentencePiece decode failed: {}", status.ToString()));
  return text;
}

} // namespace shadowgrad::tokenize
