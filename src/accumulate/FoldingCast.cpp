#include "accumulate/FoldingCast.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/utils.h>

#include "accumulate/ShadowState.h"
#include "util/AutogradNode.h"

namespace shadowgrad::accumulate {
namespace {

using torch::autograd::variable_list;

class FoldingCastBackward : public torch::autograd::Node {
 public:
  FoldingCastBackward(std::weak_ptr<ShadowState> state, size_t i, c10::ScalarType param_dtype)
      : state_(std::move(state)), i_(i), param_dtype_(param_dtype) {}

  variable_list apply(variable_list&& grads) override {
    const at::Tensor& g = grads[0];
    if (!g.defined()) return {at::Tensor()};
    auto state = state_.lock();
    if (state && state->open) {
      state->fold(i_, g);
      return {at::Tensor()};  // the parameter's AccumulateGrad receives nothing
    }
    return {g.to(param_dtype_)};
  }
  std::string name() const override { return "FoldingCastBackward"; }

 private:
  std::weak_ptr<ShadowState> state_;
  size_t i_;
  c10::ScalarType param_dtype_;
};

class FoldingGatherBackward : public torch::autograd::Node {
 public:
  FoldingGatherBackward(std::weak_ptr<ShadowState> state, size_t i, at::Tensor index, const at::Tensor& param)
      : state_(std::move(state)), i_(i), index_(std::move(index)), param_options_(param.options()),
        param_sizes_(param.sizes().vec()) {}

  variable_list apply(variable_list&& grads) override {
    const at::Tensor& g = grads[0];
    if (!g.defined()) return {at::Tensor()};
    auto state = state_.lock();
    if (state && state->open) {
      state->fold_rows(i_, index_, g);
      return {at::Tensor()};
    }
    return {at::zeros(param_sizes_, param_options_).index_add_(0, index_, g.to(param_options_.dtype()))};
  }
  std::string name() const override { return "FoldingGatherBackward"; }

 private:
  std::weak_ptr<ShadowState> state_;
  size_t i_;
  at::Tensor index_;  // plain int64 data, not a saved variable: nothing to release or check for versions
  c10::TensorOptions param_options_;
  std::vector<int64_t> param_sizes_;
};

// Connects `out` to `node`, whose one input edge is the parameter's gradient edge.
at::Tensor attach(at::Tensor out, const at::Tensor& param, const util::NodePtr& node) {
  node->set_next_edges(torch::autograd::collect_next_edges(param));
  torch::autograd::set_history(out, node);
  return out;
}

} // namespace

at::Tensor folding_cast(const std::shared_ptr<ShadowState>& state, size_t i, const at::Tensor& param,
                        c10::ScalarType dtype) {
  at::Tensor out = param.detach().to(dtype, /*non_blocking=*/false, /*copy=*/true);
  if (!at::GradMode::is_enabled() || !param.requires_grad()) return out;
  return attach(std::move(out), param,
                util::make_node<FoldingCastBackward>(state, i, param.scalar_type()));
}

at::Tensor folding_gather(const std::shared_ptr<ShadowState>& state, size_t i, const at::Tensor& param,
                          const at::Tensor& index, c10::ScalarType dtype) {
  at::Tensor out = param.detach().index_select(0, index).to(dtype);
  if (!at::GradMode::is_enabled() || !param.requires_grad()) return out;
  return attach(std::move(out), param,
                util::make_node<FoldingGatherBackward>(state, i, index, param));
}

} // namespace shadowgrad::accumulate
