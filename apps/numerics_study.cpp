// numerics_study: how far does each GA carry (grad_dtype x grad_accum_rounding) drift from the exact sum
// of K microbatch gradients? The study behind docs/numerics.md; bench/numerics_study.sh runs it and plots.
//
//   build/numerics_study base.yml [key=value ...] [--k 1,4,16,64,256,1024] [--seeds 4] [--out runs/numerics]
//
// Two cases, each over `seeds` seeds (each seed changes the data and the rounding bits):
//   model:      the config's model (default: configs/base.yml's) and data; microbatch m's gradient is that of its
//               token-loss sum divided by the valid tokens of all K microbatches, exactly as the trainer folds it
//               (with bf16 compute the addends are the bf16 gradients of the casts, read from fp32 .grad).
//   stagnation: 16384 elements, each receiving K same-sign addends a_e * U(0.5, 1.5) / K with log-normal a_e:
//               the sums are O(1) whatever K is, and each addend is 1/K of its element's sum.
// Each addend is folded into fp64 (the reference), fp32, and bf16/fp16 with round-to-nearest and stochastic
// rounding, with the engine's own kernels and keys. Written: <out>/<case>.tsv, one row per (K, format), with
// the means over seeds (and standard errors) of
//   rel_error = ||acc - exact|| / ||exact||  (all parameters as one vector)
//   bias      = sum_e sign(exact_e) (acc_e - exact_e) / sum_e |exact_e|  (negative: sums shrank toward zero)
//   underflow = the fraction of folded values that became 0 from nonzero (fp16)
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "accumulate/StochasticRounding.h"
#include "config/Config.h"
#include "config/ConfigLoader.h"
#include "config/Dtypes.h"
#include "data/DataSource.h"
#include "model/Decoder.h"
#include "train/Runtime.h"
#include "train/TokenLoss.h"
#include "util/Errors.h"

namespace {

using shadowgrad::accumulate::Rounding;
namespace acc = shadowgrad::accumulate;

struct Format {
  const char* name;
  c10::ScalarType dtype;
  Rounding rounding;
};

const Format kFormats[] = {{"fp32", at::kFloat, Rounding::kNearest},
                           {"bf16-nearest", at::kBFloat16, Rounding::kNearest},
                           {"bf16-stochastic", at::kBFloat16, Rounding::kStochastic},
                           {"fp16-nearest", at::kHalf, Rounding::kNearest},
                           {"fp16-stochastic", at::kHalf, Rounding::kStochastic}};
constexpr size_t kFormatCount = sizeof kFormats / sizeof *kFormats;

struct Measure {
  double rel_error = 0, bias = 0, underflow = 0;
};

// Where the study's time goes (printed per K): the model's forward+backward, the folds, the measurements.
struct Seconds {
  double model = 0, fold = 0, measure = 0;
} seconds;

double since(std::chrono::steady_clock::time_point& mark) {
  const auto now = std::chrono::steady_clock::now();
  const double s = std::chrono::duration<double>(now - mark).count();
  mark = now;
  return s;
}

// One carry per format plus the fp64 exact sum, folded the way ShadowState::fold folds: the first addend is
// copied (rounded), later ones added (sum in fp32, rounded once), keys (seed, window 0, fold number, parameter).
class Carries {
 public:
  Carries(const std::vector<at::Tensor>& like, uint64_t seed) : seed_(acc::rounding_key(seed, {0})) {
    for (const auto& t : like) {
      exact_.push_back(at::zeros(t.sizes(), at::kDouble));
      for (size_t f = 0; f < kFormatCount; ++f) carries_[f].push_back(at::zeros(t.sizes(), kFormats[f].dtype));
    }
  }

  void fold(size_t i, int64_t m, const at::Tensor& g) {
    exact_[i].add_(g);  // in double, converting g on the fly
    for (size_t f = 0; f < kFormatCount; ++f) {
      at::Tensor& c = carries_[f][i];
      if (kFormats[f].dtype == at::kFloat) {
        if (m == 0) c.copy_(g); else c.add_(g);
        continue;
      }
      const uint64_t key = acc::rounding_key(seed_, {0, uint64_t(m), uint64_t(i)});
      loss_[f] += m == 0 ? acc::round_copy_(c, g, key, kFormats[f].rounding)
                         : acc::round_add_(c, g, key, kFormats[f].rounding);
    }
  }

  // All formats at once: the reference's norm, signs and absolute sum are computed once per parameter.
  std::vector<Measure> measure() const {
    double ref2 = 0, abs_sum = 0, diff2[kFormatCount] = {}, signed_sum[kFormatCount] = {};
    for (size_t i = 0; i < exact_.size(); ++i) {
      const at::Tensor ref = exact_[i].flatten(), sign = ref.sign();
      ref2 += ref.dot(ref).item<double>();
      abs_sum += ref.abs().sum().item<double>();
      for (size_t f = 0; f < kFormatCount; ++f) {
        const at::Tensor d = carries_[f][i].flatten().to(at::kDouble).sub_(ref);
        diff2[f] += d.dot(d).item<double>();
        signed_sum[f] += d.dot(sign).item<double>();
      }
    }
    std::vector<Measure> out(kFormatCount);
    for (size_t f = 0; f < kFormatCount; ++f) {
      out[f].rel_error = ref2 > 0 ? std::sqrt(diff2[f] / ref2) : 0;
      out[f].bias = abs_sum > 0 ? signed_sum[f] / abs_sum : 0;
      out[f].underflow = loss_[f].elements > 0 ? double(loss_[f].underflowed) / double(loss_[f].elements) : 0;
    }
    return out;
  }

 private:
  uint64_t seed_;
  std::vector<at::Tensor> exact_;
  std::vector<at::Tensor> carries_[kFormatCount];
  acc::RoundingLoss loss_[kFormatCount];
};

// The model case for one seed and K: K microbatches of one sequence each, folded as the trainer folds them.
Carries model_case(const shadowgrad::config::Config& base, int64_t k, uint64_t seed) {
  using namespace shadowgrad;
  config::Config cfg = base;
  cfg.data_shuffle_seed = int64_t(seed);
  cfg.per_device_batch_size = 1;
  cfg.gradient_accumulation_steps = k;
  auto source = data::make_source(data::DataOptions::from_config(cfg));
  model::Decoder model(model::DecoderOptions::from_config(cfg));
  const auto params = model->parameters();
  Carries carries(params, seed);
  const data::Batch batch = source->examples(0, 0, k);
  const double inv_tokens = 1.0 / double(std::max<int64_t>(1, batch.valid_tokens()));
  auto mark = std::chrono::steady_clock::now();
  for (int64_t m = 0; m < k; ++m) {
    const data::Batch micro = batch.slice(m, 1);
    at::Tensor loss = cfg.loss_chunk_tokens > 0
                          ? train::linear_token_loss_sum(model->hidden(micro.tokens), model->output_weight(),
                                                         micro.targets, cfg.loss_chunk_tokens)
                          : train::token_loss_sum(model->forward(micro.tokens), micro.targets);
    (loss * inv_tokens).backward();
    seconds.model += since(mark);
    for (size_t i = 0; i < params.size(); ++i) {
      at::Tensor& g = params[i].mutable_grad();
      carries.fold(i, m, g.defined() ? g : at::zeros_like(params[i]));
      g.reset();
    }
    seconds.fold += since(mark);
  }
  return carries;
}

Carries stagnation_case(int64_t k, uint64_t seed) {
  const int64_t n = 1 << 14;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  const at::Tensor a = at::exp(at::normal(0.0, 1.0, {n}, gen));
  Carries carries({a}, seed);
  for (int64_t m = 0; m < k; ++m) carries.fold(0, m, a * (at::rand({n}, gen) + 0.5) / double(k));
  return carries;
}

std::vector<int64_t> parse_ks(const std::string& text) {
  std::vector<int64_t> ks;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    const int64_t k = std::stoll(item);
    if (k < 1) throw shadowgrad::InputError(fmt::format("--k: {} is not a positive integer", item));
    ks.push_back(k);
  }
  return ks;
}

struct Row {
  int64_t k;
  size_t format;
  std::vector<Measure> seeds;
};

std::pair<double, double> mean_sem(const std::vector<Measure>& ms, double Measure::*field) {
  double sum = 0, sum2 = 0;
  for (const auto& m : ms) sum += m.*field;
  const double mean = sum / double(ms.size());
  for (const auto& m : ms) sum2 += (m.*field - mean) * (m.*field - mean);
  const double sem = ms.size() > 1 ? std::sqrt(sum2 / double(ms.size() - 1) / double(ms.size())) : 0.0;
  return {mean, sem};
}

void write_table(const std::string& path, const std::string& title, const std::vector<Row>& rows) {
  std::ofstream out(path);
  out << "K\tformat\trel_error\trel_error_sem\tbias\tbias_sem\tunderflow\n";
  std::printf("\n%s (%zu seeds)\n%6s %-16s %12s %12s %13s %12s %10s\n", title.c_str(), rows.front().seeds.size(),
              "K", "format", "rel_error", "+-", "bias", "+-", "underflow");
  for (const auto& r : rows) {
    const auto [err, err_sem] = mean_sem(r.seeds, &Measure::rel_error);
    const auto [bias, bias_sem] = mean_sem(r.seeds, &Measure::bias);
    const auto [under, under_sem] = mean_sem(r.seeds, &Measure::underflow);
    out << fmt::format("{}\t{}\t{:.6g}\t{:.3g}\t{:.6g}\t{:.3g}\t{:.6g}\n", r.k, kFormats[r.format].name, err, err_sem,
                       bias, bias_sem, under);
    std::printf("%6lld %-16s %12.4g %12.2g %13.4g %12.2g %10.4g\n", static_cast<long long>(r.k),
                kFormats[r.format].name, err, err_sem, bias, bias_sem, under);
  }
  std::fflush(stdout);
}

template <class Case>
std::vector<Row> run_case(const std::vector<int64_t>& ks, int64_t seeds, Case&& make) {
  std::vector<Row> rows;
  for (int64_t k : ks) {
    std::vector<Row> at_k(kFormatCount);
    for (size_t f = 0; f < kFormatCount; ++f) at_k[f] = {k, f, {}};
    for (int64_t s = 0; s < seeds; ++s) {
      const Carries carries = make(k, uint64_t(s));
      auto mark = std::chrono::steady_clock::now();
      const auto measured = carries.measure();
      for (size_t f = 0; f < kFormatCount; ++f) at_k[f].seeds.push_back(measured[f]);
      seconds.measure += since(mark);
    }
    std::fprintf(stderr, "  K=%lld done (so far: model %.1f s, folds %.1f s, measuring %.1f s)\n",
                 static_cast<long long>(k), seconds.model, seconds.fold, seconds.measure);
    rows.insert(rows.end(), at_k.begin(), at_k.end());
  }
  return rows;
}

} // namespace

int main(int argc, char** argv) {
  CLI::App app{"numerics_study: accumulation error of each grad_dtype x rounding against an fp64 reference"};
  std::string config_path;
  std::vector<std::string> overrides;
  std::string ks_text = "1,4,16,64,256,1024", out_dir = "runs/numerics", cases = "model,stagnation";
  int64_t seeds = 4;
  app.add_option("config", config_path, "config file (e.g. base.yml)")->required();
  app.add_option("overrides", overrides, "key=value overrides");
  app.add_option("--k", ks_text, "comma-separated microbatch counts");
  app.add_option("--seeds", seeds, "seeds per K (data and rounding bits)")->check(CLI::PositiveNumber);
  app.add_option("--out", out_dir, "output directory");
  app.add_option("--cases", cases, "model,stagnation or one of them");
  CLI11_PARSE(app, argc, argv);
  try {
    auto cfg = shadowgrad::config::load_config(
        shadowgrad::config::resolve_config_path(config_path, SHADOWGRAD_SOURCE_DIR "/configs"), overrides);
    const auto ks = parse_ks(ks_text);
    cfg.dtype = shadowgrad::config::as_compute_dtype(shadowgrad::config::resolve_compute_dtype(cfg.dtype, cfg.hardware));
    shadowgrad::train::configure_threads(cfg.num_threads);
    std::filesystem::create_directories(out_dir);
    if (cases.find("stagnation") != std::string::npos)
      write_table(out_dir + "/stagnation.tsv", "stagnation: K same-sign addends of 1/K of the sum",
                  run_case(ks, seeds, [](int64_t k, uint64_t s) { return stagnation_case(k, s); }));
    if (cases.find("model") != std::string::npos)
      write_table(out_dir + "/model.tsv",
                  fmt::format("model: emb {} x {} layers, vocab {}, seq {}, dtype {}", cfg.base_emb_dim,
                              cfg.base_num_decoder_layers, cfg.vocab_size, cfg.max_target_length, cfg.dtype),
                  run_case(ks, seeds, [&](int64_t k, uint64_t s) { return model_case(cfg, k, s); }));
  } catch (const shadowgrad::InputError& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
  return 0;
}
