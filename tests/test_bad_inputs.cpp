// The bad-input table (docs/bad-input.md): each row runs the trainer and checks the exit code and that
// the last line is one "error: ..." line naming the culprit (key, file or line). One TEST_CASE per row.
#include <catch2/catch.hpp>

#include <filesystem>
#include <random>
#include <fstream>
#include <string>

#include "CraftedCheckpoint.h"
#include "TokenFiles.h"
#include "TrainerProcess.h"

namespace fs = std::filesystem;
namespace tp = trainer_process;

namespace {

std::string last_line(const std::string& text) {
  std::string t = text;
  while (!t.empty() && t.back() == '\n') t.pop_back();
  return t.substr(t.rfind('\n') == std::string::npos ? 0 : t.rfind('\n') + 1);
}

// Runs `args` with a fresh output directory and checks code, message and that nothing was created.
void expect_bad_input(const std::string& args, const std::string& message, int code = 2, bool writes_nothing = true) {
  const std::string out = tp::fresh_dir("bad_out");
  const auto r = tp::run(args + " base_output_directory=" + out);
  INFO("trainer " << args << "\n" << r.output);
  CHECK(r.code == code);
  CHECK_THAT(last_line(r.output), Catch::StartsWith("error: ") && Catch::Contains(message));
  if (writes_nothing) CHECK_FALSE(fs::exists(out));
}

// Writes `text` to a fresh file and returns its path.
std::string file_with(const std::string& name, const std::string& text) {
  const std::string dir = tp::fresh_dir("bad_files");
  fs::create_directories(dir);
  std::ofstream(dir + "/" + name, std::ios::binary) << text;
  return dir + "/" + name;
}

// A finished 2-step tiny run in a fresh base directory (checkpoint at step 2); returns the base.
std::string finished_run(const std::string& extra = "") {
  const std::string base = tp::fresh_dir("bad_prior");
  auto r = tp::run("base.yml steps=2 run_name=r base_output_directory=" + base + tp::kTiny + " " + extra);
  REQUIRE(r.code == 0);
  return base;
}

// The tiny model's overrides with `key` left out (so that a row can give it another value).
std::string tiny_without(const std::string& key) {
  std::string tiny = tp::kTiny;
  const size_t at = tiny.find(" " + key + "=");
  if (at != std::string::npos) tiny.erase(at, tiny.find(' ', at + 1) - at);
  return tiny;
}

// The same run again with `changes` (one key=value or none), expected to fail on resume.
void expect_resume_error(const std::string& base, const std::string& changes, const std::string& message) {
  const std::string tiny = tiny_without(changes.substr(0, changes.find('=')));
  auto r = tp::run("base.yml steps=4 run_name=r base_output_directory=" + base + tiny + " " + changes);
  INFO(r.output);
  CHECK(r.code == 2);
  CHECK_THAT(last_line(r.output), Catch::StartsWith("error: ") && Catch::Contains(message));
}

} // namespace

TEST_CASE("bad input: unknown key on the command line, with a suggestion", "[bad-input]") {
  expect_bad_input("base.yml gradient_acumulation_steps=4",
                   "unknown config key 'gradient_acumulation_steps' (did you mean 'gradient_accumulation_steps'?)");
}

TEST_CASE("bad input: unknown key in the YAML file, with its line and a suggestion", "[bad-input]") {
  expect_bad_input(file_with("typo.yml", "steps: 2\nlearning_rat: 0.1\n"),
                   "typo.yml:2: unknown config key 'learning_rat' (did you mean 'learning_rate'?)");
}

TEST_CASE("bad input: wrong type (integer)", "[bad-input]") {
  expect_bad_input("base.yml steps=abc", "invalid value 'abc' for config key 'steps': expected an integer");
}

TEST_CASE("bad input: wrong type (bool)", "[bad-input]") {
  expect_bad_input("base.yml enable_checkpointing=maybe",
                   "invalid value 'maybe' for config key 'enable_checkpointing': expected true or false");
}

TEST_CASE("bad input: wrong type in the YAML file (a list), with its line", "[bad-input]") {
  expect_bad_input(file_with("list.yml", "steps: 2\nlearning_rate: [0.1, 0.2]\n"),
                   "list.yml:2: config key 'learning_rate' must be a single value, not a list or map");
}

TEST_CASE("bad input: zero where a positive value is needed", "[bad-input]") {
  expect_bad_input("base.yml steps=0", "invalid value '0' for config key 'steps': expected an integer >= 1");
}

TEST_CASE("bad input: negative where a positive value is needed", "[bad-input]") {
  expect_bad_input("base.yml per_device_batch_size=-2",
                   "invalid value '-2' for config key 'per_device_batch_size': expected an integer >= 1");
}

TEST_CASE("bad input: gradient_accumulation_steps too large", "[bad-input]") {
  expect_bad_input("base.yml gradient_accumulation_steps=1000000",
                   "per_device_batch_size (8) x gradient_accumulation_steps (1000000) is too large");
}

TEST_CASE("bad input: bad dtype name", "[bad-input]") {
  expect_bad_input("base.yml grad_dtype=float8",
                   "invalid value 'float8' for config key 'grad_dtype': expected one of float32|bfloat16|float16");
}

TEST_CASE("bad input: bf16 Adam moments on CUDA (a CPU kernel)", "[bad-input]") {
  // Refused before the GPU is looked for, so this holds on a machine without one too.
  expect_bad_input("base.yml adam_state_dtype=bfloat16 hardware=cuda",
                   "adam_state_dtype=bfloat16 needs hardware=cpu");
}

TEST_CASE("bad input: base_num_query_heads not divisible by base_num_kv_heads", "[bad-input]") {
  expect_bad_input("base.yml base_num_query_heads=6 base_num_kv_heads=4",
                   "base_num_query_heads (6) must be a multiple of base_num_kv_heads (4)");
}

TEST_CASE("bad input: head_dim that RoPE cannot use", "[bad-input]") {
  expect_bad_input("base.yml head_dim=15", "head_dim (15) must be even for RoPE");
}

TEST_CASE("bad input: missing dataset file", "[bad-input]") {
  expect_bad_input("base.yml dataset_type=text dataset_path=/nonexistent.txt",
                   "dataset_path '/nonexistent.txt' does not exist");
}

TEST_CASE("bad input: empty dataset file", "[bad-input]") {
  const std::string path = file_with("empty.txt", "");
  expect_bad_input("base.yml dataset_type=text dataset_path=" + path, "dataset_path '" + path + "' is empty");
}

TEST_CASE("bad input: binary dataset file", "[bad-input]") {
  const std::string path = file_with("binary.bin", std::string(200, 'a') + std::string(1, '\0') + std::string(200, 'b'));
  expect_bad_input("base.yml dataset_type=text dataset_path=" + path,
                   "dataset_path '" + path + "' looks binary (NUL byte at offset 200)");
}

TEST_CASE("bad input: tokens >= vocab_size", "[bad-input]") {
  const std::string path = file_with("text.txt", std::string(300, 'z'));
  expect_bad_input("base.yml dataset_type=text vocab_size=64 dataset_path=" + path,
                   "byte 122 at offset 0 is >= vocab_size=64");
}

// Token files (dataset_type=tokens), eval data and the tokenizer: each is rejected before anything is written.
namespace {
const std::string kTokens = " dataset_type=tokens steps=2" + tp::kTiny;  // vocab 64, windows of 17 tokens
std::string tokens_args(const std::string& path) { return "base.yml dataset_path=" + path + kTokens; }
} // namespace

TEST_CASE("bad input: a token file with a wrong magic", "[bad-input][tokens]") {
  const auto path = token_files::header_file("magic.bin", 12345, 1, 100, 200);
  expect_bad_input(tokens_args(path), "dataset_path '" + path + "': magic 12345 is not llm.c's");
}

TEST_CASE("bad input: a token file with a wrong version", "[bad-input][tokens]") {
  const auto path = token_files::header_file("version.bin", shadowgrad::data::kLlmcMagicU32, 1, 100, 400);
  expect_bad_input(tokens_args(path), "llm.c magic 20240801 needs version 7, the header says version 1");
}

TEST_CASE("bad input: a token file whose header count disagrees with its size", "[bad-input][tokens]") {
  const auto path = token_files::header_file("count.bin", shadowgrad::data::kLlmcMagicU16, 1, 100, 250);
  expect_bad_input(tokens_args(path), "the header's token count (100, so 1224 bytes in all) disagrees with the file "
                                      "size (1274 bytes)");
}

TEST_CASE("bad input: a truncated token file", "[bad-input][tokens]") {
  const auto path = token_files::llmc_file("trunc.bin", token_files::counting_tokens(200, 64));
  fs::resize_file(path, fs::file_size(path) - 3);
  expect_bad_input(tokens_args(path), "dataset_path '" + path + "' is truncated: the header says 200 tokens");
}

TEST_CASE("bad input: a token file shorter than one window", "[bad-input][tokens]") {
  const auto path = token_files::llmc_file("short.bin", token_files::counting_tokens(10, 64));
  expect_bad_input(tokens_args(path), "holds 10 tokens; max_target_length=16 needs at least 17 (one window)");
}

TEST_CASE("bad input: a token id >= vocab_size in a token file", "[bad-input][tokens]") {
  auto tokens = token_files::counting_tokens(300, 64);
  tokens[123] = 1000;
  const auto path = token_files::llmc_file("vocab.bin", tokens);
  expect_bad_input(tokens_args(path), "token id 1000 at position 123 is >= vocab_size=64; raise vocab_size");
}

TEST_CASE("bad input: a tokenizer vocabulary larger than vocab_size", "[bad-input][tokens]") {
  const auto data = token_files::llmc_file("ok.bin", token_files::counting_tokens(300, 64));
  const auto model = token_files::tiny_tokenizer(100);
  expect_bad_input(tokens_args(data) + " tokenizer_path=" + model,
                   "tokenizer_path '" + model + "' has a vocabulary of 100 pieces, larger than vocab_size=64");
}

TEST_CASE("bad input: a missing or unreadable tokenizer model", "[bad-input][tokens]") {
  const auto data = token_files::llmc_file("ok2.bin", token_files::counting_tokens(300, 64));
  expect_bad_input(tokens_args(data) + " tokenizer_path=/nonexistent.model",
                   "tokenizer_path '/nonexistent.model' does not exist");
  const auto junk = file_with("junk.model", "this is not a protobuf");
  expect_bad_input(tokens_args(data) + " tokenizer_path=" + junk,
                   "tokenizer_path '" + junk + "' is not a readable SentencePiece model");
}

TEST_CASE("bad input: an eval file shorter than one eval batch", "[bad-input][tokens]") {
  const auto data = token_files::llmc_file("train.bin", token_files::counting_tokens(300, 64));
  const auto val = token_files::llmc_file("val.bin", token_files::counting_tokens(16 + 1, 64));  // one window
  expect_bad_input(tokens_args(data) + " eval_interval=1 eval_dataset_path=" + val,
                   "eval_dataset_path '" + val + "' is shorter than one eval batch: it holds 1 windows");
}

TEST_CASE("bad input: eval_interval on a token file without eval_dataset_path", "[bad-input][tokens]") {
  const auto data = token_files::llmc_file("train2.bin", token_files::counting_tokens(300, 64));
  expect_bad_input(tokens_args(data) + " eval_interval=5", "eval_interval=5 with dataset_type=tokens needs "
                                                           "eval_dataset_path");
}

TEST_CASE("bad input: missing config file", "[bad-input]") {
  expect_bad_input("no_such_config.yml", "config file 'no_such_config.yml' does not exist");
}

TEST_CASE("bad input: missing CONFIG argument", "[bad-input]") {
  expect_bad_input("", "missing CONFIG; usage: trainer CONFIG [key=value ...]");
}

TEST_CASE("bad input: unknown command-line flag", "[bad-input]") {
  expect_bad_input("base.yml --no-such-flag", "no-such-flag");
}

TEST_CASE("bad input: an override that is not key=value", "[bad-input]") {
  expect_bad_input("base.yml steps", "override 'steps' is not of the form key=value");
}

TEST_CASE("bad input: YAML syntax error, with the line", "[bad-input]") {
  expect_bad_input(file_with("syntax.yml", "steps: 2\nlog_period: 1\nlearning_rate: [0.1\n"),
                   "syntax.yml:4: YAML syntax error");
}

TEST_CASE("bad input: the same key overridden twice is an error", "[bad-input]") {
  expect_bad_input("base.yml steps=1 steps=2", "config key 'steps' is overridden twice; give it once");
}

TEST_CASE("bad input: the same key twice in the YAML file", "[bad-input]") {
  expect_bad_input(file_with("dup.yml", "steps: 2\nsteps: 3\n"), "dup.yml:2: config key 'steps' appears twice");
}

TEST_CASE("bad input: resuming a checkpoint of another model shape", "[bad-input][checkpoint]") {
  const std::string base = finished_run();
  expect_resume_error(base, "base_emb_dim=48",
                      "was written with base_emb_dim=32, but the config has base_emb_dim=48; base_emb_dim cannot "
                      "change on resume");
}

TEST_CASE("bad input: resuming a checkpoint with another vocab_size", "[bad-input][checkpoint]") {
  const std::string base = finished_run();
  expect_resume_error(base, "vocab_size=128", "was written with vocab_size=64, but the config has vocab_size=128");
}

TEST_CASE("bad input: a truncated checkpoint (the only one)", "[bad-input][checkpoint]") {
  const std::string base = finished_run();
  const std::string file = base + "/r/checkpoints/step-2/model.pt";
  fs::resize_file(file, fs::file_size(file) / 2);
  expect_resume_error(base, "", "checkpoint file '" + file + "' is corrupt");
}

TEST_CASE("bad input: a checkpoint with flipped bytes, loaded explicitly", "[bad-input][checkpoint]") {
  const std::string base = finished_run("checkpoint_period=1 max_num_checkpoints_to_keep=0");
  const std::string file = base + "/r/checkpoints/step-1/optimizer.pt";
  {
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(fs::file_size(file) / 2);
    f.write("\xde\xad\xbe\xef", 4);
  }
  expect_resume_error(base, "load_checkpoint_step=1",
                      "checkpoint file '" + file + "' is corrupt: crc32");
}

TEST_CASE("bad input: a re-signed checkpoint whose model.pt, optimizer.pt or rng.pt is damaged", "[bad-input][checkpoint]") {
  // The manifest vouches for the changed bytes, so only LibTorch's reader can tell; its error must become ours (exit
  // 2 naming the file), and the bytes written, terminal escapes included, must not reach the output raw.
  // tests/test_checkpoint.cpp fuzzes the same in-process over many more damages.
  const std::string base = finished_run();
  const std::string dir = base + "/r/checkpoints/step-2", copy = base + "/step-2.orig";
  fs::copy(dir, copy);
  std::mt19937 rng(7);
  for (const char* name : {"model.pt", "optimizer.pt", "rng.pt"}) {
    const std::string original = tp::read_text(copy + "/" + name);
    std::string junk = "\x1b[2J\xff\xfe\x07\r";
    for (int i = 0; i < 24; ++i) junk += char(rng() % 256);
    for (size_t at : {size_t(0), original.size() - 40}) {  // the first zip header; the central directory
      INFO(name << ": junk at " << at);
      fs::remove_all(dir);
      fs::copy(copy, dir);
      std::string bytes = original;
      bytes.replace(at, junk.size(), junk);
      std::ofstream(dir + "/" + name, std::ios::binary | std::ios::trunc) << bytes.substr(0, original.size());
      resign(dir, name);
      auto r = tp::run("base.yml steps=4 run_name=r load_checkpoint_step=2 base_output_directory=" + base + tp::kTiny);
      INFO(r.output);
      CHECK(r.code == 2);
      CHECK(terminal_safe(r.output));
      CHECK_THAT(last_line(r.output), Catch::StartsWith("error: checkpoint file '" + dir + "/" + name + "' is corrupt: "));
      CHECK(r.output.find("error: ") == r.output.rfind("error: "));  // one message
    }
  }
}

TEST_CASE("bad input: load_checkpoint_step that does not exist", "[bad-input][checkpoint]") {
  const std::string base = finished_run();
  expect_resume_error(base, "load_checkpoint_step=7", "load_checkpoint_step=7: there is no checkpoint");
}

TEST_CASE("bad input: an existing run directory without checkpoints", "[bad-input]") {
  const std::string base = finished_run("enable_checkpointing=false");
  expect_resume_error(base, "", "already exists and holds no checkpoint to resume from");
}

TEST_CASE("bad input: an unwritable output directory (/proc)", "[bad-input]") {
  const std::string out = "/proc/sg_no_such_dir";
  auto r = tp::run("base.yml steps=1 run_name=r base_output_directory=" + out + tp::kTiny);
  INFO(r.output);
  CHECK(r.code == 2);
  CHECK_THAT(last_line(r.output), Catch::StartsWith("error: cannot create run directory '" + out + "/r'"));
}

TEST_CASE("bad input: an output directory under a regular file", "[bad-input]") {
  const std::string file = file_with("plain_file", "x");
  auto r = tp::run("base.yml steps=1 run_name=r base_output_directory=" + file + "/runs" + tp::kTiny);
  INFO(r.output);
  CHECK(r.code == 2);
  CHECK_THAT(last_line(r.output), Catch::StartsWith("error: cannot create run directory '" + file + "/runs/r'") &&
                                      Catch::Contains("Not a directory"));
}

TEST_CASE("bad input: resuming with another global batch", "[bad-input][checkpoint]") {
  const std::string base = finished_run();  // per_device_batch_size=2, K=1, one process
  expect_resume_error(base, "gradient_accumulation_steps=2",
                      "was written with a global batch of 2 (per_device_batch_size=2 x gradient_accumulation_steps=1 x "
                      "WORLD_SIZE=1), but this run's is 4");
}

TEST_CASE("bad input: a second trainer on a run directory in use", "[bad-input]") {
  const std::string base = tp::fresh_dir("bad_busy");
  const std::string args = "base.yml steps=10 run_name=r base_output_directory=" + base + tp::kTiny;
  // Held before step 2 (SHADOWGRAD_TEST_HOLD), holding the run directory's lock, until our SIGTERM.
  const pid_t first = tp::spawn_held(args, base + ".first.log", "step-2");
  INFO(tp::read_text(base + ".first.log"));
  REQUIRE(first > 0);
  const auto r = tp::run(args);
  ::kill(first, SIGTERM);
  const int first_code = tp::wait_for(first);
  INFO(r.output);
  CHECK(r.code == 2);
  CHECK_THAT(last_line(r.output), Catch::StartsWith("error: run directory '" + base + "/r' is in use by another "
                                                    "trainer (pid " + std::to_string(first) + " on host "));
  CHECK(first_code == 143);  // the first run was not disturbed: it stopped on our SIGTERM, with a checkpoint
  CHECK(fs::exists(base + "/r/checkpoints/step-2"));
  fs::remove(base + ".first.log");
}
