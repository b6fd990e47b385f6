#pragma once
// Builds the torch::optim optimizer named by opt_type (adamw | adam | sgd) from its options.
//
//   auto optimizer = make_optimizer(OptimizerOptions::from_config(cfg), model->parameters());
#include <memory>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>

#include "train/OptimizerOptions.h"

namespace torch::optim {
class Optimizer;
}

namespace shadowgrad::train {

std::unique_ptr<torch::optim::Optimizer> make_optimizer(const OptimizerOptions& options,
                                                        const std::vector<at::Tensor>& params);

// Bytes of optimizer state make_optimizer's optimizer holds after its first update, for `param_elements` parameter
// elements of `weight_dtype`: known before training (AdamW/Adam: two moments; fused AdamW in state_dtype, else in
// the weight dtype; SGD without momentum: none). Created lazily, so it does not exist before that update.
int64_t optimizer_state_bytes_after_update(const OptimizerOptions& options, c10::ScalarType weight_dtype,
                                           int64_t param_elements);

// Sets the learning rate of every parameter group.
void set_learning_rate(torch::optim::Optimizer& optimizer, double lr);

} // namespace shadowgrad::train
