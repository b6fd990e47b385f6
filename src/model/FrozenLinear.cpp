#include "model/FrozenLinear.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

namespace shadowgrad::model {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

struct FrozenLinearFunction : torch::autograd::Function<FrozenLinearFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight) {
    ctx->saved_data["weight"] = weight;  // the stored tensor itself: no copy
    return at::linear(x, weight.to(x.scalar_type()));
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const at::Tensor weight = ctx->saved_data["weight"].toTensor();
    const at::Tensor& dy = grads[0];
    return {at::matmul(dy, weight.to(dy.scalar_type())), at::Tensor()};
  }
};

} // namespace

at::Tensor frozen_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) {
  if (!x.requires_grad()) {  // no graph to build (evaluation, or a first layer fed by a frozen embedding)
    const auto w = weight.to(x.scalar_type());
    return bias.defined() ? at::linear(x, w, bias.to(x.scalar_type())) : at::linear(x, w);
  }
  auto y = FrozenLinearFunction::apply(x, weight);
  return bias.defined() ? y + bias.to(x.scalar_type()) : y;
}

} // namespace shadowgrad::model
