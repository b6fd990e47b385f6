#pragma once
// A step's accumulated gradient, copied out of the shadow tree, and the relative error the exactness tests compare
// with (test_accumulate.cpp, test_sft.cpp).
#include <algorithm>
#include <cmath>
#include <vector>

#include <ATen/ATen.h>

#include "config/Config.h"
#include "data/DataSource.h"
#include "model/Decoder.h"
#include "train/TrainStep.h"

#include "RelativeError.h"

namespace gradients {

struct Gradients {
  double loss;
  std::vector<at::Tensor> grads;  // fp32 copies of the shadow tree (or of p.grad())
};

// Step 0's microbatch loop on a fresh model of the config: the loss and the shadow tree it leaves.
inline Gradients accumulate_step0(const shadowgrad::config::Config& c) {
  using namespace shadowgrad;
  auto source = data::make_source(data::DataOptions::from_config(c));
  train::TrainStep step(train::StepOptions::from_config(c), model::Decoder(model::DecoderOptions::from_config(c)),
                        *source, c10::Device(c10::kCPU));
  auto acc = step.accumulate_batch(0);
  Gradients g{acc.loss, {}};
  for (const auto& s : step.accumulator().shadows()) g.grads.push_back(s.to(at::kFloat).clone());
  return g;
}

using relative_error::rel_diff;

// The worst of the loss's relative error and every tensor's rel_diff.
inline double max_rel_diff(const Gradients& a, const Gradients& b) {
  double worst = std::abs(a.loss - b.loss) / std::abs(b.loss);
  for (size_t i = 0; i < a.grads.size(); ++i) worst = std::max(worst, rel_diff(a.grads[i], b.grads[i]));
  return worst;
}

} // namespace gradients
