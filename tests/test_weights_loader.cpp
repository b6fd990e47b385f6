// checkpoint::load_weights (src/checkpoint/WeightsLoader.h), the loader of export_hf and generate: the parameters
// bitwise, nothing else read or changed (no optimizer, the RNG, the run directory's .tmp-/.old- entries), a module
// whose checkpoint holds only some of its tensors (LoRA: adapters as parameters, the base as buffers), fallback past
// a damaged latest checkpoint, and refusals that leave the model as it was. tests/live_run_readers_test.sh runs the
// two tools beside a live trainer.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/optim/sgd.h>

#include "TinyConfig.h"
#include "TrainerProcess.h"
#include "checkpoint/Checkpointer.h"
#include "checkpoint/WeightsLoader.h"
#include "model/Decoder.h"
#include "util/Errors.h"

using namespace shadowgrad;
namespace fs = std::filesystem;

namespace {

// Every parameter and buffer of `m`, flattened into one fp32 tensor (a copy).
at::Tensor tensors_of(torch::nn::Module& m) {
  std::vector<at::Tensor> parts;
  for (const auto& p : m.named_parameters()) parts.push_back(p.value().detach().flatten().to(at::kFloat));
  for (const auto& b : m.named_buffers()) parts.push_back(b.value().detach().flatten().to(at::kFloat));
  return at::cat(parts);
}

// The decoder draws its weights from init_weights_seed (its own generator), not from the global one.
model::Decoder tiny_decoder(uint64_t seed) {
  auto cfg = tiny_config();
  cfg.init_weights_seed = int64_t(seed);
  return model::Decoder(model::DecoderOptions::from_config(cfg));
}

// Writes step-`step` of run_dir from `model`, as the trainer does (with an SGD optimizer's state beside it).
void save_step(const std::string& run_dir, int64_t step, torch::nn::Module& model) {
  torch::optim::SGD sgd(model.parameters(), torch::optim::SGDOptions(0.1));
  checkpoint::Checkpointer(checkpoint::CheckpointOptions{}, run_dir).save({step, 0, 0}, model, sgd);
}

std::string text_of(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// A LoRA-shaped module: a trainable adapter (a parameter) beside a frozen base (a buffer).
struct Adapted : torch::nn::Module {
  at::Tensor base, adapter;
  explicit Adapted(double fill) {
    base = register_buffer("base", at::full({4, 4}, fill));
    adapter = register_parameter("adapter", at::full({2, 4}, fill));
  }
};

} // namespace

TEST_CASE("load_weights: the parameters bitwise, the RNG and a live run's .tmp/.old directories untouched",
          "[checkpoint]") {
  const std::string run = trainer_process::fresh_dir("weights_loader");
  auto saved = tiny_decoder(1);
  save_step(run, 1, *saved);
  for (auto& p : saved->parameters()) p.detach().mul_(0.5);
  save_step(run, 2, *saved);
  // What a trainer writing into the same run has on disk at times, and what restore() removes.
  for (const char* name : {".tmp-step-3", ".old-step-2", ".deleting-step-1"}) {
    fs::create_directories(run + "/checkpoints/" + name);
    std::ofstream(run + "/checkpoints/" + name + "/model.pt") << "a checkpoint in the making";
  }

  auto loaded = tiny_decoder(2);
  REQUIRE_FALSE(at::equal(tensors_of(*saved), tensors_of(*loaded)));
  at::manual_seed(77);
  CHECK(checkpoint::load_weights(run, -1, *loaded) == 2);
  const double after_load = at::rand({1}).item<double>();
  at::manual_seed(77);
  CHECK(after_load == at::rand({1}).item<double>());  // restore() would have set the checkpoint's RNG state
  CHECK(at::equal(tensors_of(*saved), tensors_of(*loaded)));
  for (const char* name : {".tmp-step-3", ".old-step-2", ".deleting-step-1"})
    CHECK(text_of(run + "/checkpoints/" + name + "/model.pt") == "a checkpoint in the making");

  auto earlier = tiny_decoder(3);
  // Another seed, another model: the check below holds only if step 1 was loaded.
  REQUIRE_FALSE(at::equal(tensors_of(*tiny_decoder(1)), tensors_of(*earlier)));
  CHECK(checkpoint::load_weights(run, 1, *earlier) == 1);
  for (auto& p : earlier->parameters()) p.detach().mul_(0.5);
  CHECK(at::equal(tensors_of(*saved), tensors_of(*earlier)));

  // The control: restore() on the same run does remove them, so the checks above can fail.
  auto restored = tiny_decoder(4);
  torch::optim::SGD sgd(restored->parameters(), torch::optim::SGDOptions(0.1));
  checkpoint::Checkpointer(checkpoint::CheckpointOptions{}, run).restore(*restored, sgd);
  CHECK_FALSE(fs::exists(run + "/checkpoints/.tmp-step-3"));
  fs::remove_all(run);
}

TEST_CASE("load_weights: exactly the parameters, none of the buffers (a LoRA checkpoint holds the adapters alone)",
          "[checkpoint]") {
  const std::string run = trainer_process::fresh_dir("weights_loader_lora");
  Adapted trained(1.0);
  save_step(run, 1, trained);
  Adapted fresh(2.0);
  CHECK(checkpoint::load_weights(run, -1, fresh) == 1);
  CHECK(at::equal(fresh.adapter, trained.adapter));
  CHECK(at::equal(fresh.base, at::full({4, 4}, 2.0)));  // the base comes from load_parameters_path, not from here
  fs::remove_all(run);
}

TEST_CASE("load_weights: a damaged latest step falls back, an explicit one and a misfit are refused, the model as it "
          "was", "[checkpoint]") {
  const std::string run = trainer_process::fresh_dir("weights_loader_bad");
  auto saved = tiny_decoder(1);
  save_step(run, 1, *saved);
  save_step(run, 2, *saved);
  const std::string model2 = run + "/checkpoints/step-2/model.pt";
  {
    std::fstream f(model2, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(int64_t(fs::file_size(model2) / 2));
    f.put('\x5a');
  }
  auto loaded = tiny_decoder(2);
  const auto before = tensors_of(*loaded);
  REQUIRE_FALSE(at::equal(tensors_of(*saved), before));  // so "nothing copied" and the fallback's load can be told apart
  CHECK_THROWS_AS(checkpoint::load_weights(run, 2, *loaded), checkpoint::CorruptCheckpointError);
  CHECK_THROWS_WITH(checkpoint::load_weights(run, 2, *loaded), Catch::Contains(model2) && Catch::Contains("crc32"));
  CHECK(at::equal(before, tensors_of(*loaded)));
  CHECK_THROWS_WITH(checkpoint::load_weights(run, 5, *loaded), Catch::Contains("no checkpoint step-5") &&
                                                                   Catch::Contains("available: 1, 2"));
  CHECK(checkpoint::load_weights(run, -1, *loaded) == 1);
  CHECK(at::equal(tensors_of(*saved), tensors_of(*loaded)));

  // Another model shape (a wider MLP): refused naming the file and the parameter, nothing copied.
  auto cfg = tiny_config();
  cfg.base_mlp_dim = 2 * cfg.base_mlp_dim;
  model::Decoder wider(model::DecoderOptions::from_config(cfg));
  const auto wider_before = tensors_of(*wider);
  CHECK_THROWS_WITH(checkpoint::load_weights(run, 1, *wider),
                    Catch::Contains(run + "/checkpoints/step-1/model.pt") && Catch::Contains("does not fit the model"));
  CHECK(at::equal(wider_before, tensors_of(*wider)));

  CHECK_THROWS_AS(checkpoint::load_weights(trainer_process::fresh_dir("weights_loader_none"), -1, *loaded),
                  InputError);
  fs::remove_all(run);
}
