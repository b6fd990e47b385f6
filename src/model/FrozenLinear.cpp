#include "model/FrozenLinear.h"

#include <stdexcept>

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

// inputs: x, then the n weights, the n A's, the n B's, and the n biases when `biased`. Gradients flow to x, the A's
// and the B's; the weights and biases are frozen.
struct AdaptedLinearFunction : torch::autograd::Function<AdaptedLinearFunction> {
  static variable_list forward(AutogradContext* ctx, at::TensorList in, int64_t n, bool biased, double scale) {
    const at::Tensor& x = in[0];
    const auto dtype = x.scalar_type();
    const at::Tensor x2 = x.reshape({-1, x.size(-1)});
    const int64_t r = in[1 + n].size(0);
    // One GEMM for every A: u = x [A_1; ...; A_n]^T, [N, n r].
    const at::Tensor a = n > 1 ? at::cat(in.slice(1 + n, n), 0) : in[1 + n];
    const at::Tensor u = at::mm(x2, a.t());
    variable_list out;
    std::vector<int64_t> shape(x.sizes().begin(), x.sizes().end());
    for (int64_t i = 0; i < n; ++i) {
      const at::Tensor w = in[1 + i].to(dtype);
      at::Tensor y = biased ? at::addmm(in[1 + 3 * n + i].to(dtype), x2, w.t()) : at::mm(x2, w.t());
      y.addmm_(u.narrow(1, i * r, r), in[1 + 2 * n + i].t(), /*beta=*/1, /*alpha=*/scale);  // + scale (x A^T) B^T
      shape.back() = y.size(1);
      out.push_back(y.view(shape));
    }
    // The A's themselves, not their stacked copy: backward stacks them again (parameter-sized), so the graph holds
    // nothing per group beyond x and u (what the memory footprint counts).
    variable_list saved = {x2, u};
    for (int64_t i = 0; i < n; ++i) saved.push_back(in[1 + n + i]);      // the A's
    for (int64_t i = 0; i < n; ++i) saved.push_back(in[1 + 2 * n + i]);  // the B's
    ctx->save_for_backward(saved);
    std::vector<at::Tensor> weights(in.begin() + 1, in.begin() + 1 + n);  // the stored tensors themselves: no copy
    ctx->saved_data["weights"] = weights;
    ctx->saved_data["x_sizes"] = x.sizes().vec();
    ctx->saved_data["n"] = n;
    ctx->saved_data["biased"] = biased;
    ctx->saved_data["scale"] = scale;
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &x2 = saved[0], &u = saved[1];
    const auto weights = ctx->saved_data["weights"].toTensorVector();
    const int64_t n = ctx->saved_data["n"].toInt(), r = saved[2].size(0);
    const at::Tensor a = n > 1 ? at::cat(std::vector<at::Tensor>(saved.begin() + 2, saved.begin() + 2 + n), 0) : saved[2];
    const bool biased = ctx->saved_data["biased"].toBool();
    const double scale = ctx->saved_data["scale"].toDouble();
    const auto dtype = x2.scalar_type();
    std::vector<at::Tensor> dy(n), du(n);
    for (int64_t i = 0; i < n; ++i) {
      const at::Tensor& b = saved[2 + n + i];
      dy[i] = grads[i].defined() ? grads[i].reshape({-1, grads[i].size(-1)})
                                 : at::zeros({x2.size(0), b.size(0)}, x2.options());
      du[i] = at::mm(dy[i], b).mul_(scale);  // d(x A^T) = scale dy B, [N, r]
    }
    const at::Tensor du_all = n > 1 ? at::cat(du, 1) : du[0];
    variable_list out(1 + (biased ? 4 : 3) * n + 3);  // the tensors, then n, biased and scale
    if (ctx->needs_input_grad(0)) {
      // dx = sum_i dy_i W_i + du [A_1; ...; A_n], accumulated in the GEMMs' output (beta 1).
      at::Tensor dx = at::mm(du_all, a);
      for (int64_t i = 0; i < n; ++i) dx.addmm_(dy[i], weights[i].to(dtype));
      out[0] = dx.view(ctx->saved_data["x_sizes"].toIntVector());
    }
    const at::Tensor da = at::mm(du_all.t(), x2);  // [n r, in]
    for (int64_t i = 0; i < n; ++i) {
      out[1 + n + i] = da.narrow(0, i * r, r);
      out[1 + 2 * n + i] = at::mm(dy[i].t(), u.narrow(1, i * r, r)).mul_(scale);  // [out, r]
    }
    return out;
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

std::vector<at::Tensor> adapted_linear(const at::Tensor& x, const std::vector<AdaptedProjection>& projections,
                                       double scale) {
  const int64_t n = int64_t(projections.size());
  if (n == 0) throw std::invalid_argument("adapted_linear: no projection");
  const bool biased = projections[0].bias.defined();
  std::vector<at::Tensor> in = {x};
  for (const auto& p : projections) in.push_back(p.weight);
  for (const auto& p : projections) in.push_back(p.a);
  for (const auto& p : projections) in.push_back(p.b);
  for (const auto& p : projections) {
    if (p.bias.defined() != biased)
      throw std::invalid_argument("adapted_linear: every projection has a bias, or none does");
    if (biased) in.push_back(p.bias);
  }
  return AdaptedLinearFunction::apply(at::TensorList(in), n, biased, scale);
}

} // namespace shadowgrad::model
