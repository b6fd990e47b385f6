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

// Sets the learning rate of every parameter group.
void set_learning_rate(torch::optim::Optimizer& optimizer, double lr);

} // namespace shadowgrad::train
