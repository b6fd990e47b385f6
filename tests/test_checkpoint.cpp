// Checkpoints and resume: the format (CRC-32, manifest), in-process save/restore, crashes at every stage
// of a write, corruption and fallback, frozen keys, pruning; then the trainer end to end: bitwise resume
// for K=1, K=4 and a bf16 shadow, SIGTERM, a late second SIGINT, kill -9, NaN skipping, and a full disk.
#include <catch2/catch.hpp>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

#include <ATen/ATen.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>
#include <torch/optim/adamw.h>

#include "CraftedCheckpoint.h"
#include "TinyConfig.h"
#include "TrainerProcess.h"
#include "checkpoint/Checkpointer.h"
#include "checkpoint/MetricsTail.h"
#include "checkpoint/Crc32.h"
#include "checkpoint/Manifest.h"
#include "data/DataSource.h"
#include "model/Decoder.h"
#include "train/TrainStep.h"
#include "util/Errors.h"
#include "util/OptimizerStateKey.h"
#include "util/Printable.h"
#include "Skip.h"

using namespace shadowgrad;
namespace fs = std::filesystem;
namespace tp = trainer_process;

namespace {

// A TrainStep on a tiny config, with the data source it reads.
struct Rig {
  config::Config cfg;
  std::unique_ptr<data::DataSource> source;
  std::unique_ptr<train::TrainStep> step;
  explicit Rig(const config::Config& c) : cfg(c), source(data::make_source(data::DataOptions::from_config(cfg))) {
    step = std::make_unique<train::TrainStep>(train::StepOptions::from_config(cfg),
                                              model::Decoder(model::DecoderOptions::from_config(cfg)), *source,
                                              c10::Device(c10::kCPU));
  }
  torch::nn::Module& module() { return *step->model(); }
};

// The checkpoints of run directory `dir`, with the options `c` gives.
checkpoint::Checkpointer checkpointer(const config::Config& c, const std::string& dir) {
  return checkpoint::Checkpointer(checkpoint::CheckpointOptions::from_config(c), dir);
}

std::vector<at::Tensor> snapshot_params(Rig& r) {
  std::vector<at::Tensor> out;
  for (const auto& p : r.step->model()->parameters()) out.push_back(p.detach().clone());
  return out;
}

// exp_avg, exp_avg_sq and the step count of every AdamW parameter state, in parameter order.
std::vector<at::Tensor> snapshot_adam(Rig& r) {
  std::vector<at::Tensor> out;
  auto& opt = r.step->optimizer();
  for (const auto& p : opt.param_groups()[0].params()) {
    auto it = opt.state().find(shadowgrad::util::optimizer_state_key(p));
    if (it == opt.state().end()) continue;
    auto& s = static_cast<torch::optim::AdamWParamState&>(*it->second);
    out.push_back(s.exp_avg().clone());
    out.push_back(s.exp_avg_sq().clone());
    out.push_back(at::scalar_tensor(double(s.step()), at::kDouble));
  }
  return out;
}

bool all_equal(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (!at::equal(a[i], b[i])) return false;
  return true;
}

void flip_byte(const std::string& path, size_t offset) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(offset);
  char c;
  f.get(c);
  f.seekp(offset);
  f.put(char(c ^ 0x5A));
}

void truncate_file(const std::string& path) { fs::resize_file(path, fs::file_size(path) / 2); }

// One damage to a file, as the fuzz over re-signed checkpoints applies it.
struct Mutation {
  std::string kind;  // "bit flip", "random span", "zeroed span", "truncation"
  size_t at = 0, length = 0;
  std::string describe() const { return kind + " at " + std::to_string(at) + " (" + std::to_string(length) + " bytes)"; }
};

std::string mutated(std::string bytes, const Mutation& m, std::mt19937& rng) {
  if (m.kind == "truncation") return bytes.substr(0, m.at);
  for (size_t i = m.at; i < std::min(bytes.size(), m.at + m.length); ++i) {
    if (m.kind == "bit flip") bytes[i] = char(bytes[i] ^ (1 << (rng() % 8)));
    if (m.kind == "random span") bytes[i] = char(rng() % 256);
    if (m.kind == "zeroed span") bytes[i] = 0;
  }
  return bytes;
}

// `per_kind` mutations of each kind for a file of `size` bytes. Half the offsets fall in the first or last 512
// bytes, where a LibTorch archive keeps its pickle, its zip headers and its central directory; the rest anywhere
// (mostly tensor data).
std::vector<Mutation> mutations(size_t size, int per_kind, std::mt19937& rng) {
  auto offset = [&](int i) {
    const size_t edge = std::min<size_t>(512, size);
    if (i % 2 == 1) return size_t(rng() % size);
    return rng() % 2 ? size_t(rng() % edge) : size - 1 - size_t(rng() % edge);
  };
  std::vector<Mutation> out;
  for (int i = 0; i < per_kind; ++i) {
    out.push_back({"bit flip", offset(i), 1});
    out.push_back({"random span", offset(i), 1 + rng() % 32});
    out.push_back({"zeroed span", offset(i), 64});
    out.push_back({"truncation", size_t(rng() % size), 0});
  }
  return out;
}

config::Config rig_config(const std::string& base, int64_t k, const std::string& grad_dtype) {
  config::Config c = tiny_config();
  c.base_output_directory = base;
  c.run_name = "r";
  c.per_device_batch_size = 2;
  c.gradient_accumulation_steps = k;
  set_key(c, "grad_dtype", grad_dtype);
  return c;
}

// Trains step 0 of rig_config(base, 1, "float32") and checkpoints it in base/r; returns that config.
config::Config one_checkpoint(const std::string& base) {
  config::Config c = rig_config(base, 1, "float32");
  Rig rig(c);
  rig.step->run(0);
  checkpointer(c, base + "/r").save({1, 0, 0}, rig.module(), rig.step->optimizer());
  return c;
}

} // namespace

TEST_CASE("crc32 gives the standard check value and chains", "[checkpoint]") {
  CHECK(checkpoint::crc32("123456789", 9) == 0xCBF43926u);
  CHECK(checkpoint::crc32("6789", 4, checkpoint::crc32("12345", 5)) == 0xCBF43926u);
  CHECK(checkpoint::crc32_hex(0xCBF43926u) == "cbf43926");
}

TEST_CASE("a manifest round-trips, and one flipped byte in it is caught", "[checkpoint]") {
  checkpoint::Manifest m;
  m.state = {7, 2, 1};
  m.data_position = m.lr_schedule_position = 7;
  m.optimizer_updates = 5;
  m.config_fingerprint = "00ff";
  // A frozen string key's value is itself quoted, as the config prints it (lora_target_modules).
  m.frozen = {{"vocab_size", "64"}, {"lora_target_modules", "\"q_proj,v_proj\""}};
  m.files = {{"model.pt", 123, "deadbeef"}};
  const std::string text = m.to_text();
  auto back = checkpoint::Manifest::parse(text, "m.yml");
  CHECK(back.state.step == 7);
  CHECK(back.state.skipped_steps == 2);
  CHECK(back.state.consecutive_nonfinite == 1);
  CHECK(back.optimizer_updates == 5);
  CHECK(back.frozen == m.frozen);
  REQUIRE(back.files.size() == 1);
  CHECK(back.files[0].crc32 == "deadbeef");
  for (size_t at : {size_t(20), text.size() / 2, text.size() - 3}) {
    std::string bad = text;
    bad[at] ^= 0x01;
    CHECK_THROWS_AS(checkpoint::Manifest::parse(bad, "m.yml"), checkpoint::CorruptCheckpointError);
  }
  CHECK_THROWS_WITH(checkpoint::Manifest::parse(text.substr(0, text.size() / 2), "m.yml"),
                    Catch::Contains("'m.yml' is corrupt"));
}

TEST_CASE("printable keeps ASCII and UTF-8 and escapes every other byte, one by one", "[checkpoint][unit]") {
  CHECK(util::printable("step-2/model.pt: 100 bytes") == "step-2/model.pt: 100 bytes");
  CHECK(util::printable("caf\xc3\xa9 \xe2\x82\xac") == "caf\xc3\xa9 \xe2\x82\xac");  // é, €
  CHECK(util::printable("a\x1b[2Jb\x07\r\n\t") == "a\\x1b[2Jb\\x07\\x0d\\x0a\\x09");
  CHECK(util::printable("\xff\xfe\xc3") == "\\xff\\xfe\\xc3");               // not UTF-8; a cut sequence
  CHECK(util::printable("\xc0\xaf \xed\xa0\x80") == "\\xc0\\xaf \\xed\\xa0\\x80");  // overlong; a surrogate
  CHECK(util::printable("x\xe2\x80\xaey \xc2\x9b") == "x\\xe2\\x80\\xaey \\xc2\\x9b");  // RLO; C1 CSI
  CHECK(util::printable(std::string("\0", 1)) == "\\x00");
}

TEST_CASE("save then restore into a fresh model: the next steps are bitwise equal", "[checkpoint]") {
  const std::string base = tp::fresh_dir("ckpt_inproc");
  for (auto [k, grad_dtype] : {std::pair<int64_t, const char*>{1, "float32"}, {4, "bfloat16"}}) {
    DYNAMIC_SECTION("K=" << k << " grad_dtype=" << grad_dtype) {
      config::Config c = rig_config(base, k, grad_dtype);
      fs::remove_all(base);
      Rig a(c);
      for (int64_t s = 0; s < 3; ++s) a.step->run(s);
      auto writer = checkpointer(c, base + "/r");
      at::manual_seed(1234);  // the RNG state is part of the checkpoint
      writer.save({3, 0, 0}, a.module(), a.step->optimizer());
      const double random_after_save = at::rand({1}).item<double>();

      Rig b(c);
      CHECK_FALSE(all_equal(snapshot_params(a), snapshot_params(b)));
      at::manual_seed(999);
      auto reader = checkpointer(c, base + "/r");
      auto state = reader.restore(b.module(), b.step->optimizer());
      CHECK(state.step == 3);
      CHECK(at::rand({1}).item<double>() == random_after_save);
      CHECK(all_equal(snapshot_params(a), snapshot_params(b)));
      CHECK(all_equal(snapshot_adam(a), snapshot_adam(b)));
      for (int64_t s = 3; s < 6; ++s) CHECK(a.step->run(s).loss == b.step->run(s).loss);
      CHECK(all_equal(snapshot_params(a), snapshot_params(b)));
    }
  }
}

TEST_CASE("a crash at any stage of a checkpoint write leaves the previous one complete", "[checkpoint]") {
  const std::string base = tp::fresh_dir("ckpt_crash");
  config::Config c = rig_config(base, 1, "float32");
  Rig rig(c);
  rig.step->run(0);
  auto ckpt = checkpointer(c, base + "/r");
  ckpt.save({1, 0, 0}, rig.module(), rig.step->optimizer());
  rig.step->run(1);
  const auto params_at_2 = snapshot_params(rig);

  for (std::string stage : {"model.pt", "optimizer.pt", "rng.pt", "config.yml", "manifest.yml", "before-rename"}) {
    INFO("crash after " << stage);
    checkpoint::Checkpointer::set_fault_hook([&](const std::string& s) {
      if (s == stage) throw std::runtime_error("simulated crash");
    });
    CHECK_THROWS_WITH(ckpt.save({2, 0, 0}, rig.module(), rig.step->optimizer()),
                      Catch::Contains("simulated crash") && Catch::Contains("earlier checkpoints are untouched"));
    checkpoint::Checkpointer::set_fault_hook(nullptr);
    CHECK(ckpt.steps() == std::vector<int64_t>{1});
    Rig fresh(c);
    CHECK(ckpt.restore(fresh.module(), fresh.step->optimizer()).step == 1);
  }

  // A crash that kills the process leaves the .tmp directory behind: simulate it, then resume.
  fs::create_directories(base + "/r/checkpoints/.tmp-step-2");
  std::ofstream(base + "/r/checkpoints/.tmp-step-2/model.pt") << "half a file";
  Rig fresh(c);
  CHECK(ckpt.restore(fresh.module(), fresh.step->optimizer()).step == 1);
  CHECK_FALSE(fs::exists(base + "/r/checkpoints/.tmp-step-2"));

  // Replacing an existing step-N (after loading an earlier step): a crash between moving the old copy
  // aside and renaming the new one in puts the old copy back on the next start.
  ckpt.save({2, 0, 0}, rig.module(), rig.step->optimizer());
  checkpoint::Checkpointer::set_fault_hook([](const std::string& s) {
    if (s == "old-moved-aside") throw std::runtime_error("simulated crash");
  });
  CHECK_THROWS(ckpt.save({2, 0, 0}, rig.module(), rig.step->optimizer()));
  checkpoint::Checkpointer::set_fault_hook(nullptr);
  CHECK(ckpt.steps() == std::vector<int64_t>{1});
  Rig again(c);
  CHECK(ckpt.restore(again.module(), again.step->optimizer()).step == 2);
  CHECK(all_equal(snapshot_params(again), params_at_2));
}

TEST_CASE("a corrupt latest checkpoint is named and the previous one is used, an explicit step errors",
          "[checkpoint]") {
  const std::string base = tp::fresh_dir("ckpt_corrupt");
  config::Config c = rig_config(base, 1, "float32");
  c.max_num_checkpoints_to_keep = 0;
  Rig rig(c);
  auto ckpt = checkpointer(c, base + "/r");
  for (int64_t s = 0; s < 3; ++s) {
    rig.step->run(s);
    ckpt.save({s + 1, 0, 0}, rig.module(), rig.step->optimizer());
  }
  const std::string step3 = ckpt.step_dir(3), step2 = ckpt.step_dir(2);
  SECTION("truncated model.pt") { truncate_file(step3 + "/model.pt"); }
  SECTION("flipped byte in optimizer.pt") { flip_byte(step3 + "/optimizer.pt", fs::file_size(step3 + "/optimizer.pt") / 2); }
  SECTION("flipped byte in manifest.yml") { flip_byte(step3 + "/manifest.yml", 60); }
  SECTION("missing rng.pt") { fs::remove(step3 + "/rng.pt"); }

  Rig fresh(c);
  CHECK(ckpt.restore(fresh.module(), fresh.step->optimizer()).step == 2);

  config::Config explicit_step = c;
  explicit_step.load_checkpoint_step = 3;
  auto strict = checkpointer(explicit_step, base + "/r");
  CHECK_THROWS_AS(strict.restore(fresh.module(), fresh.step->optimizer()), checkpoint::CorruptCheckpointError);
  CHECK_THROWS_WITH(strict.restore(fresh.module(), fresh.step->optimizer()), Catch::Contains(step3 + "/"));

  // Nothing loadable at all: an error naming the file, never a silent fresh start.
  truncate_file(step2 + "/model.pt");
  truncate_file(ckpt.step_dir(1) + "/model.pt");
  CHECK_THROWS_WITH(ckpt.restore(fresh.module(), fresh.step->optimizer()),
                    Catch::Contains(step3 + "/") && Catch::Contains("no earlier checkpoint is loadable"));
}

TEST_CASE("fuzz: a re-signed checkpoint with a damaged model.pt, optimizer.pt or rng.pt is refused naming the file",
          "[checkpoint][fuzz]") {
  // Accepted: CorruptCheckpointError (exit 2) naming the file, its message printable; or a load that succeeds,
  // where the damage fell inside tensor data or left the archive readable (the manifest vouches for the bytes, so
  // nothing can tell). A truncation, which cuts off the zip's central directory, must always be refused.
  const std::string base = tp::fresh_dir("ckpt_fuzz");
  const config::Config c = one_checkpoint(base);
  const std::string pristine = checkpointer(c, base + "/r").step_dir(1), copy = base + "/r/checkpoints/step-1.orig";
  fs::copy(pristine, copy);
  config::Config strict = c;
  strict.load_checkpoint_step = 1;
  std::mt19937 rng(20261201);
  const int per_kind = 2;  // of 4 kinds, for each of 3 files: 24 damages, 6 of them truncations
  int refused = 0, loaded = 0, truncations_refused = 0;
  for (const char* name : {"model.pt", "optimizer.pt", "rng.pt"}) {
    const std::string original = tp::read_text(copy + "/" + name);
    for (const Mutation& m : mutations(original.size(), per_kind, rng)) {
      INFO(name << ": " << m.describe());
      fs::remove_all(pristine);
      fs::copy(copy, pristine);
      std::ofstream(pristine + "/" + name, std::ios::binary | std::ios::trunc) << mutated(original, m, rng);
      resign(pristine, name);
      Rig fresh(c);
      // restore() is called outside CHECK: CHECK would catch its exception itself (as a failed assertion) and
      // carry on, so every refusal would be counted as a load.
      try {
        const int64_t step = checkpointer(strict, base + "/r").restore(fresh.module(), fresh.step->optimizer()).step;
        CHECK(step == 1);
        CHECK(m.kind != "truncation");
        ++loaded;
      } catch (const checkpoint::CorruptCheckpointError& e) {
        INFO(e.what());
        CHECK_THAT(e.what(), Catch::StartsWith("checkpoint file '" + pristine + "/" + name + "' is corrupt: "));
        CHECK(terminal_safe(e.what()));
        ++refused;
        truncations_refused += m.kind == "truncation";
      }
    }
  }
  WARN("re-signed checkpoints: " << refused << " refused, " << loaded << " loaded");
  CHECK(refused + loaded == 3 * 4 * per_kind);
  CHECK(truncations_refused == 3 * per_kind);
  fs::remove_all(base);
}

TEST_CASE("a changed model shape, vocab or optimizer names the key, allowed keys may change", "[checkpoint]") {
  const std::string base = tp::fresh_dir("ckpt_frozen");
  const config::Config c = one_checkpoint(base);

  struct Change {
    std::string key;
    std::function<void(config::Config&)> apply;
  };
  const Change changes[] = {{"base_emb_dim", [](config::Config& x) { x.base_emb_dim = 48; }},
                            {"vocab_size", [](config::Config& x) { x.vocab_size = 128; }},
                            {"base_num_decoder_layers", [](config::Config& x) { x.base_num_decoder_layers = 3; }},
                            {"opt_type", [](config::Config& x) { x.opt_type = config::OptType::adam; }}};
  for (const auto& change : changes) {
    config::Config other = c;
    change.apply(other);
    Rig r(other);
    CHECK_THROWS_WITH(checkpointer(other, base + "/r").restore(r.module(), r.step->optimizer()),
                      Catch::Contains("written with " + change.key + "=") && Catch::Contains("cannot change on resume"));
  }
  // K may change with the global batch kept (per_device_batch_size x K x WORLD_SIZE); alone it changes the data.
  config::Config other_k = c;
  other_k.gradient_accumulation_steps = 2;
  Rig rk(other_k);
  CHECK_THROWS_WITH(checkpointer(other_k, base + "/r").restore(rk.module(), rk.step->optimizer()),
                    Catch::Contains("global batch of 2") && Catch::Contains("gradient_accumulation_steps=1"));
  config::Config longer = c;
  longer.steps = 50;
  longer.gradient_accumulation_steps = 2;
  longer.per_device_batch_size = 1;
  Rig r(longer);
  CHECK(checkpointer(longer, base + "/r").restore(r.module(), r.step->optimizer()).step == 1);
}

TEST_CASE("resuming names each key that changed, old and new value as the config prints them, a path by where it "
          "leads", "[checkpoint]") {
  const std::string base = tp::fresh_dir("ckpt_changed");
  const config::Config c = one_checkpoint(base);
  config::Config changed = c;
  changed.learning_rate = c.learning_rate / 3;
  changed.steps = c.steps + 5;
  // The same directory written relative to the working directory, with a trailing '/': not a change. A path that
  // names another file is one.
  changed.base_output_directory = fs::relative(c.base_output_directory).string() + "/";
  REQUIRE(changed.base_output_directory != c.base_output_directory);
  changed.eval_prompts_path = "other.jsonl";
  std::ostringstream log;
  const auto previous = spdlog::default_logger();
  spdlog::set_default_logger(
      std::make_shared<spdlog::logger>("capture", std::make_shared<spdlog::sinks::ostream_sink_mt>(log)));
  Rig r(changed);
  const auto state = checkpointer(changed, base + "/r").restore(r.module(), r.step->optimizer());
  spdlog::set_default_logger(previous);
  CHECK(state.step == 1);
  auto change = [&](const std::string& key) {
    const auto* spec = config::find_key(key);
    return key + " " + spec->get(c) + " -> " + spec->get(changed);
  };
  CHECK_THAT(log.str(), Catch::Contains("resuming with changed keys: ") && Catch::Contains(change("learning_rate")) &&
                            Catch::Contains(change("steps")));
  CHECK_THAT(log.str(), !Catch::Contains("vocab_size"));
  CHECK_THAT(log.str(), !Catch::Contains("base_output_directory") && Catch::Contains(change("eval_prompts_path")));
}

TEST_CASE("checkpoint_period, the last step, and keeping the newest N", "[checkpoint]") {
  const std::string base = tp::fresh_dir("ckpt_keep");
  config::Config c = rig_config(base, 1, "float32");
  c.steps = 10;
  c.checkpoint_period = 4;
  c.max_num_checkpoints_to_keep = 2;
  auto ckpt = checkpointer(c, base + "/r");
  CHECK(ckpt.due(4));
  CHECK(ckpt.due(8));
  CHECK(ckpt.due(10));
  CHECK_FALSE(ckpt.due(5));
  Rig rig(c);
  for (int64_t s : {4, 8, 10}) ckpt.save({s, 0, 0}, rig.module(), rig.step->optimizer());
  CHECK(ckpt.steps() == std::vector<int64_t>{8, 10});
  c.enable_checkpointing = false;
  CHECK_FALSE(checkpointer(c, base + "/r").due(8));
}

TEST_CASE("a protected step (keep_best_checkpoint) stays out of the rotation", "[checkpoint]") {
  const std::string base = tp::fresh_dir("ckpt_protect");
  config::Config c = rig_config(base, 1, "float32");
  c.steps = 10;
  c.max_num_checkpoints_to_keep = 1;
  auto ckpt = checkpointer(c, base + "/r");
  Rig rig(c);
  ckpt.protect(4);
  for (int64_t s : {2, 4, 6, 8}) ckpt.save({s, 0, 0}, rig.module(), rig.step->optimizer());
  CHECK(ckpt.steps() == std::vector<int64_t>{4, 8});  // the newest one, and step 4 besides it
  ckpt.protect(8);  // a better step: 4 is rotated out at the next save
  ckpt.save({10, 0, 0}, rig.module(), rig.step->optimizer());
  CHECK(ckpt.steps() == std::vector<int64_t>{8, 10});
  ckpt.protect(-1);  // control: nothing protected keeps the newest one only
  ckpt.save({11, 0, 0}, rig.module(), rig.step->optimizer());
  CHECK(ckpt.steps() == std::vector<int64_t>{11});
}

TEST_CASE("metrics.jsonl's evaluations: read back, kept up to the checkpoint, the best one", "[checkpoint]") {
  const std::string dir = tp::fresh_dir("ckpt_evals");
  fs::create_directories(dir);
  const std::string path = dir + "/metrics.jsonl";
  std::ofstream(path) << "{\"step\": 1, \"loss\": 4.5, \"eval_loss\": 3.5}\n{\"step\": 2, \"loss\": 4.25}\n"
                         "{\"step\": 3, \"loss\": 4, \"eval_loss\": 3.25}\n{\"step\": 4, \"loss\": 4, \"eval_loss\": null}\n"
                         "{\"step\": 5, \"loss\": 4, \"eval_loss\": 3.75}\n";
  const auto all = checkpoint::read_evaluations(path);
  REQUIRE(all.size() == 4);
  CHECK(all[3].step == 5);
  CHECK(std::isnan(all[2].eval_loss));
  REQUIRE(checkpoint::best_evaluation(all));
  CHECK(checkpoint::best_evaluation(all)->step == 3);
  CHECK_FALSE(checkpoint::best_evaluation({{4, std::nan("")}}));
  const auto tail = checkpoint::truncate_metrics(path, 3);
  REQUIRE(tail.evaluations.size() == 2);
  CHECK(tail.evaluations[1].step == 3);
  CHECK(tail.evaluations[1].eval_loss == 3.25);
}

TEST_CASE("truncate_metrics keeps each step up to the checkpoint once and drops a torn line", "[checkpoint]") {
  const std::string dir = tp::fresh_dir("ckpt_metrics");
  fs::create_directories(dir);
  const std::string path = dir + "/metrics.jsonl";
  std::ofstream(path) << "{\"step\": 1, \"loss\": 4.5}\n{\"step\": 2, \"loss\": 4.25}\n{\"step\": 3, \"loss\": 4}\n"
                         "{\"step\": 4, \"lo";
  auto tail = checkpoint::truncate_metrics(path, 2);
  CHECK(tail.first_loss == 4.5);
  CHECK(tail.last_loss == 4.25);
  CHECK(tp::lines(path) == std::vector<std::string>{"{\"step\": 1, \"loss\": 4.5}", "{\"step\": 2, \"loss\": 4.25}"});
}

TEST_CASE("eval_on_start's step-0 line: kept by a resume, dropped by a restart, neither a step nor a best evaluation",
          "[checkpoint]") {
  const std::string dir = tp::fresh_dir("ckpt_step0");
  fs::create_directories(dir);
  const std::string path = dir + "/metrics.jsonl";
  const std::string step0 = "{\"step\": 0, \"eval_loss\": 3}";
  std::ofstream(path) << step0 << "\n{\"step\": 1, \"loss\": 4.5, \"eval_loss\": 3.5}\n{\"step\": 2, \"loss\": 4.25}\n";
  const auto all = checkpoint::read_evaluations(path);
  REQUIRE(all.size() == 1);
  CHECK(all[0].step == 1);
  const auto tail = checkpoint::truncate_metrics(path, 1);
  CHECK(tail.steps == 1);
  CHECK(tail.first_loss == 4.5);
  CHECK(tail.evaluations.size() == 1);
  CHECK(tp::lines(path) == std::vector<std::string>{step0, "{\"step\": 1, \"loss\": 4.5, \"eval_loss\": 3.5}"});
  checkpoint::truncate_metrics(path, 0);  // a run restarted from step 0 evaluates again
  CHECK(tp::lines(path).empty());
}

TEST_CASE("a non-finite step leaves parameters and optimizer state untouched", "[checkpoint][nan]") {
  config::Config c = tiny_config();
  train::TrainStep::set_nan_fault_hook([](int64_t step) { return step == 2; });
  struct Unhook {
    ~Unhook() { train::TrainStep::set_nan_fault_hook(nullptr); }
  } unhook;
  Rig rig(c);
  rig.step->run(0);
  rig.step->run(1);
  const auto params = snapshot_params(rig);
  const auto adam = snapshot_adam(rig);
  REQUIRE_FALSE(adam.empty());
  auto s = rig.step->run(2);
  CHECK(s.skipped);
  CHECK(std::isnan(s.loss));
  CHECK(all_equal(params, snapshot_params(rig)));
  CHECK(all_equal(adam, snapshot_adam(rig)));
  for (const auto& shadow : rig.step->accumulator().shadows()) CHECK(shadow.abs().max().item<double>() == 0);
  auto next = rig.step->run(3);
  CHECK_FALSE(next.skipped);
  CHECK(std::isfinite(next.loss));
  CHECK_FALSE(all_equal(params, snapshot_params(rig)));
}

// ---- the trainer end to end --------------------------------------------------------------------------

namespace {

int64_t latest_checkpoint(const std::string& run_dir) {
  int64_t best = 0;
  for (const auto& e : fs::directory_iterator(run_dir + "/checkpoints")) {
    std::string n = e.path().filename().string();
    if (n.rfind("step-", 0) == 0) best = std::max<int64_t>(best, std::stoll(n.substr(5)));
  }
  return best;
}

std::vector<std::string> step_column(const std::string& run_dir) { return tp::field(run_dir + "/metrics.jsonl", "step"); }

std::vector<std::string> one_to(int64_t n) {
  std::vector<std::string> out;
  for (int64_t i = 1; i <= n; ++i) out.push_back(std::to_string(i));
  return out;
}

// A 10-step run and a 5-step run resumed to 10 write identical loss strings at every step.
void check_bitwise_resume(const std::string& variant, bool check_finished_rerun) {
  const std::string base = tp::fresh_dir("resume_bitwise");
  auto full = tp::run(tp::tiny_run_args(base, "a", variant + " steps=10"));
  REQUIRE(full.code == 0);
  auto first = tp::run(tp::tiny_run_args(base, "b", variant + " steps=5"));
  REQUIRE(first.code == 0);
  CHECK(latest_checkpoint(base + "/b") == 5);
  auto resumed = tp::run(tp::tiny_run_args(base, "b", variant + " steps=10"));
  INFO(resumed.output);
  REQUIRE(resumed.code == 0);
  CHECK_THAT(resumed.output, Catch::Contains("resumed from") && Catch::Contains("step-5"));
  auto a = tp::field(base + "/a/metrics.jsonl", "loss");
  auto b = tp::field(base + "/b/metrics.jsonl", "loss");
  REQUIRE(a.size() == 10);
  CHECK(a == b);  // steps 1..5 from the first run, 6..10 after the resume
  CHECK(step_column(base + "/b") == one_to(10));
  CHECK(fs::exists(base + "/b/summary.json"));
  if (!check_finished_rerun) return;
  // A finished run: the same command again has nothing to do and changes nothing.
  auto again = tp::run(tp::tiny_run_args(base, "b", variant + " steps=10"));
  CHECK(again.code == 0);
  CHECK_THAT(again.output, Catch::Contains("already complete at step 10"));
  CHECK(tp::field(base + "/b/metrics.jsonl", "loss") == a);
}

} // namespace

TEST_CASE("bitwise resume, K=1: 10 steps == 5 steps + resume to 10, as exact decimal strings", "[resume]") {
  check_bitwise_resume("gradient_accumulation_steps=1 grad_dtype=float32", true);
}

TEST_CASE("bitwise resume, K=4: 10 steps == 5 steps + resume to 10, as exact decimal strings", "[resume]") {
  check_bitwise_resume("gradient_accumulation_steps=4 grad_dtype=float32", false);
}

TEST_CASE("bitwise resume, K=4 with a bf16 shadow: 10 steps == 5 + resume to 10, as exact decimal strings",
          "[resume]") {
  check_bitwise_resume("gradient_accumulation_steps=4 grad_dtype=bfloat16", false);
}

TEST_CASE("bitwise resume with remat_policy=full, K=4: 10 steps == 5 + resume to 10", "[resume][remat]") {
  check_bitwise_resume("gradient_accumulation_steps=4 grad_dtype=float32 remat_policy=full", false);
}

TEST_CASE("bitwise resume with bf16 AdamW moments (stochastic rounding), K=4: 10 steps == 5 + resume to 10",
          "[resume][bf16]") {
  check_bitwise_resume("gradient_accumulation_steps=4 adam_state_dtype=bfloat16", false);
}

TEST_CASE("bitwise resume, K=4 with a stochastically rounded bf16 shadow: 10 steps == 5 + resume to 10",
          "[resume][rounding]") {
  check_bitwise_resume("gradient_accumulation_steps=4 grad_dtype=bfloat16 grad_accum_rounding=stochastic", false);
}

namespace {

// Resumes the interrupted run base/b with `args`, trains base/a straight with the same args, and checks that b's
// losses are a's as exact strings and that b's metrics list each of steps 1..`steps` once.
void resume_and_compare(const std::string& base, const std::string& args, int64_t steps) {
  auto resumed = tp::run(tp::tiny_run_args(base, "b", args));
  INFO(resumed.output);
  REQUIRE(resumed.code == 0);
  CHECK_THAT(resumed.output, Catch::Contains("resumed from"));
  REQUIRE(tp::run(tp::tiny_run_args(base, "a", args)).code == 0);
  CHECK(tp::field(base + "/a/metrics.jsonl", "loss") == tp::field(base + "/b/metrics.jsonl", "loss"));
  CHECK(step_column(base + "/b") == one_to(steps));
}

} // namespace

TEST_CASE("SIGTERM finishes the step, checkpoints, exits 143, and the same command resumes bitwise", "[resume][signals]") {
  const std::string base = tp::fresh_dir("resume_sigterm");
  const std::string dir = base + "/b";
  // Held before step 4 (SHADOWGRAD_TEST_HOLD): the SIGTERM lands there, so the run stops after step 4.
  pid_t pid = tp::spawn_held(tp::tiny_run_args(base, "b", "steps=100 checkpoint_period=100000"), base + ".log", "step-4");
  INFO(tp::read_text(base + ".log"));
  REQUIRE(pid > 0);
  kill(pid, SIGTERM);
  const int code = tp::wait_for(pid);
  const std::string log = tp::read_text(base + ".log");
  INFO(log);
  CHECK(code == 143);
  CHECK_THAT(log, Catch::Contains("stopped by SIGTERM after step 4"));
  const int64_t k = latest_checkpoint(dir);
  REQUIRE(k == 4);
  CHECK(step_column(dir) == one_to(k));  // metrics flushed up to the checkpoint, nothing after

  resume_and_compare(base, "checkpoint_period=100000 steps=" + std::to_string(k + 4), k + 4);
}

TEST_CASE("a signal more than 2 s after the first exits at once with 130, and the last complete checkpoint stays loadable",
          "[resume][signals]") {
  const std::string base = tp::fresh_dir("resume_sigint2");
  const std::string dir = base + "/b";
  const std::string args = "checkpoint_period=1";
  // Held before step 2 until two signals have come (SHADOWGRAD_TEST_HOLD=step-2:2): the first SIGINT asks for a stop
  // after step 2, and the second, 2.5 s later (past the 2 s burst window, the point of the test), finds step 2 still
  // under way whatever the machine's load.
  pid_t pid = tp::spawn_held(tp::tiny_run_args(base, "b", args + " steps=100"), base + ".log", "step-2:2");
  INFO(tp::read_text(base + ".log"));
  REQUIRE(pid > 0);
  kill(pid, SIGINT);
  REQUIRE(tp::wait_for_text(base + ".log", "SIGINT: finishing", pid));
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));
  kill(pid, SIGINT);
  const int code = tp::wait_for(pid);
  const std::string log = tp::read_text(base + ".log");
  INFO(log);
  CHECK(code == 130);
  CHECK_THAT(log, Catch::Contains("another signal: exiting now"));
  CHECK_THAT(log, !Catch::Contains("stopped by SIGINT"));
  const int64_t k = latest_checkpoint(dir);
  REQUIRE(k == 1);  // step 1's, written before the hold; step 2 never finished
  resume_and_compare(base, args + " steps=" + std::to_string(k + 1), k + 1);
}

TEST_CASE("kill -9 at random points while checkpoints are written never loses the previous one", "[resume][kill]") {
  const std::string base = tp::fresh_dir("resume_kill9");
  const std::string dir = base + "/b";
  std::mt19937 rng(12345);
  for (int round = 0; round < 4; ++round) {
    const size_t have = tp::lines(dir + "/metrics.jsonl").size();
    pid_t pid = tp::spawn(tp::tiny_run_args(base, "b", "steps=100000 checkpoint_period=1"), base + ".log");
    tp::wait_for_lines(dir + "/metrics.jsonl", have + 2);
    std::this_thread::sleep_for(std::chrono::microseconds(rng() % 30000));
    kill(pid, SIGKILL);
    CHECK(tp::wait_for(pid) == 128 + SIGKILL);
  }
  const int64_t k = latest_checkpoint(dir);
  REQUIRE(k >= 2);
  resume_and_compare(base, "checkpoint_period=1 steps=" + std::to_string(k + 2), k + 2);
}

TEST_CASE("non-finite steps are skipped and counted, max_consecutive_nonfinite in a row or every step exits 3", "[nan]") {
  const std::string base = tp::fresh_dir("nan");
  auto ok = tp::run_command("SHADOWGRAD_TEST_NAN_STEPS=3:2 " + std::string(TRAINER_BIN) + " " +
                            tp::tiny_run_args(base, "ok", "steps=6 max_consecutive_nonfinite=3"));
  INFO(ok.output);
  REQUIRE(ok.code == 0);
  CHECK(tp::field(base + "/ok/metrics.jsonl", "skipped_steps") ==
        std::vector<std::string>{"0", "0", "1", "2", "2", "2"});
  CHECK(tp::field(base + "/ok/metrics.jsonl", "loss")[2] == "null");
  CHECK_THAT(ok.output, Catch::Contains("step 3: non-finite loss"));

  auto stop = tp::run_command("SHADOWGRAD_TEST_NAN_STEPS=2:5 " + std::string(TRAINER_BIN) + " " +
                              tp::tiny_run_args(base, "stop", "steps=10 max_consecutive_nonfinite=3"));
  CHECK(stop.code == 3);
  CHECK_THAT(stop.output, Catch::Contains("error: steps 2..4 all had a non-finite loss or gradient norm "
                                          "(max_consecutive_nonfinite=3)"));
  CHECK(tp::lines(base + "/stop/metrics.jsonl").size() == 4);

  // Every step non-finite but fewer than the limit: the run trained nothing, and says so with exit 3 (the "ok" run
  // above, with 2 of 6 skipped, is the control that exits 0).
  auto none = tp::run_command("SHADOWGRAD_TEST_NAN_STEPS=1:3 " + std::string(TRAINER_BIN) + " " +
                              tp::tiny_run_args(base, "none", "steps=3 max_consecutive_nonfinite=5"));
  INFO(none.output);
  CHECK(none.code == 3);
  CHECK_THAT(none.output, Catch::Contains("error: every one of the run's 3 steps had a non-finite loss"));
}

TEST_CASE("a full disk during a checkpoint write: a clear error, and the earlier checkpoint survives", "[disk][can_skip]") {
  const std::string base = tp::fresh_dir("disk");
  // Size one checkpoint of this model on the normal disk first.
  REQUIRE(tp::run(tp::tiny_run_args(base, "probe", "steps=1")).code == 0);
  uintmax_t one = 0;
  for (const auto& e : fs::recursive_directory_iterator(base + "/probe/checkpoints/step-1")) one += e.file_size();
  const std::string mnt = base + "/small";
  fs::create_directories(mnt);
  const uintmax_t kib = (one * 3 / 2 + 32 * 1024) / 1024;
  if (std::system(("mount -t tmpfs -o size=" + std::to_string(kib) + "k tmpfs " + mnt + " 2>/dev/null").c_str()) != 0) {
    SG_SKIP("cannot mount a small tmpfs here (needs root); the full-disk path is untested on this machine");
  }
  struct Unmount {
    std::string dir;
    ~Unmount() { std::system(("umount " + dir).c_str()); }
  } unmount{mnt};
  auto r = tp::run(tp::tiny_run_args(mnt, "b", "steps=3 checkpoint_period=1 max_num_checkpoints_to_keep=1"));
  fs::create_directories(base + "/copy");
  fs::copy(mnt + "/b", base + "/copy/b", fs::copy_options::recursive);
  INFO(r.output);
  CHECK(r.code == 1);
  CHECK_THAT(r.output, Catch::Contains("error: cannot write checkpoint") && Catch::Contains("step-2") &&
                           Catch::Contains("No space left on device") &&
                           Catch::Contains("earlier checkpoints are untouched"));
  // step-1 is intact: the copy resumes from it and finishes.
  auto resumed = tp::run(tp::tiny_run_args(base + "/copy", "b", "steps=3 checkpoint_period=1 max_num_checkpoints_to_keep=1"));
  INFO(resumed.output);
  CHECK(resumed.code == 0);
  CHECK_THAT(resumed.output, Catch::Contains("resumed from") && Catch::Contains("step-1"));
}
