#include "generate/Sampler.h"

#include <cmath>
#include <limits>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <fmt/format.h>

#include "util/Errors.h"

namespace shadowgrad::generate {

void SamplingOptions::validate() const {
  if (!std::isfinite(temperature) || temperature < 0)
    throw InputError(fmt::format("temperature must be >= 0 (0: greedy), got {}", temperature));
  if (top_k < 0) throw InputError(fmt::format("top_k must be >= 0 (0: every token), got {}", top_k));
  if (!(top_p > 0 && top_p <= 1)) throw InputError(fmt::format("top_p must lie in (0, 1], got {}", top_p));
}

Sampler::Sampler(const SamplingOptions& options)
    : options_(options), gen_(at::make_generator<at::CPUGeneratorImpl>(options.seed)) {
  options_.validate();
}

at::Tensor Sampler::probabilities(const at::Tensor& logits) const {
  auto scores = logits.reshape({-1}).to(at::kCPU, at::kFloat) / options_.temperature;
  const int64_t V = scores.size(0);
  const double minus_inf = -std::numeric_limits<double>::infinity();
  if (options_.top_k > 0 && options_.top_k < V) {
    // Ties with the k-th score are kept, as transformers' TopKLogitsWarper keeps them.
    const auto kth = std::get<0>(scores.topk(options_.top_k)).min();
    scores = scores.masked_fill(scores < kth, minus_inf);
  }
  if (options_.top_p < 1) {
    // transformers' TopPLogitsWarper: sorted ascending, a token goes when the mass up to and including it is
    // <= 1 - top_p; the most likely token always stays.
    auto [sorted, order] = scores.sort(/*dim=*/0, /*descending=*/false);
    auto cumulative = sorted.softmax(0).cumsum(0);
    auto remove = cumulative <= 1 - options_.top_p;
    remove[V - 1] = false;
    scores = scores.masked_fill(at::zeros_like(remove).scatter_(0, order, remove), minus_inf);
  }
  return scores.softmax(0);
}

int64_t Sampler::next(const at::Tensor& logits) {
  if (options_.greedy()) return logits.reshape({-1}).argmax().item<int64_t>();
  return at::multinomial(probabilities(logits), 1, /*replacement=*/false, gen_).item<int64_t>();
}

} // namespace shadowgrad::generate
