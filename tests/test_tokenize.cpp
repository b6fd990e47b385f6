// The SentencePiece tokenizer, the corpus split, and build/tokenize end to end: text in, llm.c files out that the
// trainer reads; bad input exits 2.
#include <catch2/catch.hpp>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "TokenFiles.h"
#include "data/TokenFile.h"
#include "data/TokenizerVocab.h"
#include "tokenize/Corpus.h"
#include "tokenize/Tokenizer.h"
#include "util/Errors.h"

using namespace shadowgrad;
namespace tf = token_files;

namespace {

struct Output {
  int code;
  std::string text;
};

Output run_tokenize(const std::string& args) {
  FILE* pipe = popen((std::string(TOKENIZE_BIN) + " " + args + " 2>&1").c_str(), "r");
  std::string out;
  std::array<char, 4096> buf;
  while (size_t n = fread(buf.data(), 1, buf.size(), pipe)) out.append(buf.data(), n);
  const int status = pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

} // namespace

TEST_CASE("documents are blank-line separated paragraphs, every 1/f-th is held out", "[tokenize]") {
  const auto docs = tokenize::split_documents("  a\nb \n\n\n\nc\n \n\n");
  REQUIRE(docs.size() == 2);
  CHECK(docs[0] == "a\nb");
  CHECK(docs[1] == "c");
  std::vector<size_t> held;
  for (size_t i = 0; i < 40; ++i)
    if (tokenize::is_validation(i, 0.05)) held.push_back(i);
  CHECK((held == std::vector<size_t>{19, 39}));
}

TEST_CASE("a trained SentencePiece model encodes and decodes, EOS ends every document", "[tokenize]") {
  const auto tok = tokenize::Tokenizer::load(tf::tiny_tokenizer(100));
  CHECK(tok.vocab_size() == 100);
  CHECK(tok.eos_id() == 2);
  const auto ids = tok.encode("let there be light.");
  CHECK(ids.size() >= 3);
  CHECK(tok.decode(ids) == "let there be light.");
  const std::vector<std::string> docs = {"the light", "the deep", "god said", "let there be"};
  const auto split = tokenize::encode_corpus(docs, tok, 0.5); // documents 1 and 3 held out
  CHECK(split.train_documents == 2);
  CHECK(split.val_documents == 2);
  auto expected = tok.encode("the light");
  expected.push_back(2);
  for (auto id : tok.encode("god said")) expected.push_back(id);
  expected.push_back(2);
  CHECK(split.train == expected);
  CHECK(split.val.back() == 2);
}

TEST_CASE("the trainer's protobuf piece count equals SentencePiece's, check_vocabulary errors", "[tokenize][errors]") {
  for (int pieces : {100, 150}) {
    const auto model = tf::tiny_tokenizer(pieces);
    CHECK(data::sentencepiece_vocab_size(model) == tokenize::Tokenizer::load(model).vocab_size());
    CHECK(data::sentencepiece_vocab_size(model) == pieces);
  }
  const auto model = tf::tiny_tokenizer(100);
  CHECK_NOTHROW(data::check_vocabulary(model, 100));
  CHECK_THROWS_WITH(data::check_vocabulary(model, 99),
                    Catch::Contains("has a vocabulary of 100 pieces, larger than vocab_size=99"));
  CHECK_THROWS_AS(data::check_vocabulary("/nonexistent.model", 100), DataError);
  const std::string junk = tf::temp_path("junk.model");
  std::ofstream(junk) << "this is not a protobuf";
  CHECK_THROWS_WITH(data::check_vocabulary(junk, 100), Catch::Contains("is not a readable SentencePiece model"));
  CHECK_THROWS_WITH(tokenize::Tokenizer::load(junk), Catch::Contains("is not a readable SentencePiece model"));
}

TEST_CASE("build/tokenize: text -> tokenizer + llm.c train.bin/val.bin, reported counts match", "[tokenize][cli]") {
  const std::string dir = tf::temp_path("tokenize_out"), text = tf::temp_path("corpus.txt");
  std::filesystem::remove_all(dir);
  std::ofstream(text, std::ios::binary) << tf::tiny_corpus(700); // 100 documents
  const auto r = run_tokenize(text + " --out-dir " + dir + " --vocab-size 80 --model-type bpe --val-fraction 0.1");
  INFO(r.text);
  REQUIRE(r.code == 0);
  auto train = data::TokenFile::open(dir + "/train.bin", config::TokenFileFormat::llmc, "train");
  auto val = data::TokenFile::open(dir + "/val.bin", config::TokenFileFormat::llmc, "val");
  CHECK(train.bytes_per_token() == 2);
  CHECK(train.max_token() < 80);
  CHECK_THAT(r.text, Catch::Contains(fmt::format("train.bin: {} tokens from 90 documents", train.size())));
  CHECK_THAT(r.text, Catch::Contains(fmt::format("val.bin:   {} tokens from 10 documents", val.size())));
  CHECK_THAT(r.text, Catch::Contains("tokenizer_path=" + dir + "/tokenizer.model vocab_size=80"));
  CHECK(val.token(val.size() - 1) == 2); // EOS closes the last document
  // The same corpus through the model just trained (--model) gives the same files.
  const auto again =
      run_tokenize(text + " --out-dir " + dir + "2 --model " + dir + "/tokenizer.model --val-fraction 0.1");
  REQUIRE(again.code == 0);
  auto train2 = data::TokenFile::open(dir + "2/train.bin", config::TokenFileFormat::llmc, "train");
  CHECK(train2.size() == train.size());
}

TEST_CASE("build/tokenize: bad input exits 2 with one error line", "[tokenize][cli][bad-input]") {
  auto r = run_tokenize("/nonexistent.txt --out-dir " + tf::temp_path("x"));
  CHECK(r.code == 2);
  CHECK_THAT(r.text, Catch::Contains("error: input '/nonexistent.txt' does not exist"));
  const std::string one = tf::temp_path("one_doc.txt");
  std::ofstream(one) << "just one document\n";
  r = run_tokenize(one + " --out-dir " + tf::temp_path("y"));
  CHECK(r.code == 2);
  CHECK_THAT(r.text, Catch::Contains("has 1 documents") && Catch::Contains("need at least one on each side"));
  const std::string two = tf::temp_path("two_docs.txt");
  std::ofstream(two) << "first document\n\nsecond document\n";
  r = run_tokenize(two + " --val-fraction 0.5 --out-dir " + tf::temp_path("z") + " --model /nonexistent.model");
  CHECK(r.code == 2);
  CHECK_THAT(r.text, Catch::Contains("error: --model '/nonexistent.model' does not exist"));
}
