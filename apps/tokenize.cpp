// tokenize TEXT --out-dir DIR [--vocab-size N | --model M.model] [--val-fraction F]: turns a text corpus into
// llm.c token files for dataset_type=tokens. Documents are blank-line separated paragraphs; every 1/F-th document
// goes to DIR/val.bin, the rest to DIR/train.bin, each followed by EOS. Without --model it trains a SentencePiece
// model on the training documents only (DIR/tokenizer.model), so nothing of the validation split leaks into it.
// Exit codes: 0 success, 1 failure (SentencePiece, I/O), 2 bad input (files, options).
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "config/Config.h"
#include "data/TokenFile.h"
#include "tokenize/Corpus.h"
#include "tokenize/Tokenizer.h"
#include "util/Errors.h"

namespace fs = std::filesystem;
using namespace shadowgrad;

namespace {

// The keys the suggested command needs so that base.yml's batch shape fits a small corpus: one eval batch must fit
// in val.bin (eval_per_device_batch_size windows of max_target_length+1 tokens) and one window in train.bin.
std::string fitting_batch_keys(size_t train_tokens, size_t val_tokens) {
  const shadowgrad::config::Config defaults;
  int64_t seq = defaults.max_target_length;
  const auto smallest = static_cast<int64_t>(std::min(train_tokens, val_tokens));
  std::string keys;
  if (smallest < seq + 1) {
    seq = std::max<int64_t>(2, smallest - 1);
    keys += fmt::format(" max_target_length={}", seq);
  }
  const int64_t windows = static_cast<int64_t>(val_tokens) / (seq + 1);
  if (windows < defaults.per_device_batch_size) keys += fmt::format(" eval_per_device_batch_size={}", std::max<int64_t>(1, windows));
  return keys;
}


std::string read_text(const std::string& path) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) throw InputError(fmt::format("input '{}' does not exist or is not a file", path));
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(fmt::format("input '{}' cannot be read", path));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The training documents, one line each as SentencePiece reads sentences, into a scratch file.
std::string write_training_text(const std::vector<std::string>& docs, double fraction, const std::string& path) {
  std::ofstream out(path, std::ios::binary);
  for (size_t i = 0; i < docs.size(); ++i)
    if (!tokenize::is_validation(i, fraction)) out << docs[i] << "\n";
  if (!out) throw std::runtime_error(fmt::format("cannot write '{}'", path));
  return path;
}

int run(const std::string& input, const std::string& out_dir, int vocab_size, std::string model, double fraction,
        const std::string& model_type) {
  std::optional<tokenize::Tokenizer> given; // a bad --model is reported before anything is written
  if (!model.empty()) given.emplace(tokenize::Tokenizer::load(model, "--model"));
  const std::string text = read_text(input);
  const auto docs = tokenize::split_documents(text);
  size_t held_out = 0;
  for (size_t i = 0; i < docs.size(); ++i) held_out += tokenize::is_validation(i, fraction);
  if (held_out == 0 || held_out == docs.size())
    throw InputError(fmt::format("input '{}' has {} documents (blank-line separated paragraphs); --val-fraction={} "
                                 "puts {} of them in validation: need at least one on each side",
                                 input, docs.size(), fraction, held_out));
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  if (ec) throw InputError(fmt::format("cannot create --out-dir '{}': {}", out_dir, ec.message()));
  if (model.empty()) {
    const std::string scratch = write_training_text(docs, fraction, out_dir + "/.tokenizer_train.txt");
    std::cout << fmt::format("training a {} SentencePiece model of {} pieces on {} training documents ...\n",
                             model_type, vocab_size, docs.size() - held_out)
              << std::flush;
    tokenize::Tokenizer::train(scratch, out_dir + "/tokenizer", vocab_size, model_type);
    fs::remove(scratch, ec);
    model = out_dir + "/tokenizer.model";
  }
  const auto tokenizer = given ? std::move(*given) : tokenize::Tokenizer::load(model, "--model");
  const auto split = tokenize::encode_corpus(docs, tokenizer, fraction);
  data::write_llmc_tokens(out_dir + "/train.bin", split.train.data(), split.train.size());
  data::write_llmc_tokens(out_dir + "/val.bin", split.val.data(), split.val.size());
  const size_t total = split.train.size() + split.val.size();
  std::cout << fmt::format(
      "{}: {} bytes, {} documents -> {} tokens ({:.2f} bytes per token)\n"
      "  train.bin: {} tokens from {} documents\n"
      "  val.bin:   {} tokens from {} documents ({:.1f}% of tokens; document i is held out when "
      "floor((i+1)*{}) > floor(i*{}))\n"
      "  tokenizer: {} ({} pieces, EOS id {} after every document)\n"
      "train with:\n"
      "  build/trainer base.yml dataset_type=tokens dataset_path={}/train.bin eval_dataset_path={}/val.bin "
      "tokenizer_path={} vocab_size={} eval_interval=25{}\n",
      input, text.size(), docs.size(), total, double(text.size()) / double(std::max<size_t>(total, 1)),
      split.train.size(), split.train_documents, split.val.size(), split.val_documents,
      100.0 * double(split.val.size()) / double(std::max<size_t>(total, 1)), fraction, fraction, model,
      tokenizer.vocab_size(), tokenizer.eos_id(), out_dir, out_dir, model, tokenizer.vocab_size(),
      fitting_batch_keys(split.train.size(), split.val.size()));
  return 0;
}

} // namespace

int main(int argc, char** argv) {
  CLI::App app{"Turn a text corpus into llm.c token files (train.bin, val.bin) with a SentencePiece tokenizer."};
  std::string input, out_dir, model, model_type = "unigram";
  int vocab_size = 4096;
  double fraction = 0.05;
  app.add_option("TEXT", input, "text corpus; documents are separated by blank lines")->required();
  app.add_option("--out-dir", out_dir, "where train.bin, val.bin (and tokenizer.model) are written")->required();
  auto* vocab = app.add_option("--vocab-size", vocab_size, "pieces of the SentencePiece model to train")
                    ->capture_default_str()
                    ->check(CLI::Range(16, 1 << 20));
  app.add_option("--model", model, "use this SentencePiece .model instead of training one")->excludes(vocab);
  app.add_option("--val-fraction", fraction, "fraction of documents held out for validation")
      ->capture_default_str()
      ->check(CLI::Range(1e-6, 0.999999));
  app.add_option("--model-type", model_type, "SentencePiece model type when training")
      ->capture_default_str()
      ->check(CLI::IsMember({"unigram", "bpe", "char", "word"}));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);
    std::cerr << "error: " << e.what() << "\n";
    return 2;
  }
  try {
    return run(input, out_dir, vocab_size, model, fraction, model_type);
  } catch (const InputError& e) {
    std::cerr << "error: " << e.what() << std::endl;
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << std::endl;
    return 1;
  }
}
