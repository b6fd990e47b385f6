// Token files (llm.c v1/v7 and raw uint16) and eval_loss: layouts, windows, determinism across K and process
// slices, validation, and the evaluator's fixed, no-grad, side-effect-free batches.
#include <catch2/catch.hpp>

#include <cstring>
#include <fstream>

#include <ATen/ATen.h>

#include "TinyConfig.h"
#include "TokenFiles.h"
#include "TrainerProcess.h"
#include "data/DataSource.h"
#include "data/TokenFile.h"
#include "model/Decoder.h"
#include "model/DecoderOptions.h"
#include "train/Evaluator.h"
#include "util/Errors.h"

using namespace shadowgrad;
namespace tf = token_files;

namespace {

config::Config token_config(const std::string& path, const std::string& format = "llmc") {
  auto c = tiny_config();
  c.dataset_type = config::DatasetType::tokens;
  c.dataset_path = path;
  set_key(c, "token_file_format", format);
  return c;
}

std::string error_of(const config::Config& c) {
  try {
    data::make_source(data::DataOptions::from_config(c));
    data::make_eval_source(data::DataOptions::from_config(c));
    train::Evaluator(c, 1);
  } catch (const DataError& e) {
    return e.what();
  }
  return "";
}

} // namespace

TEST_CASE("llm.c v1 (uint16) and v7 (uint32) files and raw uint16 files read back exactly", "[tokens]") {
  const auto tokens = tf::counting_tokens(1000, 64);
  auto big = tokens;
  big[500] = 70000; // forces uint32 (v7)
  const std::string v1 = tf::llmc_file("v1.bin", tokens), v7 = tf::llmc_file("v7.bin", big),
                    raw = tf::raw_u16_file("raw.bin", tokens);
  auto f1 = data::TokenFile::open(v1, config::TokenFileFormat::llmc, "dataset_path");
  auto f7 = data::TokenFile::open(v7, config::TokenFileFormat::llmc, "dataset_path");
  auto fr = data::TokenFile::open(raw, config::TokenFileFormat::raw_uint16, "dataset_path");
  CHECK(std::filesystem::file_size(v1) == 1024 + 2 * 1000);
  CHECK(std::filesystem::file_size(v7) == 1024 + 4 * 1000);
  CHECK(f1.bytes_per_token() == 2);
  CHECK(f7.bytes_per_token() == 4);
  CHECK(f1.size() == 1000);
  CHECK(f7.size() == 1000);
  CHECK(fr.size() == 1000);
  for (size_t i = 0; i < tokens.size(); ++i) {
    CHECK(f1.token(int64_t(i)) == tokens[i]);
    CHECK(fr.token(int64_t(i)) == tokens[i]);
    CHECK(f7.token(int64_t(i)) == big[i]);
  }
  int64_t at = -1;
  CHECK(f7.max_token(&at) == 70000);
  CHECK(at == 500);
}

TEST_CASE("token windows are file slices with next-token targets", "[tokens]") {
  const auto tokens = tf::counting_tokens(5000, 64);
  for (const std::string format : {"llmc", "raw_uint16"}) {
    const std::string path = format == "llmc" ? tf::llmc_file("w.bin", tokens) : tf::raw_u16_file("w_raw.bin", tokens);
    auto b = data::make_source(data::DataOptions::from_config(token_config(path, format)))->examples(2, 0, 6);
    CHECK(b.valid_tokens() == 6 * 16);
    CHECK(b.tokens.slice(1, 1, 16).equal(b.targets.slice(1, 0, 15)));
    // Each row is tokens[o, o + 16] of the file for some offset o.
    for (int64_t i = 0; i < 6; ++i) {
      const int64_t first = b.tokens[i][0].item<int64_t>();
      bool found = false;
      for (size_t o = 0; o + 16 < tokens.size() && !found; ++o) {
        if (tokens[o] != uint32_t(first)) continue;
        found = true;
        for (int64_t t = 0; t < 16 && found; ++t)
          found =
              b.tokens[i][t].item<int64_t>() == tokens[o + t] && b.targets[i][t].item<int64_t>() == tokens[o + t + 1];
      }
      CHECK(found);
    }
  }
}

TEST_CASE("a token file's global batch depends only on seed and step: not on K or the process slice", "[tokens]") {
  const std::string path = tf::llmc_file("det.bin", tf::counting_tokens(20000, 64));
  auto c = token_config(path);
  auto whole = data::make_source(data::DataOptions::from_config(c))->examples(7, 0, 16);
  // 4 processes x K=2 microbatches of 2, as TrainStep and DataParallel slice it, from fresh sources.
  for (int64_t rank = 0; rank < 4; ++rank) {
    auto shard = data::make_source(data::DataOptions::from_config(c))->examples(7, rank * 4, 4);
    for (int64_t m = 0; m < 2; ++m) {
      CHECK(shard.slice(m * 2, 2).tokens.equal(whole.slice(rank * 4 + m * 2, 2).tokens));
      CHECK(shard.slice(m * 2, 2).targets.equal(whole.slice(rank * 4 + m * 2, 2).targets));
    }
  }
  CHECK_FALSE(data::make_source(data::DataOptions::from_config(c))->examples(8, 0, 16).tokens.equal(whole.tokens));
  c.data_shuffle_seed = 5;
  CHECK_FALSE(data::make_source(data::DataOptions::from_config(c))->examples(7, 0, 16).tokens.equal(whole.tokens));
}

TEST_CASE("eval examples are consecutive windows of the eval file, each token a target once", "[tokens][eval]") {
  const auto tokens = tf::counting_tokens(16 * 10 + 1, 64);
  auto c = token_config(tf::llmc_file("train_e.bin", tf::counting_tokens(2000, 64)));
  c.eval_interval = 1;
  c.eval_dataset_path = tf::llmc_file("val_e.bin", tokens);
  auto eval = data::make_eval_source(data::DataOptions::from_config(c));
  CHECK(eval->eval_capacity() == 10);
  auto b = eval->eval_examples(3, 2);
  for (int64_t t = 0; t < 16; ++t) {
    CHECK(b.tokens[0][t].item<int64_t>() == tokens[3 * 16 + t]);
    CHECK(b.targets[1][t].item<int64_t>() == tokens[4 * 16 + t + 1]);
  }
}

TEST_CASE("bad token files are DataErrors naming the file and the problem", "[tokens][errors]") {
  const auto ok = tf::counting_tokens(100, 64);
  auto msg = [](const std::string& path, const std::string& format = "llmc") {
    return error_of(token_config(path, format));
  };
  CHECK_THAT(msg("/nonexistent.bin"), Catch::Contains("dataset_path '/nonexistent.bin' does not exist"));
  CHECK_THAT(msg(tf::header_file("magic.bin", 12345, 1, 100, 200)),
             Catch::Contains("magic 12345 is not llm.c's") && Catch::Contains("token_file_format=raw_uint16"));
  CHECK_THAT(msg(tf::header_file("version.bin", data::kLlmcMagicU16, 7, 100, 200)),
             Catch::Contains("llm.c magic 20240520 needs version 1, the header says version 7"));
  CHECK_THAT(
      msg(tf::header_file("count.bin", data::kLlmcMagicU16, 1, 100, 300)),
      Catch::Contains("the header's token count (100, so 1224 bytes in all) disagrees with the file size (1324"));
  CHECK_THAT(msg(tf::header_file("trunc.bin", data::kLlmcMagicU32, 7, 100, 399)),
             Catch::Contains("is truncated: the header says 100 tokens (1424 bytes in all), the file has 1423 bytes"));
  {
    const std::string half = tf::temp_path("half.bin");
    std::ofstream(half, std::ios::binary) << std::string(500, 'x');
    CHECK_THAT(msg(half), Catch::Contains("is truncated: 500 bytes, shorter than llm.c's 1024-byte header"));
  }
  CHECK_THAT(msg(tf::llmc_file("short.bin", tf::counting_tokens(16, 64))),
             Catch::Contains("holds 16 tokens; max_target_length=16 needs at least 17 (one window)"));
  auto big = ok;
  big[42] = 64;
  CHECK_THAT(msg(tf::llmc_file("vocab.bin", big)), Catch::Contains("token id 64 at position 42 is >= vocab_size=64"));
  CHECK_THAT(msg(tf::raw_u16_file("vocab_raw.bin", big), "raw_uint16"),
             Catch::Contains("token id 64 at position 42 is >= vocab_size=64"));
  {
    const std::string odd = tf::temp_path("odd.bin");
    std::ofstream(odd, std::ios::binary) << std::string(301, '\1');
    CHECK_THAT(msg(odd, "raw_uint16"), Catch::Contains("is truncated: 301 bytes is not a whole number of uint16"));
  }
  CHECK_THAT(msg(tf::llmc_file("llmc_as_raw.bin", ok), "raw_uint16"),
             Catch::Contains("starts with llm.c's magic 20240520; set token_file_format=llmc"));
}

TEST_CASE("bad eval files: the training file itself, or shorter than one eval batch or than eval_steps",
          "[tokens][eval][errors]") {
  auto c = token_config(tf::llmc_file("train_b.bin", tf::counting_tokens(2000, 64)));
  c.eval_interval = 5;
  c.eval_dataset_path = c.dataset_path;
  CHECK_THAT(error_of(c), Catch::Contains("is the training file (dataset_path); give a held-out file"));
  c.eval_dataset_path = tf::llmc_file("val_short.bin", tf::counting_tokens(16 * 3 + 1, 64)); // 3 windows
  CHECK_THAT(error_of(c), Catch::Contains("is shorter than one eval batch: it holds 3 windows") &&
                              Catch::Contains("one batch is 4"));
  c.eval_dataset_path = tf::llmc_file("val_ok.bin", tf::counting_tokens(16 * 10 + 1, 64)); // 10 windows
  c.eval_steps = 3;
  CHECK_THAT(error_of(c), Catch::Contains("holds 10 windows") && Catch::Contains("eval_steps=3 batches of 4 need 12"));
  c.eval_steps = -1;
  CHECK(error_of(c).empty());
  CHECK(train::Evaluator(c, 1).batches() == 2);
}

namespace {

// eval_loss of a freshly initialised tiny model, with the given eval batch layout.
double eval_loss(config::Config c, int64_t steps, int64_t per_device) {
  c.eval_interval = 1;
  c.eval_steps = steps;
  c.eval_per_device_batch_size = per_device;
  model::Decoder m(model::DecoderOptions::from_config(c));
  return train::Evaluator(c, 1).run(m, c10::Device(c10::kCPU), nullptr);
}

} // namespace

TEST_CASE("eval_loss: the same batches every time, no grad, no parameter change, set fixed by steps x batch",
          "[tokens][eval]") {
  auto c = token_config(tf::llmc_file("train_d.bin", tf::counting_tokens(4000, 64)));
  c.eval_dataset_path = tf::llmc_file("val_d.bin", tf::counting_tokens(16 * 40 + 1, 64, 9));
  c.eval_interval = 1;
  c.eval_steps = 4;
  c.eval_per_device_batch_size = 2;
  model::Decoder m(model::DecoderOptions::from_config(c));
  std::vector<at::Tensor> before;
  for (const auto& p : m->parameters()) before.push_back(p.detach().clone());
  train::Evaluator eval(c, 1);
  const double a = eval.run(m, c10::Device(c10::kCPU), nullptr), b = eval.run(m, c10::Device(c10::kCPU), nullptr);
  CHECK(a == b);  // bitwise: same examples, same model
  CHECK(a > 3.0); // untrained on vocab 64: about ln 64 = 4.16
  CHECK(a < 5.5);
  for (size_t i = 0; i < before.size(); ++i) {
    CHECK(m->parameters()[i].equal(before[i]));
    CHECK_FALSE(m->parameters()[i].grad().defined());
  }
  // 4 batches of 2 and 2 batches of 4 (and 1 of 8) are the same 8 examples: the same loss (fp32 compute).
  CHECK(eval_loss(c, 2, 4) == Approx(a).epsilon(1e-6));
  CHECK(eval_loss(c, 1, 8) == Approx(a).epsilon(1e-6));
  CHECK(std::abs(eval_loss(c, 1, 2) - a) > 1e-6); // a different set gives a different loss: the check can fail
  // Two processes of 1 sequence each take the slices [2b, 2b+1) and [2b+1, 2b+2): together the same batches.
  CHECK(train::Evaluator(c, 2).batches() == 4);
}

TEST_CASE("eval due steps: every eval_interval and after the last step, never when <= 0", "[eval]") {
  auto c = tiny_config();
  c.steps = 10;
  c.eval_steps = 1;
  c.eval_interval = 4;
  train::Evaluator e(c, 1);
  std::vector<int64_t> due;
  for (int64_t s = 1; s <= 10; ++s)
    if (e.due(s)) due.push_back(s);
  CHECK((due == std::vector<int64_t>{4, 8, 10}));
  c.eval_interval = 0;
  CHECK_FALSE(train::Evaluator(c, 1).due(10));
  CHECK_FALSE(train::Evaluator(c, 1).enabled());
}

namespace {

std::string tiny_with_batch(int64_t per_device) {
  std::string tiny = trainer_process::kTiny;
  const std::string from = "per_device_batch_size=2";
  tiny.replace(tiny.find(from), from.size(), "per_device_batch_size=" + std::to_string(per_device));
  return tiny;
}

double number(const std::string& text) {
  return std::stod(text);
}

} // namespace

TEST_CASE("trainer on token files: eval_loss on eval steps and in summary.json, equal across K, bitwise on resume",
          "[tokens][eval][cli]") {
  namespace tp = trainer_process;
  const std::string train = tf::llmc_file("cli_train.bin", tf::counting_tokens(5000, 64));
  const std::string val = tf::llmc_file("cli_val.bin", tf::counting_tokens(16 * 40 + 1, 64, 3));
  const std::string base = tp::fresh_dir("tok_cli");
  const std::string common = "base.yml dataset_type=tokens dataset_path=" + train + " eval_dataset_path=" + val +
                             " eval_interval=2 eval_steps=2 eval_per_device_batch_size=4"
                             " learning_rate_schedule_steps=5"
                             " base_output_directory=" +
                             base;
  auto run = [&](const std::string& name, int64_t per_device, int64_t k, int64_t steps) {
    auto r = tp::run(common + tiny_with_batch(per_device) + " gradient_accumulation_steps=" + std::to_string(k) +
                     " steps=" + std::to_string(steps) + " run_name=" + name);
    INFO(r.output);
    REQUIRE(r.code == 0);
    return tp::field(base + "/" + name + "/metrics.jsonl", "eval_loss");
  };
  const auto k1 = run("k1", 4, 1, 5), k2 = run("k2", 2, 2, 5);
  REQUIRE(k1.size() == 5);
  CHECK(k1[0] == "<missing>");
  CHECK(k1[2] == "<missing>");
  for (size_t i : {1, 3, 4}) {
    CHECK(number(k1[i]) > 0.5);
    CHECK(number(k2[i]) == Approx(number(k1[i])).epsilon(1e-5)); // the same eval set whatever K is
  }
  CHECK(number(k1[4]) < number(k1[1])); // training on the same kind of stream lowers held-out loss
  CHECK_THAT(tp::read_text(base + "/k1/summary.json"), Catch::Contains("\"eval_loss\": " + k1[4]));
  // 3 steps, then the same run extended to 5 (same LR schedule): bitwise the eval_loss of 5 straight steps. The
  // 3-step run also evaluated after its last step, 3; that line is kept.
  run("resumed", 2, 2, 3);
  auto resumed = run("resumed", 2, 2, 5);
  CHECK(resumed[2] != "<missing>");
  resumed[2] = "<missing>";
  CHECK(resumed == k2);
}

TEST_CASE("build/tokenize's suggested trainer command runs on the small corpus it was printed for", "[tokens][hints]") {
  const std::string dir = tf::temp_path("suggested");
  const std::string text = tf::temp_path("suggested_corpus.txt");
  std::ofstream(text, std::ios::binary) << tf::tiny_corpus(120);
  const auto made = trainer_process::run_command(std::string(TOKENIZE_BIN) + " " + text + " --out-dir " + dir +
                                                 " --vocab-size 100 --model-type bpe --val-fraction 0.1");
  INFO(made.output);
  REQUIRE(made.code == 0);
  const auto at = made.output.find("build/trainer ");
  REQUIRE(at != std::string::npos);
  std::string command = made.output.substr(at + std::string("build/trainer ").size());
  command = command.substr(0, command.find('\n'));
  CHECK_THAT(command, Catch::Contains("eval_per_device_batch_size="));  // this corpus is smaller than one eval batch
  const auto trained = trainer_process::run(command + " steps=1 base_emb_dim=32 base_mlp_dim=64 enable_checkpointing=false"
                                            " base_output_directory=" + tf::temp_path("suggested_runs") + " run_name=r");
  INFO(trained.output);
  CHECK(trained.code == 0);
}
