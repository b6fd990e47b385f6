#include "model/BackwardCall.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/utils.h>

#include "util/AutogradNode.h"

namespace shadowgrad::model {
namespace {

class BackwardCall : public torch::autograd::Node {
 public:
  explicit BackwardCall(std::function<void()> callback) : callback_(std::move(callback)) {}
  torch::autograd::variable_list apply(torch::autograd::variable_list&& grads) override {
    if (callback_) callback_();
    return std::move(grads);
  }
  void release_variables() override { callback_ = nullptr; }
  std::string name() const override { return "BackwardCall"; }

 private:
  std::function<void()> callback_;
};

} // namespace

at::Tensor on_backward(const at::Tensor& x, std::function<void()> callback) {
  if (!at::GradMode::is_enabled() || !x.requires_grad()) return x;
  at::Tensor out = x.detach();  // the same data, a node of its own
  auto node = util::make_node<BackwardCall>(std::move(callback));
  node->set_next_edges(torch::autograd::collect_next_edges(x));
  torch::autograd::set_history(out, node);
  return out;
}

} // namespace shadowgrad::model
