#pragma once
// An identity whose backward runs a callback before the gradient passes on: how the model learns that autograd has
// reached a point of the graph (ZeRO-3 gathers a unit's weights again there, or frees them; docs/distributed.md).
//
//   x = on_backward(x, [] { /* runs when x's gradient arrives, before it flows on to x's producers */ });
//
// Returns `x` itself under no_grad or when x does not require grad (no backward will come).
#include <functional>

#include <ATen/core/Tensor.h>

namespace shadowgrad::model {

at::Tensor on_backward(const at::Tensor& x, std::function<void()> callback);

} // namespace shadowgrad::model
