#include "model/RmsNormFunction.h"

#include <ATen/ATen.h>
#include <ATen/record_function.h>
#include <torch/csrc/autograd/custom_function.h>

#include "kernels/RmsNorm.h"
#include "model/Bf16Bits.h"

namespace shadowgrad::model {

namespace {

struct RmsNorm : torch::autograd::Function<RmsNorm> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x_in, const at::Tensor& weight,
                            double eps) {
    RECORD_FUNCTION("shadowgrad::rms_norm_forward", std::vector<c10::IValue>());  // a row in profiler=trace
    auto x = x_in.contiguous();
    auto w = weight.to(at::kFloat).contiguous();
    const int64_t dim = x.size(-1), rows = x.numel() / dim;
    auto y = at::empty_like(x);
    auto rstd = at::empty({rows}, x.options().dtype(at::kFloat));
    if (x.scalar_type() == at::kBFloat16)
      kernels::rms_norm_forward(bf16_bits(x), w.data_ptr<float>(), bf16_bits(y), rstd.data_ptr<float>(), rows, dim,
                                float(eps));
    else
      kernels::rms_norm_forward(x.data_ptr<float>(), w.data_ptr<float>(), y.data_ptr<float>(), rstd.data_ptr<float>(),
                                rows, dim, float(eps));
    ctx->save_for_backward({x, weight});
    ctx->saved_data["rstd"] = rstd;
    return y;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_output) {
    RECORD_FUNCTION("shadowgrad::rms_norm_backward", std::vector<c10::IValue>());
    auto saved = ctx->get_saved_variables();
    const auto& x = saved[0];
    const auto& weight = saved[1];
    auto rstd = ctx->saved_data["rstd"].toTensor();
    auto g = grad_output[0].to(x.scalar_type()).contiguous();
    auto w = weight.to(at::kFloat).contiguous();
    const int64_t dim = x.size(-1), rows = x.numel() / dim;
    auto dx = at::empty_like(x);
    auto dw = at::empty({dim}, x.options().dtype(at::kFloat));
    if (x.scalar_type() == at::kBFloat16)
      kernels::rms_norm_backward(bf16_bits(g), bf16_bits(x), w.data_ptr<float>(), rstd.data_ptr<float>(),
                                 bf16_bits(dx), dw.data_ptr<float>(), rows, dim);
    else
      kernels::rms_norm_backward(g.data_ptr<float>(), x.data_ptr<float>(), w.data_ptr<float>(),
                                 rstd.data_ptr<float>(), dx.data_ptr<float>(), dw.data_ptr<float>(), rows, dim);
    return {dx, dw.to(weight.scalar_type()), at::Tensor()};
  }
};

} // namespace

at::Tensor fused_rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  const bool fusable = (x.scalar_type() == at::kFloat || x.scalar_type() == at::kBFloat16) && x.device().is_cpu();
  if (fusable) return RmsNorm::apply(x, weight, eps);
  return rms_norm_op_chain(x, weight, eps);
}

at::Tensor rms_norm_op_chain(const at::Tensor& x, const at::Tensor& weight, double eps) {
  // For fp32 x, view_as gives x's two uses one node, so their gradients are summed before the residual's, as when
  // the norm is rematerialised (remat_policy=minimal): the same additions in the same order, so the same bits.
  auto xf = x.scalar_type() == at::kFloat ? x.view_as(x) : x.to(at::kFloat);
  auto normed = xf * at::rsqrt(xf.pow(2).mean(-1, true) + eps);
  return (normed * weight.to(at::kFloat)).to(x.scalar_type());
}

} // namespace shadowgrad::model
