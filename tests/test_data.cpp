// Data: deterministic in (seed, step), independent of K, padded, and validated for text files.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include <ATen/ATen.h>

#include "TinyConfig.h"
#include "data/DataSource.h"
#include "util/Errors.h"

using namespace shadowgrad;

TEST_CASE("the global batch depends only on seed and step, not on K", "[data]") {
  auto c = tiny_config();
  auto source = data::make_source(data::DataOptions::from_config(c));
  auto whole = source->examples(3, 0, 8);
  // K=4 microbatches of 2, as the step slices them, and a fresh source reading pieces.
  auto again = data::make_source(data::DataOptions::from_config(c));
  for (int64_t m = 0; m < 4; ++m) {
    auto piece = again->examples(3, 2 * m, 2);
    CHECK(piece.tokens.equal(whole.slice(2 * m, 2).tokens));
    CHECK(piece.targets.equal(whole.slice(2 * m, 2).targets));
  }
  CHECK_FALSE(source->examples(4, 0, 8).tokens.equal(whole.tokens));
  c.data_shuffle_seed = 1;
  CHECK_FALSE(data::make_source(data::DataOptions::from_config(c))->examples(3, 0, 8).tokens.equal(whole.tokens));
}

TEST_CASE("synthetic examples are right-padded with varying valid lengths", "[data]") {
  auto c = tiny_config();
  c.synthetic_min_length_fraction = 0.25;
  auto b = data::make_source(data::DataOptions::from_config(c))->examples(0, 0, 64);
  auto lengths = b.targets.ne(data::kIgnoreIndex).sum(1);
  CHECK(lengths.min().item<int64_t>() >= 4);
  CHECK(lengths.max().item<int64_t>() <= 16);
  CHECK(lengths.min().item<int64_t>() < lengths.max().item<int64_t>());
  CHECK(b.tokens.max().item<int64_t>() < 64);
  // Targets are the next token wherever they are valid.
  auto valid = b.targets.slice(1, 0, 15).ne(data::kIgnoreIndex).logical_and(b.targets.slice(1, 1, 16).ne(-1));
  CHECK(b.targets.slice(1, 0, 15).masked_select(valid).equal(b.tokens.slice(1, 1, 16).masked_select(valid)));
}

namespace {
std::string write_temp(const std::string& name, const std::string& bytes) {
  auto path = (std::filesystem::temp_directory_path() / name).string();
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}
config::Config text_config(const std::string& path) {
  auto c = tiny_config();
  c.dataset_type = config::DatasetType::text;
  c.dataset_path = path;
  c.vocab_size = 256;
  return c;
}
} // namespace

TEST_CASE("text data yields byte windows with next-byte targets", "[data]") {
  std::string text;
  for (int i = 0; i < 50; ++i) text += "the quick brown fox jumps over the lazy dog. ";
  const auto options = data::DataOptions::from_config(text_config(write_temp("sg_text.txt", text)));
  auto b = data::make_source(options)->examples(0, 0, 3);
  CHECK(b.tokens.slice(1, 1, 16).equal(b.targets.slice(1, 0, 15)));
  CHECK(b.valid_tokens() == 3 * 16);
}

TEST_CASE("bad text files are clear errors", "[data][errors]") {
  auto error = [](const config::Config& c) {
    try {
      data::make_source(data::DataOptions::from_config(c));
    } catch (const DataError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  CHECK_THAT(error(text_config("/nonexistent.txt")), Catch::Contains("does not exist"));
  CHECK_THAT(error(text_config(write_temp("sg_empty.txt", ""))), Catch::Contains("is empty"));
  CHECK_THAT(error(text_config(write_temp("sg_short.txt", "short"))), Catch::Contains("needs at least 17"));
  CHECK_THAT(error(text_config(write_temp("sg_bin.txt", std::string("abcdefghijklmnopqrstuvwxyz\0abc", 30)))),
             Catch::Contains("looks binary"));
  auto small_vocab = text_config(write_temp("sg_vocab.txt", "abcdefghijklmnopqrstuvwxyz"));
  small_vocab.vocab_size = 64;
  CHECK_THAT(error(small_vocab), Catch::Contains(">= vocab_size=64"));
}
