// reference_bench: the preference reference pass against a training step's forward, and the start-up fingerprint of
// the starting weights (bench/reference_bench.sh runs both; docs/preference.md quotes them).
//
//   build/reference_bench tiny.yml base_emb_dim=256 ... --pairs 64 --answer 24   # pairs/s: the pass, the forward
//   build/reference_bench tiny.yml base_emb_dim=2048 ... --hash-only             # seconds to fingerprint the weights
//
// The pass: ReferencePass over random pairs (prompts and answers of the given lengths), one process, in a scratch run
// directory. The forward: one TrainStep over the same pairs in the same microbatches (K = pairs / microbatch), its
// forward seconds (grad mode on, the loss included) and its backward seconds, as metrics.jsonl's forward_s and
// backward_s count them. The fingerprint: starting_weights_key over the model's parameters and buffers, 3 times,
// against FNV-1a (the earlier hash) over the same bytes once.
#include <chrono>
#include <ctime>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <fmt/format.h>

#include "config/Dtypes.h"
#include "config/ConfigLoader.h"
#include "config/ConfigSchema.h"
#include "data/DataSource.h"
#include "data/PairFile.h"
#include "data/PairSource.h"
#include "model/Decoder.h"
#include "train/PreferenceReference.h"
#include "train/Runtime.h"
#include "train/Signals.h"
#include "train/TrainStep.h"
#include "util/Errors.h"
#include "util/Hash.h"

namespace sg = shadowgrad;
using Clock = std::chrono::steady_clock;

namespace {

double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

void fingerprint(sg::model::Decoder& model) {
  int64_t bytes = 0;
  for (const auto& p : model->parameters()) bytes += int64_t(p.nbytes());
  for (const auto& b : model->buffers()) bytes += int64_t(b.nbytes());
  std::printf("weights: %.3f GB (%lld bytes) in parameters and buffers, %d threads\n", double(bytes) / 1e9,
              static_cast<long long>(bytes), at::get_num_threads());
  for (int i = 0; i < 3; ++i) {
    const auto t = Clock::now();
    const std::clock_t cpu = std::clock();
    const uint64_t key = sg::train::starting_weights_key(model);
    const double s = since(t), cpu_s = double(std::clock() - cpu) / CLOCKS_PER_SEC;
    std::printf("starting_weights_key: %.3f s (%.2f GB/s), %.3f s of CPU over the threads, key %016llx\n", s,
                double(bytes) / 1e9 / s, cpu_s, static_cast<unsigned long long>(key));
  }
  const auto t = Clock::now();
  uint64_t h = sg::util::kFnv1aOffset;
  for (const auto& p : model->parameters()) h = sg::util::fnv1a64(p.data_ptr(), size_t(p.nbytes()), h);
  for (const auto& b : model->buffers()) h = sg::util::fnv1a64(b.data_ptr(), size_t(b.nbytes()), h);
  const double s = since(t);
  std::printf("fnv1a64 byte by byte (the earlier hash): %.3f s (%.2f GB/s), key %016llx\n", s, double(bytes) / 1e9 / s,
              static_cast<unsigned long long>(h));
}

void pass_against_forward(sg::config::Config cfg, int64_t n, int64_t prompt, int64_t answer) {
  const std::string dir = (std::filesystem::temp_directory_path() / "reference_bench").string();
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  uint32_t x = 12345;
  auto next = [&] { return x = x * 1664525u + 1013904223u, (x >> 8) % uint32_t(cfg.vocab_size); };
  std::vector<sg::data::PairTokens> pairs(static_cast<size_t>(n));
  for (auto& p : pairs) {
    for (int64_t i = 0; i < prompt; ++i) p.prompt.push_back(next());
    for (int64_t i = 0; i < answer; ++i) p.chosen.push_back(next()), p.rejected.push_back(next());
  }
  cfg.dataset_path = dir + "/pairs.pairs";
  sg::data::write_pair_file(cfg.dataset_path, pairs);
  const int64_t micro = cfg.per_device_batch_size;
  cfg.gradient_accumulation_steps = n / micro;
  sg::data::PairSource source(sg::data::PairFile::open(cfg.dataset_path, "dataset_path"),
                              sg::data::DataOptions::from_config(cfg), "dataset_path");
  sg::model::Decoder model(sg::model::DecoderOptions::from_config(cfg));
  const c10::Device cpu(c10::kCPU);
  const sg::train::StopSignals signals;
  sg::train::ReferencePass ref(cfg, source, nullptr, micro, model, cpu, nullptr, signals);
  auto t = Clock::now();
  ref.prepare(dir, false, true);
  const double pass_s = since(t);
  sg::train::TrainStep step(sg::train::StepOptions::from_config(cfg), model, source, cpu);
  const sg::train::Accumulated acc = step.accumulate_batch(0);
  std::printf("shape: emb %lld, %lld layers, vocab %lld, dtype %s, packing %s; %lld pairs of %lld + %lld tokens, "
              "microbatches of %lld pairs, %d threads\n",
              static_cast<long long>(cfg.base_emb_dim), static_cast<long long>(cfg.base_num_decoder_layers),
              static_cast<long long>(cfg.vocab_size), sg::config::to_string(cfg.dtype).c_str(),
              cfg.packing ? "true" : "false", static_cast<long long>(n), static_cast<long long>(prompt),
              static_cast<long long>(answer), static_cast<long long>(micro), at::get_num_threads());
  std::printf("reference pass: %.2f s, %.2f pairs/s (the start-up fingerprint included)\n", pass_s, double(n) / pass_s);
  std::printf("training step forward: %.2f s, %.2f pairs/s (backward %.2f s)\n", acc.forward_s,
              double(n) / acc.forward_s, acc.backward_s);
  std::printf("pass / forward time: %.2f\n", pass_s / acc.forward_s);
  std::filesystem::remove_all(dir);
}

} // namespace

int main(int argc, char** argv) {
  CLI::App app{"reference_bench: the preference reference pass against a training forward; the start fingerprint"};
  std::string config_path;
  std::vector<std::string> overrides;
  int64_t pairs = 64, prompt = 16, answer = 24;
  bool hash_only = false;
  app.add_option("config", config_path, "config file (e.g. tiny.yml)")->required();
  app.add_option("overrides", overrides, "key=value overrides");
  app.add_option("--pairs", pairs, "pairs to score (a multiple of per_device_batch_size)");
  app.add_option("--prompt", prompt, "prompt tokens a pair");
  app.add_option("--answer", answer, "tokens of each answer");
  app.add_flag("--hash-only", hash_only, "only time the fingerprint of the model's weights");
  CLI11_PARSE(app, argc, argv);
  try {
    auto cfg = sg::config::load_config(sg::config::resolve_config_path(config_path, SHADOWGRAD_SOURCE_DIR "/configs"),
                                       overrides);
    cfg.dataset_type = sg::config::DatasetType::preference;
    cfg.use_dpo = true;
    cfg.dtype = sg::config::as_compute_dtype(sg::config::resolve_compute_dtype(cfg.dtype, cfg.hardware));
    sg::train::configure_threads(cfg.num_threads);
    if (hash_only) {
      const auto t = Clock::now();
      sg::model::Decoder model(sg::model::DecoderOptions::from_config(cfg));
      std::printf("model built in %.1f s\n", since(t));
      fingerprint(model);
      return 0;
    }
    if (pairs % cfg.per_device_batch_size != 0) throw sg::InputError("--pairs must be a multiple of per_device_batch_size");
    pass_against_forward(cfg, pairs, prompt, answer);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
  return 0;
}
