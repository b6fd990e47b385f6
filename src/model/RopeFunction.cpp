#include "model/RopeFunction.h"

#include <stdexcept>

#include <ATen/ATen.h>
#include <ATen/record_function.h>
#include <fmt/format.h>
#include <torch/csrc/autograd/custom_function.h>

#include "kernels/Rope.h"
#include "model/Bf16Bits.h"

namespace shadowgrad::model {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;


struct RopeFunction : torch::autograd::Function<RopeFunction> {
  // x [B,T,H,D] -> [B,H,T,D]
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                            double scale, const at::Tensor& positions) {
    RECORD_FUNCTION("shadowgrad::rope", std::vector<c10::IValue>());  // a row of its own in profiler=trace
    auto xc = x.contiguous(), c = cos.contiguous(), s = sin.contiguous();
    // An empty `positions` stands for none (autograd's apply() cannot take an undefined tensor).
    auto p = positions.numel() > 0 ? positions.contiguous() : at::Tensor();
    ctx->save_for_backward({c, s});
    ctx->saved_data["scale"] = scale;
    if (p.defined()) ctx->saved_data["positions"] = p;
    const kernels::RopeShape shape{x.size(0), x.size(1), x.size(2), x.size(3),
                                   p.defined() ? p.data_ptr<int64_t>() : nullptr};
    auto y = at::empty({shape.batch, shape.heads, shape.length, shape.head_dim}, x.options());
    if (x.scalar_type() == at::kFloat)
      kernels::rope_forward(xc.data_ptr<float>(), c.data_ptr<float>(), s.data_ptr<float>(), y.data_ptr<float>(),
                            shape, float(scale));
    else
      kernels::rope_forward(bf16_bits(xc), bf16_bits(c), bf16_bits(s), bf16_bits(y), shape, float(scale));
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &c = saved[0], &s = saved[1];
    const float scale = float(ctx->saved_data["scale"].toDouble());
    // [B,H,T,D]; SDPA's backward hands a transposed view of [B,T,H,D], which the kernel reads as it lies.
    const auto g = grads[0].to(c.scalar_type());
    const bool in_x_order = !g.is_contiguous() && g.transpose(1, 2).is_contiguous();
    const auto gy = in_x_order ? g : g.contiguous();
    const at::Tensor p = ctx->saved_data.count("positions") ? ctx->saved_data["positions"].toTensor() : at::Tensor();
    const kernels::RopeShape shape{gy.size(0), gy.size(2), gy.size(1), gy.size(3),
                                   p.defined() ? p.data_ptr<int64_t>() : nullptr, in_x_order};
    auto gx = at::empty({shape.batch, shape.length, shape.heads, shape.head_dim}, gy.options());
    if (gy.scalar_type() == at::kFloat)
      kernels::rope_backward(gy.data_ptr<float>(), c.data_ptr<float>(), s.data_ptr<float>(), gx.data_ptr<float>(),
                             shape, scale);
    else
      kernels::rope_backward(bf16_bits(gy), bf16_bits(c), bf16_bits(s), bf16_bits(gx), shape, scale);
    return {gx, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

// The ATen expression the kernel replaces (for fp16, or tensors off the CPU).
at::Tensor rope_aten(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin, double scale,
                     const at::Tensor& positions) {
  const int64_t T = x.size(1), half = x.size(3) / 2;
  auto xt = x.transpose(1, 2);
  auto rotated = at::cat({-xt.slice(-1, half), xt.slice(-1, 0, half)}, -1);
  auto table = [&](const at::Tensor& t) {  // [T, D], or each token's row: [B, 1, T, D]
    return positions.defined() ? t.index_select(0, positions.flatten()).view({x.size(0), 1, T, -1}) : t.slice(0, 0, T);
  };
  auto y = xt * table(cos) + rotated * table(sin);
  return (scale == 1.0 ? y : y * scale).contiguous();
}

} // namespace

at::Tensor rope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin, double scale,
                const at::Tensor& positions) {
  if (x.dim() != 4 || x.size(3) % 2 != 0 || cos.dim() != 2 || cos.sizes() != sin.sizes() ||
      cos.size(0) < x.size(1) || cos.size(1) != x.size(3))
    throw std::invalid_argument(fmt::format("rope: x must be [B,T,H,D] with D even and cos, sin [>= T, D]; got x {}, "
                                            "cos {}, sin {}",
                                            c10::str(x.sizes()), c10::str(cos.sizes()), c10::str(sin.sizes())));
  const auto dtype = x.scalar_type();
  const bool fusable = (dtype == at::kFloat || dtype == at::kBFloat16) && cos.scalar_type() == dtype &&
                       sin.scalar_type() == dtype && x.device().is_cpu() && cos.device().is_cpu() &&
                       sin.device().is_cpu();
  if (positions.defined() && (positions.scalar_type() != at::kLong || positions.dim() != 2 ||
                              positions.size(0) != x.size(0) || positions.size(1) != x.size(1)))
    throw std::invalid_argument(fmt::format("rope: positions must be [B,T] int64 for x {}, got {}",
                                            c10::str(x.sizes()), c10::str(positions.sizes())));
  const bool on_cpu = !positions.defined() || positions.device().is_cpu();
  if (!(fusable && on_cpu)) return rope_aten(x, cos, sin, scale, positions);
  return RopeFunction::apply(x, cos, sin, scale, positions.defined() ? positions : at::empty({0}, at::kLong));
}

} // namespace shadowgrad::model
