#include "model/Remat.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/utils.h>

#include "util/AutogradNode.h"

namespace shadowgrad::model {
namespace {

using torch::autograd::variable_list;

class RematBackward : public torch::autograd::Node {
 public:
  RematBackward(std::vector<at::Tensor> inputs, std::vector<bool> needs_grad, Segment segment)
      : inputs_(std::move(inputs)), needs_grad_(std::move(needs_grad)), segment_(std::move(segment)) {}

  variable_list apply(variable_list&& grads) override {
    if (!grads[0].defined()) return variable_list(inputs_.size());
    std::vector<at::Tensor> leaves;
    leaves.reserve(inputs_.size());
    for (size_t i = 0; i < inputs_.size(); ++i) leaves.push_back(inputs_[i].detach().requires_grad_(needs_grad_[i]));
    at::Tensor out;
    {
      at::AutoGradMode grad_on(true);
      out = segment_(leaves);
    }
    // The nested backward reaches every parameter the segment used; the leaves collect the inputs' gradients.
    torch::autograd::backward({out}, {grads[0]});
    variable_list result;
    result.reserve(leaves.size());
    for (auto& leaf : leaves) result.push_back(leaf.requires_grad() ? leaf.grad() : at::Tensor());
    return result;
  }
  void release_variables() override {
    inputs_.clear();
    segment_ = nullptr;
  }
  std::string name() const override { return "RematBackward"; }

 private:
  std::vector<at::Tensor> inputs_;  // detached: plain data, nothing for autograd to version-check
  std::vector<bool> needs_grad_;
  Segment segment_;
};

} // namespace

at::Tensor rematerialise(const std::vector<at::Tensor>& inputs, Segment segment) {
  if (!at::GradMode::is_enabled()) return segment(inputs);
  at::Tensor out;
  std::vector<at::Tensor> detached;
  std::vector<bool> needs_grad;
  for (const auto& t : inputs) {
    detached.push_back(t.detach());
    needs_grad.push_back(t.requires_grad());
  }
  {
    at::NoGradGuard no_grad;  // nothing inside is kept for backward
    out = segment(detached);
  }
  auto node = util::make_node<RematBackward>(detached, needs_grad, std::move(segment));
  node->set_next_edges(torch::autograd::collect_next_edges(inputs));
  torch::autograd::set_history(out, node);
  return out;
}

} // namespace shadowgrad::model
