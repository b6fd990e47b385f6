// fold_bandwidth [--device cpu|cuda] [--numel N] [--pairs P] [--reps R]
// The fold's memory bandwidth against a plain copy's, measured side by side in one run: P alternating pairs of (R
// folds, R copies) of N elements. A fold reads the gradient and the shadow and writes the shadow (its bytes are
// counted so); the copy reads and writes an fp32 tensor of N elements (8 N bytes). On CUDA the fold is the one-pass
// kernel with the fused squared norm (accumulate/CudaFold.h), on the CPU the trainer's own loops (MixedAdd.h, and
// the rounding kernel for stochastic rounding). Prints one JSON line per case with each pair's figures and their
// median: fold_gbps, copy_gbps and fraction (= fold / copy).
// Cost: about P x 2 x R x (N x 10 bytes / bandwidth): under a second on a GPU, seconds on 2 CPU cores.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <torch/cuda.h>

#include "accumulate/CudaFold.h"
#include "accumulate/MixedAdd.h"
#include "accumulate/StochasticRounding.h"

using namespace shadowgrad::accumulate;

namespace {

struct Case {
  const char* name;
  c10::ScalarType shadow, gradient;
  bool stochastic;
};

double seconds_of(const std::function<void()>& body, int reps, bool cuda) {
  if (cuda) torch::cuda::synchronize();
  const auto start = std::chrono::steady_clock::now();
  for (int r = 0; r < reps; ++r) body();
  if (cuda) torch::cuda::synchronize();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

std::string list(const std::vector<double>& v) {
  std::string s;
  for (double x : v) s += fmt::format("{}{:.4g}", s.empty() ? "" : ", ", x);
  return "[" + s + "]";
}

} // namespace

int main(int argc, char** argv) {
  CLI::App app{"The fold's bandwidth against a plain copy's, in alternating pairs (see apps/fold_bandwidth.cpp)"};
  std::string device_name = "cpu";
  int64_t numel = int64_t{1} << 26;
  int pairs = 5, reps = 10;
  app.add_option("--device", device_name, "cpu or cuda")->check(CLI::IsMember({"cpu", "cuda"}));
  app.add_option("--numel", numel, "elements per tensor (default 2^26: 256 MiB in fp32)");
  app.add_option("--pairs", pairs, "alternating (fold, copy) pairs");
  app.add_option("--reps", reps, "folds (and copies) timed per pair");
  CLI11_PARSE(app, argc, argv);
  const bool cuda = device_name == "cuda";
  if (cuda && !torch::cuda::is_available()) {
    std::fprintf(stderr, "fold_bandwidth: --device cuda, but no CUDA device is visible\n");
    return 2;
  }
  if (cuda && !cuda_fold_built()) {
    std::fprintf(stderr, "fold_bandwidth: this build has no CUDA fold kernel (a CUDA LibTorch and nvcc at build time)\n");
    return 2;
  }
  const at::TensorOptions on(cuda ? at::Device(at::kCUDA) : at::Device(at::kCPU));
  const Case cases[] = {{"bf16 shadow, fp32 gradient, nearest", at::kBFloat16, at::kFloat, false},
                        {"bf16 shadow, fp32 gradient, stochastic", at::kBFloat16, at::kFloat, true},
                        {"fp32 shadow, bf16 gradient", at::kFloat, at::kBFloat16, false},
                        {"bf16 shadow, bf16 gradient, stochastic", at::kBFloat16, at::kBFloat16, true}};
  at::Tensor copy_src = at::randn({numel}, on), copy_dst = at::empty({numel}, on);
  for (const Case& c : cases) {
    at::Tensor shadow = at::zeros({numel}, on.dtype(c.shadow)), grad = (at::randn({numel}, on) * 1e-3).to(c.gradient);
    CudaTally tally;
    uint64_t window = 0;
    auto fold = [&] {
      const uint64_t key = rounding_key(1, {window++});
      if (cuda) {
        CudaFoldOptions o;
        o.stochastic = c.stochastic;
        o.key = key;
        o.micro = 0;  // the trainer measures the noise scale's norms by default
        cuda_fold_(shadow, grad, o, tally);
      } else if (c.stochastic) {
        round_add_(shadow, grad, key, Rounding::kStochastic);
      } else {
        double sq = 0;
        mixed_add_(shadow, grad, &sq);
      }
    };
    auto copy = [&] { copy_dst.copy_(copy_src); };
    fold();  // warm-up: allocations, first launch
    copy();
    const double fold_bytes = double(numel) * double(grad.element_size() + 2 * shadow.element_size());
    const double copy_bytes = double(numel) * 8.0;
    std::vector<double> fold_gbps, copy_gbps, fraction;
    for (int p = 0; p < pairs; ++p) {
      fold_gbps.push_back(fold_bytes * reps / seconds_of(fold, reps, cuda) / 1e9);
      copy_gbps.push_back(copy_bytes * reps / seconds_of(copy, reps, cuda) / 1e9);
      fraction.push_back(fold_gbps.back() / copy_gbps.back());
    }
    std::printf("%s\n",
                fmt::format("{{\"device\": \"{}\", \"case\": \"{}\", \"numel\": {}, \"pairs\": {}, \"reps\": {}, "
                            "\"fold_gbps\": {:.4g}, \"copy_gbps\": {:.4g}, \"fraction\": {:.4g}, \"fraction_min\": "
                            "{:.4g}, \"fraction_max\": {:.4g}, \"fold_gbps_pairs\": {}, \"copy_gbps_pairs\": {}}}",
                            device_name, c.name, numel, pairs, reps, median(fold_gbps), median(copy_gbps),
                            median(fraction), *std::min_element(fraction.begin(), fraction.end()),
                            *std::max_element(fraction.begin(), fraction.end()), list(fold_gbps), list(copy_gbps))
                    .c_str());
    std::fflush(stdout);
  }
  return 0;
}
