// Memory: the tracking allocator's counts, no full fp32 gradient tree during GA (K=4 vs K=1; the
// shadow tree vs naive fp32 accumulation), weight-cast hoisting (same gradients, 2 bytes/param held),
// and the trainer's memory report, metrics and --memory-report.
#include <catch2/catch.hpp>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include <unistd.h>

#include <ATen/ATen.h>
#include <c10/core/CPUAllocator.h>
#include <torch/optim/optimizer.h>

#include "TinyConfig.h"
#include "TrainerProcess.h"
#include "accumulate/ShadowAccumulator.h"
#include "data/DataSource.h"
#include "memory/TrackingAllocator.h"
#include "model/Decoder.h"
#include "train/TokenLoss.h"
#include "train/TrainStep.h"

using namespace shadowgrad;
using memory::TrackingAllocator;
namespace fs = std::filesystem;

namespace {

TrackingAllocator& tracker() {
  TrackingAllocator::install();  // idempotent; each test case runs in its own process under ctest
  return TrackingAllocator::get();
}

const c10::Device kCpu(c10::kCPU);

// Peak bytes above the level before the model was built, over one optimizer step taken after a
// warm-up step (so the optimizer state exists, as in every later step of a run).
int64_t steady_step_peak(const config::Config& c) {
  auto& mem = tracker();
  const int64_t base = mem.current_bytes();
  auto source = data::make_source(data::DataOptions::from_config(c));
  train::TrainStep step(train::StepOptions::from_config(c), model::Decoder(model::DecoderOptions::from_config(c)),
                        *source, kCpu);
  step.run(0);
  mem.reset_peak();
  step.run(1);
  return mem.peak_bytes() - base;
}

int64_t param_count(const std::vector<at::Tensor>& params) {
  int64_t n = 0;
  for (const auto& p : params) n += p.numel();
  return n;
}

int64_t largest_numel(const std::vector<at::Tensor>& params) {
  int64_t n = 0;
  for (const auto& p : params) n = std::max(n, p.numel());
  return n;
}

trainer_process::Result trainer(const std::string& args) { return trainer_process::run(args); }

// The integer value of "key": N in a JSON text; -1 when absent.
int64_t json_int(const std::string& text, const std::string& key) {
  std::smatch m;
  if (!std::regex_search(text, m, std::regex("\"" + key + "\": (-?[0-9]+)"))) return -1;
  return std::stoll(m[1]);
}

const std::string& kTinyArgs = trainer_process::kTinyModel;

} // namespace

TEST_CASE("the tracking allocator counts every tensor's bytes, current and peak", "[memory][allocator]") {
  auto& mem = tracker();
  REQUIRE(TrackingAllocator::installed());
  REQUIRE(c10::GetCPUAllocator() == &mem);
  const int64_t base = mem.current_bytes();
  mem.reset_peak();
  {
    at::Tensor a = at::empty({1000}, at::kFloat);
    CHECK(mem.current_bytes() - base == 4000);
    {
      at::Tensor b = at::ones({250, 2}, at::kBFloat16);
      CHECK(mem.current_bytes() - base == 5000);
    }
    CHECK(mem.current_bytes() - base == 4000);
    CHECK(mem.peak_bytes() - base == 5000);
    mem.reset_peak();
    CHECK(mem.peak_bytes() - base == 4000);
  }
  CHECK(mem.current_bytes() == base);
  // raw_allocate() asserts data == context; raw_deallocate() must find our deleter.
  void* raw = c10::GetCPUAllocator()->raw_allocate(64);
  CHECK(mem.current_bytes() - base == 64);
  c10::GetCPUAllocator()->raw_deallocate(raw);
  CHECK(mem.current_bytes() == base);
}

TEST_CASE("the allocator's block cache reuses a freed block of the same size and counts it as not live",
          "[memory][allocator]") {
  auto& mem = tracker();
  mem.set_cache_limit(8 << 20);
  const int64_t base = mem.current_bytes(), hits = mem.cache_hits(), cached = mem.cached_bytes();
  void* first = nullptr;
  {
    at::Tensor a = at::empty({1 << 18}, at::kFloat);  // 1 MiB
    first = a.data_ptr();
  }
  CHECK(mem.current_bytes() == base);  // a cached block is not a live tensor
  CHECK(mem.cached_bytes() - cached == (1 << 20));
  {
    at::Tensor b = at::empty({1 << 17}, at::kDouble);  // the same 1 MiB: served from the cache
    CHECK(b.data_ptr() == first);
    CHECK(mem.cache_hits() - hits == 1);
    CHECK(mem.current_bytes() - base == (1 << 20));
    CHECK(mem.cached_bytes() == cached);
  }
  { at::Tensor small = at::empty({1000}, at::kFloat); }  // under 64 KiB: never cached
  CHECK(mem.cached_bytes() - cached == (1 << 20));
  mem.set_cache_limit(0);  // off: what it held is freed, and frees are no longer kept
  CHECK(mem.cached_bytes() == 0);
  { at::Tensor c = at::empty({1 << 18}, at::kFloat); }
  CHECK(mem.cached_bytes() == 0);
  CHECK(mem.current_bytes() == base);
}

TEST_CASE("no K-dependent gradient memory: a K=4 step's peak is within 5% of a K=1 step's", "[memory][ga]") {
  for (const char* grad_dtype : {"float32", "bfloat16"}) {
    auto c = tiny_config();
    set_key(c, "grad_dtype", grad_dtype);
    c.per_device_batch_size = 4;
    c.gradient_accumulation_steps = 1;
    const int64_t k1 = steady_step_peak(c);
    c.gradient_accumulation_steps = 4;
    const int64_t k4 = steady_step_peak(c);
    INFO("grad_dtype=" << grad_dtype << " K=1 peak " << k1 << " bytes, K=4 peak " << k4 << " bytes");
    CHECK(k1 > 0);
    CHECK(double(k4) <= 1.05 * double(k1));
  }
}

TEST_CASE("a bfloat16 shadow tree peaks below naive fp32 accumulation by 2 bytes/param minus one fp32 gradient",
          "[memory][ga]") {
  auto c = tiny_config();
  c.gradient_accumulation_steps = 4;
  c.per_device_batch_size = 2;
  c.grad_dtype = config::GradDtype::bfloat16;
  auto source = data::make_source(data::DataOptions::from_config(c));
  const data::Batch batch = source->examples(0, 0, c.local_batch());
  const double inv_tokens = 1.0 / double(batch.valid_tokens());
  auto& mem = tracker();

  // The engine: each microbatch's gradient folded into the bf16 shadow as autograd produces it.
  int64_t engine_peak = 0, params = 0, largest = 0;
  std::vector<at::Tensor> engine_grads;
  {
    model::Decoder model(model::DecoderOptions::from_config(c));
    params = param_count(model->parameters());
    largest = largest_numel(model->parameters());
    const int64_t base = mem.current_bytes();  // the weights; the shadow tree counts in the peak
    mem.reset_peak();
    accumulate::ShadowAccumulator acc(model->parameters(), at::kBFloat16);
    acc.begin();
    for (int64_t m = 0; m < c.gradient_accumulation_steps; ++m) {
      auto mb = batch.slice(m * c.per_device_batch_size, c.per_device_batch_size);
      (train::token_loss_sum(model->forward(mb.tokens), mb.targets) * inv_tokens).backward();
    }
    acc.end();
    engine_peak = mem.peak_bytes() - base;
    for (const auto& s : acc.shadows()) engine_grads.push_back(s.to(at::kFloat));
  }
  // Naive: autograd sums fp32 p.grad() over the microbatches, then each gradient is cast to bf16 and
  // its fp32 original freed at once (the kindest version of naive: never both full trees at a time).
  int64_t naive_peak = 0;
  std::vector<at::Tensor> naive_grads;
  {
    model::Decoder model(model::DecoderOptions::from_config(c));
    const int64_t base = mem.current_bytes();
    mem.reset_peak();
    for (int64_t m = 0; m < c.gradient_accumulation_steps; ++m) {
      auto mb = batch.slice(m * c.per_device_batch_size, c.per_device_batch_size);
      (train::token_loss_sum(model->forward(mb.tokens), mb.targets) * inv_tokens).backward();
    }
    std::vector<at::Tensor> cast;
    for (auto& p : model->parameters()) {
      cast.push_back(p.grad().to(at::kBFloat16));
      p.mutable_grad().reset();
    }
    naive_peak = mem.peak_bytes() - base;
    for (const auto& g : cast) naive_grads.push_back(g.to(at::kFloat));
  }
  const int64_t required_margin = 2 * params - 4 * largest;
  INFO("engine peak " << engine_peak << " B, naive peak " << naive_peak << " B, params " << params
                      << ", required margin " << required_margin << " B");
  REQUIRE(required_margin > 0);
  CHECK(naive_peak - engine_peak >= required_margin);
  // Both computed the same gradient (up to bf16 rounding of the per-microbatch folds).
  REQUIRE(engine_grads.size() == naive_grads.size());
  for (size_t i = 0; i < engine_grads.size(); ++i)
    CHECK((engine_grads[i] - naive_grads[i]).norm().item<double>() <= 2e-2 * naive_grads[i].norm().item<double>() + 1e-12);
}

TEST_CASE("hoist_weight_cast gives bit-identical gradients and training, and holds 2 bytes/param of bf16 weights",
          "[memory][hoist]") {
  // Under LoRA the fp32 base is frozen: its casts are hoisted too, once per step instead of in each microbatch's
  // forward and again in its backward.
  const bool lora = GENERATE(false, true);
  INFO("lora " << lora);
  auto c = tiny_config();
  c.dtype = config::ComputeDtype::bfloat16;  // fp32 master weights, bf16 compute: the case hoisting is for
  if (lora) c.lora_rank = 4;
  c.gradient_accumulation_steps = 4;
  c.per_device_batch_size = 1;
  c.hoist_weight_cast = false;
  auto source = data::make_source(data::DataOptions::from_config(c));
  auto hoisted = c;
  hoisted.hoist_weight_cast = true;

  train::TrainStep plain(train::StepOptions::from_config(c), model::Decoder(model::DecoderOptions::from_config(c)),
                         *source, kCpu);
  train::TrainStep hoist(train::StepOptions::from_config(hoisted),
                         model::Decoder(model::DecoderOptions::from_config(hoisted)), *source, kCpu);
  for (int64_t s = 0; s < 3; ++s) {
    // Every microbatch's graph shares the hoisted cast: K backwards through it must each deliver
    // their own fp32 gradient to the master weight, exactly as separate casts do.
    auto a = plain.accumulate_batch(s);
    auto b = hoist.accumulate_batch(s);
    CHECK(a.loss == b.loss);
    const auto& sa = plain.accumulator().shadows();
    const auto& sb = hoist.accumulator().shadows();
    for (size_t i = 0; i < sa.size(); ++i) CHECK(at::equal(sa[i], sb[i]));
    CHECK(hoist.accumulator().folds() == plain.accumulator().folds());
    plain.accumulator().step(plain.optimizer());
    hoist.accumulator().step(hoist.optimizer());
  }
  // After three updates, the weights are the same: the cache never served a stale cast.
  auto pa = plain.model()->parameters(), pb = hoist.model()->parameters();
  for (size_t i = 0; i < pa.size(); ++i) CHECK(at::equal(pa[i], pb[i]));

  // Memory: between microbatches the hoisted model holds a bf16 copy of every matmul weight (all
  // 2-D parameters but the embedding, whose rows are gathered before the cast), and under LoRA of the frozen ones
  // (the 2-D buffers but the embedding and the RoPE and mask tables).
  int64_t expected = 0;
  for (const auto& item : hoist.model()->named_parameters())
    if (item.value().dim() == 2 && item.key() != "embedding") expected += 2 * item.value().numel();
  const std::set<std::string> tables = {"embedding", "rope_cos", "rope_sin", "causal_mask"};
  for (const auto& item : hoist.model()->named_buffers())
    if (item.value().dim() == 2 && !tables.count(item.key())) expected += 2 * item.value().numel();
  auto& mem = tracker();
  auto mb = source->examples(9, 0, 1);
  auto held_after_one_microbatch = [&](train::TrainStep& step) {
    const int64_t base = mem.current_bytes();
    step.accumulator().begin();
    train::token_loss_sum(step.model()->forward(mb.tokens), mb.targets).backward();
    step.accumulator().end();
    const int64_t held = mem.current_bytes() - base;
    step.accumulator().zero_();
    return held;
  };
  const int64_t plain_held = held_after_one_microbatch(plain);
  const int64_t hoist_held = held_after_one_microbatch(hoist);
  INFO("held after one microbatch: plain " << plain_held << " B, hoisted " << hoist_held << " B");
  CHECK(hoist_held - plain_held == expected);
  CHECK(hoist.model()->weight_cache_bytes() == expected);
  CHECK(plain.model()->weight_cache_bytes() == 0);
  const int64_t before_clear = mem.current_bytes();
  hoist.model()->clear_weight_cache();
  CHECK(before_clear - mem.current_bytes() == expected);
}

TEST_CASE("a hoisted cast is recast after an in-place update, and never cached under no_grad", "[memory][hoist]") {
  auto o = model::DecoderOptions::from_config(tiny_config());
  o.compute_dtype = at::kBFloat16;
  o.hoist_weight_cast = false;
  auto h = o;
  h.hoist_weight_cast = true;
  model::Decoder plain(o), hoist(h);
  auto tokens = at::randint(0, o.vocab_size, {2, 8}, at::kLong);
  CHECK(at::equal(plain->forward(tokens), hoist->forward(tokens)));  // fills the cache
  {
    at::NoGradGuard no_grad;
    for (auto* m : {&plain, &hoist})
      for (auto& p : (*m)->parameters()) p.mul_(0.5);
  }
  auto after = hoist->forward(tokens);
  CHECK(at::equal(plain->forward(tokens), after));
  CHECK(after.requires_grad());
  hoist->clear_weight_cache();
  {
    at::NoGradGuard no_grad;
    hoist->forward(tokens);
  }
  // The no_grad forward cast afresh and cached nothing, so this forward must build a graph.
  auto with_grad = hoist->forward(tokens);
  with_grad.sum().backward();
  for (const auto& p : hoist->parameters()) CHECK(p.grad().defined());
}

TEST_CASE("a run writes peak_mem_bytes per step, memory_report.json and summary peak, and --memory-report writes nothing",
          "[memory][cli]") {
  const auto out = (fs::temp_directory_path() / ("sg_mem_" + std::to_string(::getpid()))).string();
  fs::remove_all(out);
  auto r = trainer("base.yml steps=3 log_period=1 gradient_accumulation_steps=2 grad_dtype=bfloat16 run_name=m"
                   " base_output_directory=" + out + kTinyArgs);
  INFO(r.output);
  REQUIRE(r.code == 0);
  CHECK_THAT(r.output, Catch::Contains("grad accumulator (shadow)") && Catch::Contains("peak, largest step"));
  CHECK_THAT(r.output, Catch::Contains(" MiB | eta"));  // the progress line shows the step's peak

  std::ifstream metrics(out + "/m/metrics.jsonl");
  std::string line;
  int lines = 0;
  int64_t max_step_peak = 0;
  while (std::getline(metrics, line)) {
    ++lines;
    const int64_t peak = json_int(line, "peak_mem_bytes");
    CHECK(peak > 0);
    max_step_peak = std::max(max_step_peak, peak);
  }
  CHECK(lines == 3);

  const std::string report = trainer_process::read_text(out + "/m/memory_report.json");
  const int64_t n = json_int(report, "param_count");
  REQUIRE(n > 0);
  CHECK(json_int(report, "params_bytes") == 4 * n);           // fp32 master weights
  CHECK(json_int(report, "optimizer_state_bytes") == 8 * n);  // AdamW: two fp32 moments
  CHECK(json_int(report, "grad_accumulator_bytes") == 2 * n); // bf16 shadow tree
  CHECK(json_int(report, "peak_step_bytes") == max_step_peak);
  CHECK(json_int(report, "peak_step_bytes") >= 14 * n);
  CHECK(json_int(report, "peak_bytes") >= json_int(report, "peak_step_bytes"));
  CHECK(json_int(trainer_process::read_text(out + "/m/summary.json"), "peak_mem_bytes") == json_int(report, "peak_bytes"));

  auto probe = trainer("base.yml --memory-report gradient_accumulation_steps=2 base_output_directory=" + out +
                       "/probe" + kTinyArgs);
  INFO(probe.output);
  CHECK(probe.code == 0);
  CHECK(json_int(probe.output, "param_count") == n);
  CHECK(json_int(probe.output, "grad_accumulator_bytes") == 4 * n);  // grad_dtype float32 by default
  CHECK(json_int(probe.output, "peak_step_bytes") > 0);
  CHECK(json_int(probe.output, "steps") == 1);
  CHECK_FALSE(fs::exists(out + "/probe"));
  fs::remove_all(out);
}
