#pragma once
// The next token from a row of logits: greedy (argmax) by default, or a draw at a temperature from the top_k most
// likely tokens and the top_p nucleus, in transformers' order (temperature, then top-k, then top-p). A draw comes from
// the sampler's own generator, seeded once, so a seed gives the same tokens run after run.
//
//   Sampler greedy({});                                   // temperature 0: argmax, the generator unused
//   Sampler s({.temperature = 0.7, .top_k = 50, .top_p = 0.9, .seed = 1});
//   int64_t next = s.next(logits);                        // logits [V], any float dtype
#include <cstdint>

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>

namespace shadowgrad::generate {

struct SamplingOptions {
  double temperature = 0;  // 0: greedy; else logits / temperature before the softmax
  int64_t top_k = 0;       // keep the k most likely tokens; 0: all
  double top_p = 1;        // keep the fewest most likely tokens whose probabilities sum to >= top_p; 1: all
  uint64_t seed = 0;

  bool greedy() const { return temperature == 0; }
  // InputError naming the option: a negative or non-finite temperature, top_k < 0, top_p outside (0, 1].
  void validate() const;
};

class Sampler {
 public:
  explicit Sampler(const SamplingOptions& options);
  int64_t next(const at::Tensor& logits);
  // The distribution a draw is made from ([V] fp32, zeros outside top-k and top-p); for tests.
  at::Tensor probabilities(const at::Tensor& logits) const;

 private:
  SamplingOptions options_;
  at::Generator gen_;
};

} // namespace shadowgrad::generate
