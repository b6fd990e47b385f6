#pragma once
// Builds the torch::optim optimizer named by opt_type (adamw | adam | sgd) from the config.
#include <memory>
#include <vector>

#include <ATen/core/Tensor.h>

namespace torch::optim {
class Optimizer;
}
namespace shadowgrad::config {
struct Config;
}

namespace shadowgrad::train {

std::unique_ptr<torch::optim::Optimizer> make_optimizer(const config::Config& cfg, const std::vector<at::Tensor>& params);

// Bytes of optimizer state make_optimizer's optimizer holds after its first update, for `param_elements` parameter
// elements: known from the config alone (AdamW/Adam: two moments; fused AdamW in adam_state_dtype, else in
// weight_dtype; SGD without momentum: none). Created lazily, so it does not exist before that update.
int64_t optimizer_state_bytes_after_update(const config::Config& cfg, int64_t param_elements);

// Sets the learning rate of every parameter group.
void set_learning_rate(torch::optim::Optimizer& optimizer, double lr);

} // namespace shadowgrad::train
